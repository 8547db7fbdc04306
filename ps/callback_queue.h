// Keeps gRPC's process-wide callback completion queue alive for the life of
// the process.
//
// On Linux, gRPC 1.51 runs callback-API reactions on an "alternative" queue
// shared by every callback server and channel, created when the first one
// appears and torn down when the last one goes. Tests and benchmarks start
// and stop whole clusters in a loop, and tearing that queue down and creating
// it again while gRPC still finishes a previous call's clean-up aborted the
// process now and then (grpc_cq_internal_unref: "assertion failed: prior >
// 0"). Holding one reference from
// the first use on means the queue is created once and never torn down.
#pragma once

namespace gradsync {

// Idempotent and thread-safe; cheap after the first call.
void KeepCallbackQueueAlive();

}  // namespace gradsync
