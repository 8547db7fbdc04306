// The parameter server's flags (see ps_flags.h).
#include "tools/ps_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "ps/settings.h"
#include "tools/emulated_link.h"

ABSL_FLAG(std::string, ps_update, "worker",
          "Where the optimizer runs with --sync=ps: 'worker' (servers return "
          "the averaged gradient, as all-reduce does) or 'server' (servers "
          "hold the parameters, run the optimizer and return new parameters).");
ABSL_FLAG(int64_t, ps_chunk_kb, 0,
          "Parameters larger than this are cut into chunks (keys) of at most "
          "this many KiB, the unit the servers are balanced by. 0 = auto: "
          "sized from the gradient and K so every server holds its share "
          "within 10% (ps/key_size_rule.h); the value and its reason are "
          "logged and recorded in the run's manifest.");
ABSL_FLAG(int64_t, ps_message_kb, 0,
          "Largest payload of one push/pull message in KiB (at most 3072, so "
          "messages stay under gRPC's default 4 MiB limit). 0 = auto: the "
          "stream window of the streams the messages travel on, held within "
          "[128, 1024] KiB (a gRPC stream has max(window, message) in flight; "
          "ps/stream_window_rule.h); 1024 where the link is not known; logged "
          "and recorded in the manifest.");
ABSL_FLAG(int64_t, ps_stream_window_kb, 0,
          "HTTP/2 flow-control window of every push and pull stream, both "
          "ends, in KiB, with gRPC's BDP probing off. 0 = auto: from the link "
          "(gradsync launch --netem; else $GRADSYNC_LINK, RATE[,LATENCY], "
          "which a job script may export) and the fan-in, 32 KiB at 100 Mbit/s "
          "without added latency, 4096 where the link is not known "
          "(ps/stream_window_rule.h); logged and recorded in the manifest.");
ABSL_FLAG(bool, ps_colocate, false,
          "Run parameter server r inside worker r (K = number of workers) "
          "instead of as separate `gradsync server` processes.");
ABSL_FLAG(int32_t, ps_colocated_servers, 0,
          "Workers 0..k-1 each run one parameter server in-process, beside "
          "the separate `gradsync server` processes of the job (`gradsync "
          "launch --servers=K-k`): K servers in all, keys over all of them "
          "(BytePS's placement spectrum). 0: separate servers only; k = "
          "workers with no separate servers is --ps_colocate.");
ABSL_FLAG(std::string, ps_partition, "equal",
          "How the keys' bytes are shared among the servers: 'equal' (1/K "
          "each) or 'balanced' (with --ps_colocated_servers, the serving "
          "workers get less, so that a serving worker's link carries what a "
          "separate server's does: BytePS's optimal shares, ps/README.md).");
ABSL_FLAG(std::string, ps_bind, "0.0.0.0:0",
          "Address a parameter server listens on; port 0 picks a free one.");
ABSL_FLAG(std::string, ps_advertise_host, "",
          "Host or IP a parameter server gives its peers; empty: the local "
          "address of the route to MASTER_ADDR.");
ABSL_FLAG(double, ps_idle_timeout_s, 600,
          "A parameter server exits with an error naming the missing workers "
          "when no worker has called it for this long (workers gone), and "
          "waits at most this long to join the job.");
ABSL_FLAG(int64_t, ps_max_shard_mb, 32768,
          "A parameter server refuses registrations whose keys add up to "
          "more than this many MiB (each is held two or three times over: "
          "sums, results or parameters, optimizer state).");

ABSL_FLAG(std::string, ps_consistency, "bsp",
          "When a worker may go on with --sync=ps: 'bsp' (once every worker "
          "pushed the step), 'ssp' (at most --ps_staleness steps ahead of the "
          "slowest worker) or 'asp' (never waits for others). ssp and asp "
          "need --ps_update=server.");
ABSL_FLAG(int32_t, ps_staleness, -1,
          "With --ps_consistency=ssp: how many steps a worker may run ahead "
          "of the slowest (0 to 1000; required with ssp, refused otherwise).");

ABSL_FLAG(std::string, ps_pull, "auto",
          "With --sync=ps, --ps_update=worker and --compression: what the "
          "servers send back. 'union': the averaged sum over the union of "
          "the pushed indices (exact; float32 once that is smaller); 'topk': "
          "its k largest (gTop-k; the rest is dropped, not fed back); "
          "'dense': the float32 average. 'auto': union for topk:R and "
          "randomk:R, the push's 16-bit format for fp16 and bf16 (rounded "
          "once on the server), dense otherwise. Row-sparse tensors are "
          "always pulled as their touched rows; with --ps_update=server "
          "pulls are parameters in float32.");

namespace gradsync {

absl::StatusOr<PsPull> PsPullFromFlags() {
  const std::string name = absl::GetFlag(FLAGS_ps_pull);
  // "same" is what a registration carries, not a user's choice.
  if (name == "same" || name == "") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --ps_pull=", name,
                     "; choose auto (the default), union, topk or dense"));
  }
  return ParsePsPull(name);
}

absl::StatusOr<ps::UpdateMode> UpdateModeFromFlags() {
  return ParseUpdateMode(absl::GetFlag(FLAGS_ps_update));
}

absl::StatusOr<ConsistencyOptions> ConsistencyFromFlags(
    ps::UpdateMode update_mode) {
  ConsistencyOptions options;
  absl::StatusOr<ps::Consistency> mode =
      ParseConsistency(absl::GetFlag(FLAGS_ps_consistency));
  if (!mode.ok()) return mode.status();
  options.mode = *mode;
  // -1: not given, which only SSP minds.
  const int32_t staleness = absl::GetFlag(FLAGS_ps_staleness);
  if (options.mode == ps::CONSISTENCY_SSP && staleness == -1) {
    return absl::InvalidArgumentError(
        "--ps_consistency=ssp needs --ps_staleness (how many steps a worker "
        "may run ahead of the slowest); it was not given");
  }
  options.staleness = staleness == -1 ? 0 : staleness;
  absl::Status checked =
      CheckConsistency(options.mode, options.staleness, update_mode);
  if (!checked.ok()) return checked;
  return options;
}

absl::StatusOr<int> ColocatedServersFromFlags(int num_workers) {
  const bool every_worker = absl::GetFlag(FLAGS_ps_colocate);
  const int32_t k = absl::GetFlag(FLAGS_ps_colocated_servers);
  if (every_worker && k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_colocate and --ps_colocated_servers=", k,
        " both say which workers serve; give one (--ps_colocate is "
        "--ps_colocated_servers=",
        num_workers, " without separate servers)"));
  }
  if (every_worker) return num_workers;
  if (k < 0 || k > num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_colocated_servers=", k, " must be in [0, ", num_workers,
        "]: at most one server per worker, and the "
        "job has ",
        num_workers, " workers"));
  }
  return k;
}

absl::StatusOr<PartitionPolicy> PartitionPolicyFromFlags() {
  return ParsePartitionPolicy(absl::GetFlag(FLAGS_ps_partition));
}

absl::Status CheckServerPlacement(int num_workers, int separate_servers) {
  ASSIGN_OR_RETURN(const int colocated, ColocatedServersFromFlags(num_workers));
  RETURN_IF_ERROR(PartitionPolicyFromFlags().status());
  if (absl::GetFlag(FLAGS_ps_colocate) && separate_servers > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_colocate puts a server in every worker and no keys on separate "
        "servers, but the job has ",
        separate_servers,
        " of them (--servers); drop --servers, or keep them with "
        "--ps_colocated_servers=",
        num_workers));
  }
  if (colocated == 0 && separate_servers == 0) {
    return absl::InvalidArgumentError(
        "--sync=ps needs parameter servers: start them with `gradsync launch "
        "--servers=K`, or let workers serve with --ps_colocate or "
        "--ps_colocated_servers=k");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MessageBytesFromFlags() {
  const int64_t kb = absl::GetFlag(FLAGS_ps_message_kb);
  if (kb < 0 || kb * 1024 > kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_message_kb=", kb, " must be in [0, ",
                     kMaxMessageBytes / 1024, "] (0: auto)"));
  }
  return kb * 1024;
}

absl::StatusOr<int64_t> StreamWindowBytesFromFlags() {
  const int64_t kb = absl::GetFlag(FLAGS_ps_stream_window_kb);
  if (kb < 0 || kb * 1024 > kMaxStreamWindowBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_stream_window_kb=", kb, " must be in [0, ",
                     kMaxStreamWindowBytes / 1024, "] (0: auto)"));
  }
  return kb * 1024;
}

absl::StatusOr<int64_t> ChunkBytesFromFlags() {
  const int64_t kb = absl::GetFlag(FLAGS_ps_chunk_kb);
  if (kb < 0 || kb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_chunk_kb=", kb, " must be in [1, 2^30], or 0 (auto)"));
  }
  return kb * 1024;
}

absl::StatusOr<int64_t> MaxShardBytesFromFlags() {
  const int64_t mb = absl::GetFlag(FLAGS_ps_max_shard_mb);
  if (mb < 1 || mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_max_shard_mb=", mb, " must be in [1, 2^30]"));
  }
  return mb << 20;
}

absl::StatusOr<PsSyncOptions> PsSyncOptionsFromFlags(
    const SyncContext& context) {
  PsSyncOptions options;
  ASSIGN_OR_RETURN(options.update_mode, UpdateModeFromFlags());
  ASSIGN_OR_RETURN(options.chunk_bytes, ChunkBytesFromFlags());
  ASSIGN_OR_RETURN(options.message_bytes, MessageBytesFromFlags());
  ASSIGN_OR_RETURN(options.stream_window_bytes, StreamWindowBytesFromFlags());
  ASSIGN_OR_RETURN(options.max_shard_bytes, MaxShardBytesFromFlags());
  options.link = LinkFiguresOfThisProcess();
  options.colocate = absl::GetFlag(FLAGS_ps_colocate);
  ASSIGN_OR_RETURN(options.colocated_servers,
                   ColocatedServersFromFlags(context.identity.world_size));
  // --ps_colocate is every worker; keep the two apart as in the options.
  if (options.colocate) options.colocated_servers = 0;
  ASSIGN_OR_RETURN(options.partition, PartitionPolicyFromFlags());
  ASSIGN_OR_RETURN(options.consistency,
                   ConsistencyFromFlags(options.update_mode));
  ASSIGN_OR_RETURN(options.pull, PsPullFromFlags());
  options.optimizer = context.optimizer;
  return options;
}

}  // namespace gradsync
