// One training step of N data-parallel workers, replayed on SimGrid: the
// strategies' transfers as actors on a cluster of hosts, with the step's
// buckets arriving as the profile says backward makes them.
//
//                 spine                          (--oversubscription > 1:
//        ┌──────────┴──────────┐                  one uplink per ToR of
//       ToR 0       ...       ToR T-1             hosts_per_tor·B/ratio)
//    ┌────┴────┐
//   host 0 ... host H-1       each host: one split-duplex NIC of rate B to
//   ├─ rank 0                 its switch (one switch of full bisection by
//   ├─ ...                    default); with G ranks per host each rank has
//   └─ rank G-1               its own link of the intra-host rate into it
//                             (NVLink- or PCIe-like), so ranks of a host
//                             talk without the NIC and share it to others.
//
// Ranks are placed G consecutive per host (host = rank / G), as a launcher
// hands out LOCAL_RANK and as the hierarchical all-reduce groups them; the
// ring's neighbours are rank ± 1, so it crosses each host boundary once.
// PS servers sit on hosts of their own (separate) or on the workers' hosts
// (colocated). Routes are shortest paths over this graph (SimGrid's Dijkstra
// zone), so a transfer's shared resources are the links it crosses: the
// sender's and receiver's rank links, their NICs, and their ToRs' uplinks
// when it leaves its ToR.
//
// How the real code's traffic becomes SimGrid activities. The all-reduces
// forward bytes as soon as they arrive (cut-through: the ring per byte, the
// tree per slice), which a flow model cannot express message by message
// without one activity per chunk per step, millions at N = 1,024. So each
// pipelined transfer is one flow with the bytes the real code sends over
// that connection (it is what shares the links), and the order its last
// byte must wait for travels as empty "tail" messages that cost a latency
// and no bandwidth:
//   ring   per bucket, every rank streams its 2(N−1) segments (the real
//          split: S/N each, the first S mod N floats one larger) to its
//          right neighbour as one flow; one tail goes 2(N−1) hops round
//          the ring (the first byte of a segment crossing every step) and
//          the last segment follows it. The bucket is done when both are.
//   tree   the double binary trees of allreduce/algorithms/tree_allreduce.h
//          (BuildDoubleBinaryTrees, the real code's shapes): per tree and
//          edge one flow up (the reduce) and one down (the broadcast) of that
//          tree's half. A rank's reduce tail leaves for its parent once its
//          own flow and its children's tails are in; the root's broadcast
//          tail goes down the same way.
//   halving-doubling  the real code's rounds one after another (a round
//          ends when both its transfers have), with its partners and block
//          sizes, the fold of the extra ranks when N is no power of two.
//   clear to send (peer_exchange.h)  in every halving-doubling round where
//          both partners send (but the one with the previous round's single
//          peer) and on every tree edge, a rank's header leaves as it
//          enters (a message of no bytes), and a send above the eager
//          prefix moves the prefix at once and the rest once the peer's
//          header has arrived, so a round waits α - E/B where that is
//          positive, as the real rounds do.
//   per-message CPU (ClusterSpec::message_cpu_s, model_constants.h)  each
//          message a rank takes in (a halving-doubling round's, a tree
//          child's or parent's, a ring step's) costs software time run on
//          cores all ranks share; the ring then forwards every step's first
//          byte rank by rank (RingBucketSteps: N(2N-2) messages a bucket,
//          for the emulated cluster's N ≤ 16, not for N = 1,024).
//   token bucket (ClusterSpec::link_burst_bytes)  the emulated links' tbf
//          burst lets bytes leave a NIC at once after an idle spell; each
//          flow carries what the bucket did not cover.
//   hierarchical  hierarchical_allreduce.cc with R = G ranks per node: the
//          reduce-scatter inside the host (each rank sends shard j to local
//          rank j, all at once), halving-doubling of its shard among the
//          ranks of the same local index across hosts, the all-gather inside
//          the host.
//   allreduce  the selector (selecting_allreduce.h): per bucket the
//          candidate the real rule picks (allreduce/allreduce_table.h,
//          ChooseAllReduce, with the family's eager prefix) for the host
//          link's α and B, as given to --allreduce_alpha_us and
//          --allreduce_link_gbit; then that candidate's traffic.
//   ps     every worker pushes each server its keys of the bucket (the
//          real client's, sim/ps_plan.h) one after another on one stream
//          (each pays the latency: the client's pipelining of a stream is
//          not modelled, small beside a key's bytes unless keys are only a
//          few latencies' worth); a server answers a key to every worker
//          once its N pushes have arrived (BSP), so pushes into a server and
//          answers out of it overlap, as its full-duplex link lets them. A
//          worker pushes a bucket as soon as backward has made it, whatever
//          is still in flight (ps/ps_sync.cc). Servers separate or colocated.
// Under CM02 without cross-traffic an idle network of one rank per host
// then gives the α–β figures of allreduce/algorithms/cost_model.h for the
// ring and halving-doubling exactly, and for the tree its own reading of
// the same trees (simulate_test checks both).
//
// A PS of N identical workers (one profile, one link rate) is symmetric:
// `worker_group` workers (whole hosts: a multiple of G) can be one host with
// that many hosts' NIC rate sending that many times the bytes, which
// max-min sharing gives the same times (every rate and size scales alike)
// with that many times fewer activities. Separate placement only (a
// colocated server's own worker's share stays in its host, which a merged
// host would get wrong), and within one ToR.
//
// An all-reduce worker synchronizes one bucket at a time, in the order they
// become ready, as gradsync's communication thread does. SimGrid keeps one
// engine per process: SimulateStep runs once per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/compression.h"
#include "sim/profile.h"

namespace gradsync {
namespace sim {

enum class Strategy {
  kRing,
  kHalvingDoubling,
  kTree,
  kHierarchical,
  kSelecting,  // --sync=allreduce
  kParameterServer
};

// "ring", "halving_doubling", "tree", "hierarchical", "allreduce", "ps";
// InvalidArgument naming them.
absl::StatusOr<Strategy> ParseStrategy(const std::string& name);
const char* StrategyName(Strategy strategy);

struct ClusterSpec {
  int workers = 2;
  int servers = 0;         // the PS's K; 0 for an all-reduce
  bool colocated = false;  // the PS's servers on the workers' hosts (K = N)
  // BytePS's mix (--ps_colocated_servers): servers 0..c-1 inside workers
  // 0..c-1's hosts, the other K - c on hosts of their own.
  int colocated_servers = 0;
  double link_bytes_per_s = 0;
  double latency_s = 0;   // one way, NIC to NIC
  int worker_group = 1;   // PS, separate: workers merged per host (above)
  int gpus_per_host = 1;  // G ranks on each host, consecutive
  // Each rank's link into its host's fabric (G > 1 only): rate and one-way
  // latency rank to rank. A rank on another host is latency_s +
  // intra_latency_s away.
  double intra_bytes_per_s = 0;
  double intra_latency_s = 0;
  // 1: one switch of full bisection. Above 1: hosts_per_tor hosts per ToR
  // switch, whose uplink to one spine carries hosts_per_tor·B / ratio.
  double oversubscription = 1;
  int hosts_per_tor = 0;
  // The all-reduce transport's software time per message a rank takes in
  // (the wakeup that receives it, reduces it and sends the next one; on the
  // emulated cluster also the userspace relay's copy), run as work on
  // `cpu_cores` cores that every rank shares: the emulated cluster's ranks
  // all run on one machine, so a round in which N ranks each take a message
  // in costs N such times over the cores. 0: messages cost no CPU (the
  // ranks' hosts are the GPUs' own, their CPUs idle). sim/model_constants.h.
  double message_cpu_s = 0;
  int cpu_cores = 0;
  // What a peer exchange's message (halving-doubling, the tree) waits after
  // its software time for its rank's thread to run again, per rank per core
  // of the machine: workers / cpu_cores times this, whether or not the other
  // ranks are busy then: a cost of the machine's ranks, not of the messages
  // in flight (why the calibration needed it: docs/results/scaling.md).
  double message_wake_s = 0;
  // The ring's own step engine (ring_allreduce.cc: one poll loop over its two
  // neighbours, where the other all-reduces run peer_exchange.h's rounds):
  // its software time per step's message, on the same shared cores
  // (negative: message_cpu_s), and what its loop adds to each step's
  // latency with no core busy for it (the fitted values: sim/constants.json;
  // why the ring's loop has its own: docs/results/scaling.md).
  double ring_message_cpu_s = -1;
  double ring_step_overhead_s = 0;
  // The emulated links' token bucket (core/launch/netem.cc's tbf burst): a
  // host's NIC lets up to this many bytes out at once after it has been
  // idle, its tokens refilling at the rate while no bytes wait for it. A
  // send takes what tokens there are when it is posted; its simulated flow
  // carries the rest. The bucket starts full. 0: no bucket (a data
  // centre's NIC).
  double link_burst_bytes = 0;
};

struct RowSparseSpec {
  int64_t row_width = 0;  // floats per row; 0: dense buckets
  int64_t rows = 0;       // rows each worker touches per bucket and step
};

struct SimulationOptions {
  Strategy strategy = Strategy::kRing;
  ClusterSpec cluster;
  StepProfile profile;
  // PS: keys[bucket][server], each key's bytes (sim/ps_plan.h); empty: one
  // key of S/K per server and bucket.
  std::vector<std::vector<std::vector<int64_t>>> ps_keys;
  // --compression: what a bucket's gradient travels as, by the byte counts
  // of core/sync/compression.h. All-reduces (allreduce/bucket_reducer.h):
  // fp16/bf16 on the ring only, 16-bit values; random-k a dense all-reduce
  // of the k kept floats (every rank picks the same indices); top-k and
  // onebit a ring all-gather of every rank's serialized encoding, forwarded
  // whole hop by hop, whatever the strategy. PS (ps/key_compression.h, the
  // default --ps_pull): pushes of each key's encoding; answers 16-bit for
  // fp16/bf16, the union of the pushed indices for random-k (the same k) and
  // top-k (at most N·k, float32 once that is smaller), float32 for onebit.
  CompressionSpec compression;
  // --row_sparse: every bucket is one row-sparse tensor (an embedding table,
  // ParamSpec::sparse_row_width) of rows of row_width floats, of which each
  // worker touches `rows` per step (at most the table's; uniformly spread,
  // independently per worker). All-reduces (allreduce/bucket_reducer.h): a
  // ring all-gather of every rank's encoding size (8 bytes), then a ring
  // all-gather of the touched rows (core/sync/compression.h's kSparse
  // encoding with that row width) where the busiest link carries fewer
  // bytes than the dense ring's 2(N-1)/N of the bucket, else the dense
  // all-reduce. PS (ps/key_compression.h): each key pushes its touched rows
  // exactly, and the answer is their union over the N workers. Only with
  // --compression=none, as the real code sends rows.
  RowSparseSpec row_sparse;
  // --straggler: worker `straggler_rank` (-1: none) sleeps straggler_ms
  // before its step's compute (core/train/straggler.h).
  int straggler_rank = -1;
  double straggler_ms = 0;
  // --overlap_next_forward, as gradsync train's (default true): the trainer
  // leaves a step's synchronization to the next step, whose forward waits
  // for the buckets it reads, so the straggler's sleep before that forward
  // runs while this step's communication does; the step is then the longer
  // of the step without the sleep and the sleep with the straggler's
  // compute. false: the sleep delays the straggler's buckets and, under BSP,
  // every other worker waits for them.
  bool overlap_next_forward = true;
  // SimGrid's network model: "CM02" is max-min sharing with no TCP
  // correction (the alpha-beta figures exactly on an idle network); "LV08",
  // SimGrid's default, adds its TCP corrections.
  std::string network_model = "CM02";
};

struct StepResult {
  double step_ms = 0;     // forward + backward, the synchronization's tail,
                          // the optimizer (the straggler's sleep included)
  double compute_ms = 0;  // forward + backward + optimizer, no sleep
  double exposed_ms = 0;  // step_ms - compute_ms
  double sync_ms = 0;     // first bucket ready to last bucket done
  int64_t busiest_link_bytes = 0;    // one direction, per step, one real NIC
  int64_t busiest_uplink_bytes = 0;  // one direction, one ToR's uplink
  int64_t messages = 0;              // SimGrid communications, tails included
  int actors = 0;
};

// The alpha-beta time of synchronizing bucket `bucket` alone on an idle
// network (allreduce/algorithms/cost_model.h for the all-reduces), with the
// host link's α (NIC to NIC plus the intra-host latency when G > 1) and B;
// the hierarchical scheme's with the intra-host link inside and B/G across.
double AlphaBetaBucketSeconds(const SimulationOptions& options, int bucket);

// The selector's pick for bucket `bucket` (kRing, kHalvingDoubling or kTree),
// by the bytes the bucket's all-reduce moves.
Strategy SelectorPick(const SimulationOptions& options, int bucket);

// How bucket `bucket` of `bytes` float32 bytes crosses an all-reduce under
// options.compression: `dense_bytes` all-reduced by the algorithm, or, when
// `gathered`, one encoding of `dense_bytes` per rank ring-all-gathered.
struct WireBucket {
  int64_t dense_bytes = 0;
  bool gathered = false;
  // Row-sparse: the encodings' sizes (8 bytes a rank) are ring-all-gathered
  // first, so that every rank picks the same route.
  bool size_exchange = false;
};
WireBucket AllReduceWire(const CompressionSpec& compression, int64_t bytes);
// The serialized kSparse encoding (core/sync/compression.h) of `rows` rows
// of `row_width` floats out of a tensor of `numel` floats.
int64_t RowSparseBytes(int64_t numel, int64_t row_width, int64_t rows);
// A row-sparse bucket of `bytes` over `workers` ranks (bucket_reducer.h's
// route: gathered rows, or dense_bytes = bytes all-reduced).
WireBucket RowSparseWire(const RowSparseSpec& rows, int64_t bytes,
                         int workers);
// A row-sparse bucket's key of `key_bytes` (of a bucket of `bucket_bytes`):
// one worker's push of its touched rows in it, and the answer (their union
// over `workers`, in expectation).
int64_t RowSparsePushBytes(const RowSparseSpec& rows, int64_t key_bytes,
                           int64_t bucket_bytes);
int64_t RowSparseAnswerBytes(const RowSparseSpec& rows, int64_t key_bytes,
                             int64_t bucket_bytes, int workers);
// A PS key of `key_bytes` float32 bytes: what one worker's push and one
// answer to it carry, among `workers` pushing.
int64_t PsPushBytes(const CompressionSpec& compression, int64_t key_bytes);
int64_t PsAnswerBytes(const CompressionSpec& compression, int64_t key_bytes,
                      int workers);
// The most a PS with separate servers may merge on `cluster`: whole hosts
// of G ranks, all of them on one switch, one ToR's under a spine.
int LargestWorkerGroup(const ClusterSpec& cluster);

// Checks the options (one message naming what is wrong), builds the
// platform, runs the step. Once per process.
absl::StatusOr<StepResult> SimulateStep(const SimulationOptions& options);

}  // namespace sim
}  // namespace gradsync
