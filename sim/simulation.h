// One training step of N data-parallel workers, replayed on SimGrid: the
// strategies' transfers as actors on a cluster of hosts behind one switch,
// with the step's buckets arriving as the profile says backward makes them.
//
//   worker 0 ──┐                      each host: one split-duplex link to the
//   worker 1 ──┤                      switch, of the given rate, with half the
//      ...     ├── switch ──┬── server 0 (PS, separate placement)
//   worker N−1─┘            └── server K−1
//
// The switch has full bisection: a transfer's only shared resources are
// its sender's uplink and its receiver's downlink, which is where the
// strategies differ (a PS server's downlink carries N pushes at once).
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
//   ps     every worker pushes each server its keys of the bucket (the
//          real client's, sim/ps_plan.h) one after another on one stream
//          (each pays the latency: the client's pipelining of a stream is
//          not modelled, small beside a key's bytes unless keys are only a
//          few latencies' worth); a server answers a key to every worker
//          once its N
//          pushes have arrived (BSP), so pushes into a server and answers
//          out of it overlap, as its full-duplex link lets them. A worker
//          pushes a bucket as soon as backward has made it, whatever is
//          still in flight (ps/ps_sync.cc). Servers separate or colocated.
// Under CM02 without cross-traffic an idle network then gives the α–β
// figures of allreduce/algorithms/cost_model.h for the ring and
// halving-doubling exactly, and for the tree its own reading of the same
// trees (simulate_test checks both).
//
// A PS of N identical workers (one profile, one link rate) is symmetric:
// `worker_group` workers can be one host with that many times the link's
// rate sending that many times the bytes, which max-min sharing gives the
// same times (every rate and size scales alike) with that many times fewer
// activities. Separate placement only: a colocated server's own worker's
// share stays in its host, which a merged host would get wrong.
//
// An all-reduce worker synchronizes one bucket at a time, in the order they
// become ready, as gradsync's communication thread does. SimGrid keeps one engine
// per process: SimulateStep runs once per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/profile.h"

namespace gradsync {
namespace sim {

enum class Strategy { kRing, kHalvingDoubling, kTree, kParameterServer };

// "ring", "halving_doubling", "tree", "ps"; InvalidArgument naming them.
absl::StatusOr<Strategy> ParseStrategy(const std::string& name);
const char* StrategyName(Strategy strategy);

struct ClusterSpec {
  int workers = 2;
  int servers = 0;          // the PS's K; 0 for an all-reduce
  bool colocated = false;   // the PS's servers on the workers' hosts
  double link_bytes_per_s = 0;
  double latency_s = 0;     // one way, host to host
  int worker_group = 1;     // PS, separate: workers merged per host (above)
};

struct SimulationOptions {
  Strategy strategy = Strategy::kRing;
  ClusterSpec cluster;
  StepProfile profile;
  // PS: keys[bucket][server], each key's bytes (sim/ps_plan.h); empty: one
  // key of S/K per server and bucket.
  std::vector<std::vector<std::vector<int64_t>>> ps_keys;
  // SimGrid's network model: "CM02" is max-min sharing with no TCP
  // correction (the alpha-beta figures exactly on an idle network); "LV08",
  // SimGrid's default, adds its TCP corrections.
  std::string network_model = "CM02";
};

struct StepResult {
  double step_ms = 0;       // forward + backward, the synchronization's tail,
                            // the optimizer
  double compute_ms = 0;    // forward + backward + optimizer
  double exposed_ms = 0;    // step_ms - compute_ms
  double sync_ms = 0;       // first bucket ready to last bucket done
  int64_t busiest_link_bytes = 0;  // one direction, per step, one real host
  int64_t messages = 0;     // SimGrid communications, tails included
  int actors = 0;
};

// The alpha-beta time of synchronizing bucket `bucket` alone on an idle
// network (allreduce/algorithms/cost_model.h for the all-reduces).
double AlphaBetaBucketSeconds(const SimulationOptions& options, int bucket);

// The largest worker_group that keeps at least `min_hosts` worker hosts
// and divides N (1 where none does); for the PS with separate servers.
// simulate_main merges all N (min_hosts 1): the fewest activities.
int AutomaticWorkerGroup(int workers, int min_hosts);

// Checks the options (one message naming what is wrong), builds the
// platform, runs the step. Once per process.
absl::StatusOr<StepResult> SimulateStep(const SimulationOptions& options);

}  // namespace sim
}  // namespace gradsync
