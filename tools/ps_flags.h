// Command-line flags of the parameter-server strategy and of `gradsync server`,
// declared once here (defined in ps_flags.cc) and read only through the
// functions below: the edge turns them, and the link the launcher emulates
// (tools/emulated_link.h), into ps/'s plain option structs, and ps/ reads no
// flag and no environment. The rules the flags are checked by live in
// ps/consistency.h and ps/settings.h, which link no flags.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "proto/parameter_server.pb.h"
#include "core/sync/gradient_sync.h"
#include "ps/consistency.h"
#include "ps/key_compression.h"
#include "ps/client/partitioner.h"
#include "ps/ps_sync.h"

ABSL_DECLARE_FLAG(std::string, ps_update);
ABSL_DECLARE_FLAG(int64_t, ps_chunk_kb);
ABSL_DECLARE_FLAG(int64_t, ps_message_kb);
ABSL_DECLARE_FLAG(int64_t, ps_stream_window_kb);
ABSL_DECLARE_FLAG(bool, ps_colocate);
ABSL_DECLARE_FLAG(int32_t, ps_colocated_servers);
ABSL_DECLARE_FLAG(std::string, ps_partition);
ABSL_DECLARE_FLAG(std::string, ps_bind);
ABSL_DECLARE_FLAG(std::string, ps_advertise_host);
ABSL_DECLARE_FLAG(double, ps_idle_timeout_s);
ABSL_DECLARE_FLAG(int64_t, ps_max_shard_mb);
ABSL_DECLARE_FLAG(std::string, ps_consistency);
ABSL_DECLARE_FLAG(int32_t, ps_staleness);
ABSL_DECLARE_FLAG(std::string, ps_pull);

namespace gradsync {

// The file that defines the --ps_* flags, as Abseil names a flag's file: the
// command line picks the flags its --help shows and the launcher the flags it
// hands on to workers and servers by it.
constexpr char kPsFlagsFile[] = "tools/ps_flags.cc";

// --ps_update, parsed (ps/consistency.h).
absl::StatusOr<ps::UpdateMode> UpdateModeFromFlags();

// --ps_consistency and --ps_staleness, checked against each other and
// against `update_mode` (SSP and ASP need the servers' optimizer).
absl::StatusOr<ConsistencyOptions> ConsistencyFromFlags(
    ps::UpdateMode update_mode);

// How many workers host a parameter server (workers 0..k-1, servers
// 0..k-1 of the job's K; the separate servers are k..K-1): --ps_colocate is
// every worker, --ps_colocated_servers=k the first k. Checked against the
// number of workers; the two flags together are refused.
absl::StatusOr<int> ColocatedServersFromFlags(int num_workers);
// The whole placement of a --sync=ps job of `num_workers` workers and
// `separate_servers` `gradsync server` processes, checked once before
// anything starts (by `gradsync launch`): the above, no separate servers
// beside --ps_colocate (they would hold no keys), and at least one server.
// It checks --ps_partition too.
absl::Status CheckServerPlacement(int num_workers, int separate_servers);
// --ps_partition, checked.
absl::StatusOr<PartitionPolicy> PartitionPolicyFromFlags();

// --ps_pull (ps/key_compression.h); combinations with --compression and
// --ps_update are checked by ResolvePsPull.
absl::StatusOr<PsPull> PsPullFromFlags();

// --ps_message_kb in bytes, checked against kMaxMessageBytes
// (ps/settings.h); 0: auto (ResolveMessageSize, ps/settings.h).
absl::StatusOr<int64_t> MessageBytesFromFlags();
// --ps_stream_window_kb in bytes (0: auto, ps/stream_window_rule.h), checked
// against kMaxStreamWindowBytes (ps/settings.h).
absl::StatusOr<int64_t> StreamWindowBytesFromFlags();
// --ps_chunk_kb in bytes (0: auto, ps/key_size_rule.h), checked.
absl::StatusOr<int64_t> ChunkBytesFromFlags();
// --ps_max_shard_mb in bytes, checked.
absl::StatusOr<int64_t> MaxShardBytesFromFlags();

// PsSyncOptions from the --ps_* flags and the link `gradsync launch --netem`
// emulates (LinkFiguresOfThisProcess), with the optimizer the trainer gave
// the context (SyncContext::optimizer). The registration of --sync=ps
// (ps_sync_registration.cc) and the tests' and benchmarks' mains use it.
absl::StatusOr<PsSyncOptions> PsSyncOptionsFromFlags(
    const SyncContext& context);

}  // namespace gradsync
