// The worker's side of the parameter server: registration, and per bucket a
// push of its keys to every server that holds some, fanned out concurrently
// with gRPC's callback API, together with the pull of their results; under
// --schedule=priority each key on its own, in priority order under a credit
// (PsClientOptions::priority). Nothing here blocks except WaitAll,
// WaitBucket, Register and Shutdown.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/parameter_server.pb.h"
#include "ps/client/partitioner.h"

namespace gradsync {

struct PsClientOptions {
  std::string job_id = "gradsync";
  int rank = 0;
  int num_workers = 1;
  ps::UpdateMode update_mode = ps::UPDATE_WORKER;
  ps::OptimizerConfig optimizer;  // server mode only
  // When pulls are answered (ps/server/bsp_key.h, ps/server/async_key.h); SSP
  // and ASP need server mode.
  ps::Consistency consistency = ps::CONSISTENCY_BSP;
  int32_t staleness = 0;  // SSP's bound
  // --ps_partition's name, sent at registration so that the servers can
  // check that every worker placed the keys the same way.
  std::string partition = "equal";
  // The first step and the servers' checkpoints (server mode).
  ps::CheckpointConfig checkpoint;
  // --compression (CompressionSpec::ToString) and --ps_pull resolved
  // (ps/key_compression.h), sent at registration: they fix what each key's
  // pushes and results carry, and every worker must give the same.
  std::string compression = "none";
  std::string pull = "dense";
  // Deadline of every RPC.
  absl::Duration timeout = absl::Seconds(60);
  // Largest payload of one message (--ps_message_kb).
  int64_t message_bytes = int64_t{1} << 20;
  // HTTP/2 window of the pull streams (--ps_stream_window_kb); 0: gRPC's
  // default with BDP probing.
  int64_t stream_window_bytes = int64_t{4} << 20;
  // With a window: keep gRPC's BDP probing on anyway (the rule's choice where
  // the link's bandwidth-delay product exceeds the connection's fixed 64 KiB
  // window, ps/stream_window_rule.h); the window is then only the start.
  bool bdp_probe = false;
  // --schedule=priority (ps/client/send_queue.h): every key is its own push
  // and its own pull, queued per server and direction and started lowest
  // offset first (read soonest by the next forward), with at most the
  // credit's bytes in flight per server and direction; a key's pull is
  // queued with its push, so the server still answers it without an extra
  // round trip. false (fifo): a bucket's keys go as one push and one pull
  // per server the moment the bucket is ready.
  bool priority = false;
  int64_t push_credit_bytes = 0;  // <= 0: no bound
  int64_t pull_credit_bytes = 0;
};

// What one step's calls moved and how long they took.
struct PsStepStats {
  double push_ms = 0;  // first push started .. last push acknowledged
  double pull_ms = 0;  // first pull started .. last pull received
  // Payload by server rank: float32 data, or an encoding's bytes as sent.
  std::vector<int64_t> bytes_to_server;
  std::vector<int64_t> bytes_from_server;
  // SSP/ASP: the lowest key clock the step's pulled parameters were read at
  // (Header.slowest_clock): they hold every worker's steps before it. -1
  // under BSP (always the step's own + 1) or when nothing was pulled.
  int64_t slowest_clock = -1;
  // SSP/ASP: how much earlier than BSP this worker's pulls were answered,
  // for those of earlier steps BSP has caught up with since the last step
  // (Header.wait_saved_us), averaged over the partition's keys.
  double wait_saved_ms = 0;
};

class PsClient {
 public:
  // `servers[k]` is server k's "host:port"; there must be one per server of
  // `partition`, which must outlive the client.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options, const Partition& partition,
      std::vector<std::string> servers);
  // Waits for calls still in flight (each has a deadline).
  ~PsClient();

  // Registers with every server at once. With --ps_update=server, worker 0
  // also sends each server the initial values of its keys from `params`
  // (the flat parameter buffer; may be null for other workers), unless the
  // servers resume from their own checkpoints.
  absl::Status Register(const float* params);

  // For every server holding keys of `bucket`: starts a push of those keys'
  // floats from `src` for `step`, and a pull of their results for `step`
  // into `dst` (both flat buffers, indexed by the layout's offsets). Returns
  // at once; `src` must stay unchanged and `dst` untouched until WaitAll.
  // `encoded` (may be null): per key id, the key's encoding
  // (ps/key_compression.h) pushed instead of its floats where it is not empty;
  // it too must stay unchanged until WaitAll. Results that come back encoded
  // are decoded into `dst`.
  void StartBucket(int bucket, int64_t step, const float* src, float* dst,
                   const std::vector<std::string>* encoded = nullptr);

  // Waits for every call started since the last WaitAll. Returns the first
  // error, naming the server, bucket, key and step; once one call fails the
  // others of the step are cancelled rather than left to their deadlines.
  absl::Status WaitAll(PsStepStats* stats);
  // Waits for the calls of `bucket` started since the last WaitAll, so its
  // results are in `dst` before the rest of the step; the step's first error
  // if one call failed (WaitAll still follows and reports it).
  absl::Status WaitBucket(int bucket);

  // Fails the step in flight and every later one with `why` (the job lost a
  // member: the step cannot complete), cancelling the calls in flight.
  // Thread-safe; the first reason stays.
  void Abort(const absl::Status& why);

  // Tells every server this worker is done after `steps` steps, at once;
  // appends each server's summary JSON to `summaries` (may be null).
  absl::Status Shutdown(int64_t steps, std::vector<std::string>* summaries);

  // Between steps, after the partition given to Create was replaced by one
  // with the same keys grouped into other buckets (a new bucket cap, for
  // --autotune): regroups the keys per bucket. FailedPrecondition while
  // calls are in flight.
  absl::Status RegroupBuckets();

  const std::vector<std::string>& servers() const;

 private:
  class Impl;
  explicit PsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
