// One training step of N data-parallel workers, replayed on SimGrid: the
// strategies' messages as actors on a cluster of hosts behind one switch,
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
// What each strategy sends, per bucket of S bytes, in the real code's order:
//   ring  2(N−1) steps; in each, every rank sends S/N to its right
//         neighbour and receives S/N from its left (reduce-scatter, then
//         all-gather), a step starting when the previous one has arrived.
//   ps    every worker pushes S/K to each of K servers at once; a server
//         answers every worker with S/K once all N pushes of the bucket
//         have arrived (BSP); a worker's bucket is done when all K answers
//         are. Servers on hosts of their own (separate) or one on each
//         worker's host (colocated, K = N).
// A worker synchronizes one bucket at a time, in the order they become
// ready, as gradsync's communication thread does.
//
// SimGrid keeps one engine per process: SimulateStep runs once per process
// (sim/simulate_main.cc is one run).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sim/profile.h"

namespace gradsync {
namespace sim {

enum class Strategy { kRing, kParameterServer };

struct ClusterSpec {
  int workers = 2;
  int servers = 0;          // the PS's K; 0 for the ring
  bool colocated = false;   // the PS's servers on the workers' hosts
  double link_bytes_per_s = 0;
  double latency_s = 0;     // one way, host to host
};

struct SimulationOptions {
  Strategy strategy = Strategy::kRing;
  ClusterSpec cluster;
  StepProfile profile;
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
  int64_t busiest_link_bytes = 0;  // one direction, per step
  int64_t messages = 0;
};

// The alpha-beta time of synchronizing one bucket of `bytes` alone on an idle
// network: what SimulateStep gives for one bucket under CM02.
double AlphaBetaBucketSeconds(Strategy strategy, const ClusterSpec& cluster,
                              int64_t bytes);

// Checks the options (one message naming what is wrong), builds the
// platform, runs the step. Once per process.
absl::StatusOr<StepResult> SimulateStep(const SimulationOptions& options);

}  // namespace sim
}  // namespace gradsync
