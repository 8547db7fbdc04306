// The α–β (Hockney) cost of one parameter-server step: push and pull of a
// gradient of S bytes by N workers through K servers, over links of latency α
// (seconds per message, one way) and bandwidth B (bytes per second in each
// direction at once). The all-reduces' formulas are in
// allreduce/algorithms/cost_model.h; `gradsync predict`
// (tools/predict_command.cc) answers from both for bench/cost_model.py, and
// the simulator may call them directly. Derivations beside each function in
// cost_model.cc; measured against emulated links in
// docs/results/ps-bandwidth-model.md.
//
// Where the bytes go (separate servers, N = 3 workers, K = 2 servers; server
// k holds the share f_k of the keys, f_0 + f_1 = 1):
//
//     push: S out of each worker        pull: S into each worker
//     worker 0 ─┐                    ┌─► worker 0
//     worker 1 ─┼─► server 0 ────────┼─► worker 1     server k's link:
//     worker 2 ─┘   server 1         └─► worker 2     N·f_k·S in, N·f_k·S out
//
// Push and pull use opposite directions of every link, so a step costs the
// busiest link's one-direction time, max(S, N·f_max·S)/B, the tail of the
// last key, and a round trip.
//
// A step of several buckets, their overlap with backward and the next
// forward, and the send order (fifo or priority): core/sync/schedule_cost_model.h
// charges each bucket or partition these functions' time (with no tail; the
// step's tail once, after its last transfer), through `gradsync predict`'s
// "step" query. A partition is charged the step's largest share: the keys of
// consecutive partitions spread over the servers.
//
// Every function is pure and thread-safe. Shares are fractions of S in
// [0, 1]; byte counts are doubles (a model's bytes, not a buffer's).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/link_cost.h"
#include "ps/client/partitioner.h"

namespace gradsync {

// What the server's keys add to a step: the last key of the step
// (`last_key_bytes`, at most --ps_chunk_kb) is final only once the slowest
// worker's part of it has arrived, and its last block (at most
// `message_bytes`, --ps_message_kb) then leaves its one server once per
// worker after the pushes end. 0 for `last_key_bytes` leaves the tail out
// (one bucket of a step that is not the last).
struct PsKeyTail {
  double last_key_bytes = 0;
  double message_bytes = 0;
};

// b of the tail: the block the server finalises last, min(key, message).
double PsTailBlockBytes(const PsKeyTail& keys);

// Separate servers, the busiest holding `largest_share` of the bytes.
// `reduce_bytes_per_s` (γ, the bytes of pushes one server sums per second)
// bounds the step too where it is slower than the link; 0: never binds.
double SeparatePsSeconds(int n, double bytes, const LinkCost& link,
                         double largest_share, const PsKeyTail& keys,
                         double reduce_bytes_per_s = 0);

// K = N servers, server r inside worker r, the busiest holding
// `largest_share` (1/N balanced).
double ColocatedPsSeconds(int n, double bytes, const LinkCost& link,
                          double largest_share, const PsKeyTail& keys);

// gradsync's mix (--ps_colocated_servers=c beside s separate servers):
// workers 0..c-1 also serve. `colocated_share` is the largest share of a
// serving worker's server, `separate_share` a separate server's (both 1/K
// with equal shares). Error where there is no server or c > N.
absl::StatusOr<double> MixedPsSeconds(int n, int colocated, int separate,
                                      double bytes, const LinkCost& link,
                                      double colocated_share,
                                      double separate_share,
                                      const PsKeyTail& keys);

// BytePS's optimum (Jiang et al., OSDI 2020, section 3.1): N workers that
// also serve and k separate servers, each machine's share chosen optimally;
// the bandwidth term alone (no latency, no tail).
double BytePsOptimumSeconds(int n, int k, double bytes, const LinkCost& link);

// The busiest server's share when `bytes`, cut into keys of at most
// `chunk_bytes`, go largest first to the least-loaded of `k` servers, as
// ps/client/partitioner.h places them (tensor boundaries aside): at least one
// key's share however large k is. 0 for no bytes.
double BalancedLargestShare(double bytes, int k, double chunk_bytes);

// The largest share that the serving workers' servers and the separate
// servers end up with when `bytes`, cut into keys of at most `chunk_bytes`,
// go largest first to the server least full against its ServerShares target
// (ps/client/partitioner.h). 0 for a kind with no server.
struct PlacedShares {
  double colocated = 0;
  double separate = 0;
};
absl::StatusOr<PlacedShares> PlaceShares(double bytes, int n, int colocated,
                                         int separate, PartitionPolicy policy,
                                         double chunk_bytes);

}  // namespace gradsync
