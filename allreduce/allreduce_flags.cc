// The all-reduce family's flags, each defined once with the reason for its
// default; allreduce_flags.h says who reads them.
#include "allreduce/allreduce_flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "allreduce/algorithms/peer_exchange.h"

// 256 KiB keeps the staging chunk (and the destination slice it is added into)
// in L2 while the kernel receives the next one, and still makes each send or
// receive call move enough to amortise the system call; bench/
// allreduce_benchmark.cc measures it (docs/compare.md has the sweep).
ABSL_FLAG(int, allreduce_chunk_kb, 256,
          "all-reduce pipeline chunk in KiB, for every algorithm of the "
          "family: the most bytes one send or receive call moves, and the "
          "size of the receive staging buffer that is reduced while the next "
          "chunk arrives (min 4)");
// The old name, from when only the ring had a chunk; still accepted.
ABSL_FLAG(int, ring_chunk_kb, 256,
          "old name of --allreduce_chunk_kb, still accepted (when both are "
          "given they must agree)");

// A ring step streams a whole segment; buffers this large let a sender run
// ahead of a receiver that is busy reducing. Linux caps the request at
// net.core.wmem_max/rmem_max (a warning says when it did).
ABSL_FLAG(int, ring_socket_buffer_kb, 4096,
          "SO_SNDBUF/SO_RCVBUF of each ring connection in KiB; 0 keeps the "
          "kernel's TCP buffer autotuning");

// auto is the fewer bytes on the busiest link, which is what the ring should
// do; gather and dense pin one route, for a study that compares them.
ABSL_FLAG(std::string, ring_row_sparse, "auto",
          "row-sparse buckets (an embedding table's gradient) on the ring "
          "family: auto (all-gather the touched rows when that puts fewer "
          "bytes on the busiest link than the dense all-reduce, decided from "
          "every rank's row count), gather (always), dense (always: the "
          "table densified, as a plain all-reduce does)");

// 0 takes the job's own grouping: the processes that share this host
// (LOCAL_WORLD_SIZE, set by `gradsync launch --nnodes`, torchrun, Slurm or
// Open MPI). A positive value emulates hosts of that many consecutive ranks,
// for a study on one machine.
ABSL_FLAG(int, allreduce_ranks_per_node, 0,
          "--sync=hierarchical: ranks per node (consecutive ranks form a "
          "node); 0: the processes on each host (LOCAL_WORLD_SIZE)");

// Zero probes them on the job's own connections at start-up
// (peer_link_probe.h); `gradsync netem --probe` prints a probed α and B to
// pass here instead.
ABSL_FLAG(double, allreduce_alpha_us, 0,
          "--sync=allreduce and tree: link latency α in microseconds for the "
          "α–β choice and the tree's slices; 0: probed on the job's "
          "connections at start-up");
ABSL_FLAG(double, allreduce_link_gbit, 0,
          "--sync=allreduce and tree: link bandwidth B in Gbit/s for the α–β "
          "choice and the tree's slices; 0: probed on the job's connections "
          "at start-up");

// peer_exchange.h: the eager prefix before a peer's clear to send. The
// default covers the clear's one-way flight on 1 Gbit/s links up to 2 ms (so
// no latency-bound buffer ever waits) and stops the incast that made
// halving-doubling miss its prediction on large buffers
// (docs/results/allreduce_family.md).
ABSL_FLAG(int, allreduce_eager_kb,
          static_cast<int>(gradsync::PeerExchange::kDefaultEagerBytes >> 10),
          "halving_doubling, tree, hierarchical, allreduce: KiB a send to a "
          "peer moves before that peer has entered the same step (its clear "
          "to send), so a rank that finishes a step early does not flood a "
          "link still busy with the step before (incast); 0: never wait");

namespace gradsync {
namespace {

// (This Abseil keeps IsSpecifiedOnCommandLine private: a value other than
// the default is what a flag changed.)
template <typename T>
bool Changed(const absl::Flag<T>& flag) {
  const absl::CommandLineFlag& handle = absl::GetFlagReflectionHandle(flag);
  return handle.CurrentValue() != handle.DefaultValue();
}

}  // namespace

AllReduceFlagValues ReadAllReduceFlags() {
  AllReduceFlagValues values;
  values.allreduce_chunk_kb = absl::GetFlag(FLAGS_allreduce_chunk_kb);
  values.ring_chunk_kb = absl::GetFlag(FLAGS_ring_chunk_kb);
  const bool new_name = Changed(FLAGS_allreduce_chunk_kb);
  const bool old_name = Changed(FLAGS_ring_chunk_kb);
  values.chunk_given = new_name || old_name;
  values.chunk_conflict =
      new_name && old_name && values.allreduce_chunk_kb != values.ring_chunk_kb;
  const int chunk_kb =
      new_name || !old_name ? values.allreduce_chunk_kb : values.ring_chunk_kb;
  values.chunk_bytes = int64_t{chunk_kb} << 10;
  values.socket_buffer_bytes = absl::GetFlag(FLAGS_ring_socket_buffer_kb) << 10;
  values.row_sparse = absl::GetFlag(FLAGS_ring_row_sparse);
  values.ranks_per_node = absl::GetFlag(FLAGS_allreduce_ranks_per_node);
  values.link.alpha_s = absl::GetFlag(FLAGS_allreduce_alpha_us) * 1e-6;
  values.link.bytes_per_s = absl::GetFlag(FLAGS_allreduce_link_gbit) * 1e9 / 8;
  values.eager_kb = absl::GetFlag(FLAGS_allreduce_eager_kb);
  return values;
}

}  // namespace gradsync
