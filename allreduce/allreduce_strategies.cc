// The registrations of the CPU all-reduce family: one --sync= name per row of
// the table (allreduce_table.h), each an AllReduceSync running that row's
// algorithm. This is the family's edge: the one place besides the programs'
// mains that reads the family's flags (allreduce_flags.h), turning them into
// the option structs the libraries take.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/hierarchical_allreduce.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "allreduce/allreduce_flags.h"
#include "allreduce/allreduce_sync.h"
#include "allreduce/allreduce_table.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {
namespace {

// The sync layer's options from the flags (InvalidArgument naming the flag
// for a value it does not take).
absl::StatusOr<AllReduceSyncOptions> SyncOptionsFromFlags(
    const AllReduceFlagValues& flags) {
  AllReduceSyncOptions options;
  if (flags.row_sparse == "auto") {
    options.row_sparse = AllReduceSyncOptions::RowSparseRoute::kAuto;
  } else if (flags.row_sparse == "gather") {
    options.row_sparse = AllReduceSyncOptions::RowSparseRoute::kGather;
  } else if (flags.row_sparse == "dense") {
    options.row_sparse = AllReduceSyncOptions::RowSparseRoute::kDense;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ring_row_sparse=", flags.row_sparse, ": use auto, gather or dense"));
  }
  if (flags.chunk_conflict) {
    return absl::InvalidArgumentError(
        absl::StrCat("--allreduce_chunk_kb=", flags.allreduce_chunk_kb,
                     " and --ring_chunk_kb=", flags.ring_chunk_kb,
                     " (its old name) disagree; give one"));
  }
  options.algorithm.chunk_bytes = flags.chunk_bytes;
  // Zero means "probe it"; a negative or infinite figure is not a link, and
  // taking it (or probing over it) would leave the manifest saying it ran.
  if (!(flags.link.alpha_s >= 0) || !std::isfinite(flags.link.alpha_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--allreduce_alpha_us=", flags.link.alpha_s * 1e6,
        " is not a latency: give microseconds >= 0, or 0 to probe it"));
  }
  if (!(flags.link.bytes_per_s >= 0) || !std::isfinite(flags.link.bytes_per_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--allreduce_link_gbit=", flags.link.bytes_per_s * 8 / 1e9,
        " is not a bandwidth: give Gbit/s > 0, or 0 to probe it"));
  }
  options.algorithm.link = flags.link;
  if (flags.chunk_given) options.chunk_source = "flag";
  options.socket_buffer_bytes = flags.socket_buffer_bytes;
  if (flags.eager_kb < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--allreduce_eager_kb=", flags.eager_kb,
        ": give the KiB a send may move before its peer's clear to send, "
        "or 0 to never wait"));
  }
  options.eager_bytes = int64_t{flags.eager_kb} << 10;
  return options;
}

// What only some algorithms need before they connect: hierarchical's nodes
// (from the flag or this host's processes), checked and logged; the tree's
// shape, logged.
absl::Status ResolveForKind(const SyncContext& context,
                            const AllReduceFlagValues& flags,
                            AllReduceKind kind, AlgorithmOptions& options) {
  const int world_size = context.identity.world_size;
  if (kind == AllReduceKind::kTree) {
    GS_LOG(INFO) << "tree: " << BuildDoubleBinaryTrees(world_size).shape
                 << " trees over " << world_size << " ranks (tree_allreduce.h)";
  }
  if (kind != AllReduceKind::kHierarchical) return absl::OkStatus();
  int ranks_per_node = flags.ranks_per_node;
  const char* source = "--allreduce_ranks_per_node";
  if (ranks_per_node <= 0) {
    ranks_per_node = context.identity.local_world_size;
    source = "the processes on this host (LOCAL_WORLD_SIZE)";
  }
  RETURN_IF_ERROR(Annotate(
      HierarchicalAllReduce::Check(world_size, ranks_per_node),
      absl::StrCat("--sync=hierarchical with ranks per node from ", source)));
  GS_LOG(INFO) << "hierarchical: " << ranks_per_node << " ranks per node, from "
               << source << "; " << world_size / ranks_per_node << " nodes";
  options.ranks_per_node = ranks_per_node;
  return absl::OkStatus();
}

// What CreateAllReduceSync refuses in the options, before it logs or
// creates anything: for `gradsync launch`, which checks the workers' flags
// once before it starts them (GradientSyncRegistry::CheckOptions).
absl::StatusOr<AllReduceSyncOptions> CheckedOptions(
    const SyncContext& context, const AllReduceEntry& entry,
    const AllReduceFlagValues& flags) {
  const bool ring = entry.kind == AllReduceKind::kRing;
  // 16-bit values on the wire are built into the ring only; the all-gather
  // (topk, onebit, row-sparse) and random-k's dense all-reduce of k floats
  // work with every algorithm (allreduce_sync.h).
  const CompressionMethod method = context.compression.method;
  if (!ring && (method == CompressionMethod::kFp16 ||
                method == CompressionMethod::kBf16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compression=", context.compression.ToString(),
                     " is not built for --sync=", entry.name,
                     "; use --sync=ring or --sync=ps"));
  }
  // The flags' own checks, again here: Python and the benchmarks make a
  // context without the command line.
  RETURN_IF_ERROR(ValidateScheduleOptions(context.schedule));
  if (context.schedule.partition_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--partition_kb: a partition of ", context.schedule.partition_bytes,
        " bytes is not a whole number of floats"));
  }
  return SyncOptionsFromFlags(flags);
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateAllReduceSync(
    const SyncContext& context, const AllReduceEntry& entry) {
  if (context.identity.world_size > 1 && context.rendezvous == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--sync=", entry.name, " with ", context.identity.world_size,
        " workers needs the coordinator to find ",
        entry.kind == AllReduceKind::kRing ? "the ring neighbours"
                                           : "its peers"));
  }
  const AllReduceFlagValues flags = ReadAllReduceFlags();
  ASSIGN_OR_RETURN(AllReduceSyncOptions options,
                   CheckedOptions(context, entry, flags));
  RETURN_IF_ERROR(
      ResolveForKind(context, flags, entry.kind, options.algorithm));
  return std::unique_ptr<GradientSync>(
      new AllReduceSync(context, entry, options));
}

// One registration per row, under the row's own name.
[[maybe_unused]] const bool registered = [] {
  for (const AllReduceEntry& entry : AllReduceTable()) {
    GradientSyncRegistry::Register(entry.name,
                                   [&entry](const SyncContext& context) {
                                     return CreateAllReduceSync(context, entry);
                                   });
    GradientSyncRegistry::RegisterCheck(
        entry.name, [&entry](const SyncContext& context) {
          return CheckedOptions(context, entry, ReadAllReduceFlags()).status();
        });
  }
  return true;
}();

}  // namespace
}  // namespace gradsync
