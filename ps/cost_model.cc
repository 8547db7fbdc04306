// The parameter server's α–β formulas (see cost_model.h), each beside its
// derivation. S is the gradient's bytes, N the workers, K the servers, f_k
// the share of the keys server k holds (1/K balanced).
#include "ps/cost_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gradsync {
namespace {

// Keys of at most `chunk` bytes covering `bytes`, largest first (the whole
// ones, then the rest).
std::vector<double> KeysOf(double bytes, double chunk) {
  if (bytes <= 0 || chunk <= 0) return {};
  const double whole = std::floor(bytes / chunk);
  std::vector<double> keys(static_cast<size_t>(whole), chunk);
  const double rest = bytes - chunk * whole;
  if (rest > 0) keys.push_back(rest);
  return keys;
}

// A worker that also serves `share` of the bytes: per step and direction its
// link carries its pushes to the other servers, (1 - f)·S, and its server's
// answers to the N-1 other workers, (N-1)·f·S, together S + (N-2)·f·S. The
// answers follow the pushes as they arrive, so, as in the ring, either the
// link stays busy with both (a push's latency hidden behind the answers to
// earlier keys, the last answer arriving α after it left), or the answers
// wait out a push's latency after the node's own pushes left:
//   max((S + (N-2)·f·S)/B + α,  2α + (1 - f)·S/B).
double ServingWorkerSeconds(int n, double bytes, double share,
                            const LinkCost& link) {
  const double busy = (bytes + (n - 2) * share * bytes) / link.bytes_per_s;
  const double pushes = (1 - share) * bytes / link.bytes_per_s;
  return std::max(busy + link.alpha_s, 2 * link.alpha_s + pushes);
}

}  // namespace

double PsTailBlockBytes(const PsKeyTail& keys) {
  return std::min(keys.last_key_bytes, keys.message_bytes);
}

// Every worker pushes its whole gradient (S out of its link) and pulls the
// whole average (S in); server k's link takes N·f_k·S in and sends as much
// out. Push and pull use opposite directions of every link and, with many
// keys, pipeline (one key's pull runs while the next is pushed), so a step
// costs the busier link's one-direction time, the tail and a round trip:
//   T = max(S, N·f_max·S)/B + N·b/B + 2α,   b = min(c, m).
// The tail: a key lives on one server, so the last key's last block leaves
// that one server N times (once per worker) after the pushes end, whatever K
// is. (A form with max(c, N·f_max·c) is N times too small for K = N balanced
// servers.) With γ the bytes a server sums per second, the first term is
// max(max(S, N·f_max·S)/B, N·f_max·S/γ): hidden behind the link unless the
// server's CPU is the slower.
// K = 1: T grows as N. K = N balanced: T ≈ S/B, half the ring's
// 2(N-1)/N·S/B (the BytePS argument for spare server bandwidth).
double SeparatePsSeconds(int n, double bytes, const LinkCost& link,
                         double largest_share, const PsKeyTail& keys,
                         double reduce_bytes_per_s) {
  const double server_bytes = n * largest_share * bytes;
  double busiest = std::max(bytes, server_bytes) / link.bytes_per_s;
  if (reduce_bytes_per_s > 0) {
    busiest = std::max(busiest, server_bytes / reduce_bytes_per_s);
  }
  const double tail = n * PsTailBlockBytes(keys) / link.bytes_per_s;
  return busiest + tail + 2 * link.alpha_s;
}

// Colocated (K = N, server r inside worker r): ServingWorkerSeconds, which at
// f = 1/N is the ring's bandwidth term 2(N-1)/N·S/B with 2 latencies instead
// of 2(N-1), plus the separate servers' tail less the copy that stays inside
// the node:
//   T = max(2(N-1)/N·S/B + α,  2α + (N-1)/N·S/B) + (N-1)·b/B.
// (Charging 2α on top of the bandwidth term ran below the measured times:
// docs/results/allreduce_family.md.) Separate servers keep both latencies:
// a worker's pushes and its results use opposite directions of its link, so
// nothing is sent while a push is in flight. With fewer keys than nodes the
// busiest node's share exceeds 1/N and its link carries S + (N-2)·f_max·S.
double ColocatedPsSeconds(int n, double bytes, const LinkCost& link,
                          double largest_share, const PsKeyTail& keys) {
  if (n <= 1) return 0;
  const double tail = (n - 1) * PsTailBlockBytes(keys) / link.bytes_per_s;
  return ServingWorkerSeconds(n, bytes, largest_share, link) + tail;
}

// The mix: c serving workers, s separate servers, K = c + s. Per step and
// direction a serving worker's link carries S + (N-2)·f_c·S (as colocated), a
// worker that does not serve S, a separate server N·f_s·S; the last two carry
// one kind of traffic each way and pay both latencies as separate servers do:
//   T = max(serving,  max(N·f_s·S, S)/B + 2α) + (N-1)·b/B
// (the second term only where there are separate servers or workers that do
// not serve), with the colocated tail: the busiest link is a serving
// worker's, whose own copy of its last block stays inside. c = N, s = 0 is
// the colocated formula; c = 0 the separate one. c = N with s separate is
// BytePS's layout: with equal shares T ≥ BytePsOptimumSeconds, with
// ServerShares' balanced ones it is BytePS's optimum.
absl::StatusOr<double> MixedPsSeconds(int n, int colocated, int separate,
                                      double bytes, const LinkCost& link,
                                      double colocated_share,
                                      double separate_share,
                                      const PsKeyTail& keys) {
  if (colocated < 0 || separate < 0 || colocated + separate < 1 ||
      colocated > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps cost model: ", colocated, " colocated and ", separate,
        " separate servers for ", n,
        " workers; need at least one server and at most one per worker"));
  }
  if (colocated == 0) {
    return SeparatePsSeconds(n, bytes, link, separate_share, keys);
  }
  // The only worker's own server: nothing crosses a link.
  if (n == 1 && separate == 0) return 0.0;
  double seconds = ServingWorkerSeconds(n, bytes, colocated_share, link);
  if (separate > 0 || colocated < n) {
    const double one_way =
        std::max(separate > 0 ? n * separate_share * bytes : 0.0, bytes);
    seconds = std::max(seconds, one_way / link.bytes_per_s + 2 * link.alpha_s);
  }
  return seconds + (n - 1) * PsTailBlockBytes(keys) / link.bytes_per_s;
}

// With each machine's share chosen optimally the busiest link carries
//   T = 2N(N-1)·S / ((N² + kN - 2k)·B),
// the colocated 2(N-1)/N·S/B at k = 0 and the separate S/B at k = N.
double BytePsOptimumSeconds(int n, int k, double bytes, const LinkCost& link) {
  if (n <= 1) return 0;
  const double nn = n;
  return 2 * nn * (nn - 1) * bytes /
         ((nn * nn + k * nn - 2.0 * k) * link.bytes_per_s);
}

double BalancedLargestShare(double bytes, int k, double chunk_bytes) {
  const std::vector<double> keys = KeysOf(bytes, chunk_bytes);
  if (keys.empty() || k < 1) return 0;
  std::priority_queue<double, std::vector<double>, std::greater<double>> loads;
  for (size_t i = 0; i < std::min<size_t>(k, keys.size()); ++i) loads.push(0);
  double most = 0;
  for (double key : keys) {
    const double load = loads.top() + key;
    loads.pop();
    loads.push(load);
    most = std::max(most, load);
  }
  return most / bytes;
}

absl::StatusOr<PlacedShares> PlaceShares(double bytes, int n, int colocated,
                                         int separate, PartitionPolicy policy,
                                         double chunk_bytes) {
  absl::StatusOr<std::vector<double>> targets =
      ServerShares(policy, n, colocated, separate);
  if (!targets.ok()) return targets.status();
  std::vector<double> loads(targets->size(), 0.0);
  for (double key : KeysOf(bytes, chunk_bytes)) {
    // The server least full against its target once it takes the key; the
    // first on a tie; never one whose target is 0.
    size_t best = 0;
    double best_fill = std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < loads.size(); ++s) {
      const double target = (*targets)[s];
      const double fill = target > 0 ? (loads[s] + key) / target
                                     : std::numeric_limits<double>::infinity();
      if (fill < best_fill) {
        best = s;
        best_fill = fill;
      }
    }
    loads[best] += key;
  }
  PlacedShares shares;
  if (bytes <= 0) return shares;
  for (int s = 0; s < static_cast<int>(loads.size()); ++s) {
    double& most = s < colocated ? shares.colocated : shares.separate;
    most = std::max(most, loads[s] / bytes);
  }
  return shares;
}

}  // namespace gradsync
