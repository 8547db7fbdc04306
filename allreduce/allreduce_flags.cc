#include "allreduce/allreduce_flags.h"

#include "absl/flags/flag.h"
#include "allreduce/algorithms/peer_exchange.h"

// 256 KiB keeps the staging chunk (and the destination slice it is added into)
// in L2 while the kernel receives the next one, and still makes each send or
// receive call move enough to amortise the system call; see
// bench/allreduce_benchmark.cc for the measurements behind it.
ABSL_FLAG(int, ring_chunk_kb, 256,
          "ring all-reduce pipeline chunk in KiB: the most bytes one send or "
          "receive call moves, and the size of the receive staging buffer "
          "that is reduced while the next chunk arrives (min 4)");

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
// (peer_link_probe.h);
// `gradsync netem --probe` prints a probed α and B to pass here instead.
ABSL_FLAG(double, allreduce_alpha_us, 0,
          "--sync=allreduce and tree: link latency α in microseconds for the "
          "α–β choice and the tree's slices; 0: probed on the job's "
          "connections at start-up");
ABSL_FLAG(double, allreduce_link_gbit, 0,
          "--sync=allreduce and tree: link bandwidth B in Gbit/s for the α–β "
          "choice and the tree's slices; 0: probed on the job's connections "
          "at start-up");

// peer_exchange.h: the eager prefix before a peer's clear to send. 256 KiB
// covers the clear's one-way flight on 1 Gbit/s links up to 2 ms (so no
// latency-bound buffer ever waits) and stops the incast that cost
// halving-doubling up to 2x its prediction on large buffers.
ABSL_FLAG(int, allreduce_eager_kb,
          static_cast<int>(gradsync::PeerExchange::kDefaultEagerBytes >> 10),
          "halving_doubling, tree, hierarchical, allreduce: KiB a send to a "
          "peer moves before that peer has entered the same step (its clear "
          "to send), so a rank that finishes a step early does not flood a "
          "link still busy with the step before (incast); 0: never wait");
