#include "allreduce/cost_model.h"

#include <algorithm>
#include <cmath>

#include "allreduce/tree_allreduce.h"

namespace gradsync {
namespace {

int LargestPowerOfTwoAtMost(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace

// Ring: reduce-scatter and all-gather are K = 2(N-1) steps; in each, every
// rank sends one segment of s = S/N bytes to its right neighbour while it
// receives one from its left. Step k+1's bytes are step k's bytes reduced, and
// the implementation forwards every byte as soon as it has arrived and been
// added (ring_allreduce.cc), so the steps overlap instead of running one after
// another. Two things bound the time:
//  - the link: each carries K·s bytes, back to back when the data keep up,
//    and the last of them reaches the neighbour α after it left: K·s/B + α;
//  - the first byte: it crosses K hops, α each, and the last segment follows
//    it: K·α + s/B.
//   T = max(2(N-1)/N · S/B + α,  2(N-1)·α + S/(N·B)).
// Bandwidth-bound buffers (s/B ≥ α) pay one latency, not 2(N-1): the store-
// and-forward figure 2(N-1)·α + 2(N-1)/N·S/B overstates them by (2N-3)·α,
// which made the selector give 1 MiB buffers on 1 ms links to halving-doubling
// while the ring was 1.3x faster (docs/results/allreduce_family.md).
double RingAllReduceSeconds(int n, double bytes, const LinkCost& link) {
  if (n <= 1) return 0;
  const double steps = 2.0 * (n - 1);
  const double segment_seconds = bytes / n / link.bytes_per_s;
  return std::max(steps * segment_seconds + link.alpha_s,
                  steps * link.alpha_s + segment_seconds);
}

// Halving-doubling over p = 2^⌊log2 N⌋ ranks: reduce-scatter step k (k = 1..
// log2 p) swaps S/2^k bytes with one partner in both directions at once, so
// the steps sum to log2 p·α + (1 - 1/p)·S/B; the all-gather mirrors it:
//   T_p = 2·log2 p·α + 2(p-1)/p · S/B.
// N not a power of two adds the fold (S to the partner) and the return (S
// back), each α + S/B:
//   T = T_p + 2α + 2·S/B   when N > p.
// With a clear to send (peer_exchange.h, eager prefix E > 0), a step of
// s_k > E bytes sends its rest only once the partner's header has arrived,
// α after the partner entered the step; partners that enter together wait
// w = α − E/B where that is positive, once in each phase's such steps but
// the first all-gather step (the same partner as the step before):
//   T += (2 · #{k: S/2^k > E} − [S/p > E]) · max(0, w).
double HalvingDoublingAllReduceSeconds(int n, double bytes,
                                       const LinkCost& link,
                                       double eager_bytes) {
  if (n <= 1) return 0;
  const int p = LargestPowerOfTwoAtMost(n);
  const double steps = std::log2(static_cast<double>(p));
  double seconds =
      2 * steps * link.alpha_s + 2.0 * (p - 1) / p * bytes / link.bytes_per_s;
  if (n > p) seconds += 2 * link.alpha_s + 2 * bytes / link.bytes_per_s;
  const double wait = link.alpha_s - eager_bytes / link.bytes_per_s;
  if (eager_bytes > 0 && wait > 0) {
    for (double step_bytes = bytes / 2;
         step_bytes > eager_bytes && step_bytes * p >= bytes; step_bytes /= 2) {
      seconds += 2 * wait;
    }
    if (bytes / p > eager_bytes) seconds -= wait;
  }
  return seconds;
}

// Double binary tree, each tree carrying S/2. A node forwards bytes as soon
// as they have arrived from both children and been added (cut-through, not
// store-and-forward per chunk). The busiest rank sends (and receives)
// W = E·S/2 bytes, E its number of tree edges (parent and children) over both
// trees: 4 for a rank internal in one tree and a leaf in the other, the most
// any rank has in tree_allreduce.h's construction. As for the ring, two things
// bound the time:
//  - the last byte: it leaves a leaf once that leaf's S/2 is out, climbs D
//    levels to the root and descends D, α each: 2D·α + (S/2)/B;
//  - the busiest link: its W bytes, and its sends down a tree cannot begin
//    before the first byte has been to the root and back, two latencies for
//    the shallowest such node: E·(S/2)/B + 2α.
//   T = max(2D·α + (S/2)/B,  E_max·(S/2)/B + 2α).
// (The sum of the two, a store-and-forward figure, was 1.2x the measured
// time at 64 KiB–1 MiB on 1 ms links, docs/results/allreduce_family.md.)
// For large S this is E_max/2 times S/B against the ring's 2(N-1)/N·S/B: the
// tree is for latency-bound buffers, the ring for bandwidth-bound ones.
double TreeAllReduceSeconds(int n, double bytes, const LinkCost& link) {
  if (n <= 1) return 0;
  // The selector predicts every bucket it runs: build the trees once per N.
  thread_local int cached_n = -1;
  thread_local int busiest_edges = 0;
  if (cached_n != n) {
    busiest_edges = BusiestRank(BuildDoubleBinaryTrees(n)).first;
    cached_n = n;
  }
  const int depth = DoubleBinaryTreeDepth(n);
  const double half_seconds = bytes / 2 / link.bytes_per_s;
  return std::max(2 * depth * link.alpha_s + half_seconds,
                  busiest_edges * half_seconds + 2 * link.alpha_s);
}

// Hierarchical with R ranks per node and M = N/R nodes: the intra-node
// reduce-scatter sends R-1 shards of S/R to the R-1 others at once (one
// message each, all overlapping): α_i + (R-1)/R·S/B_i; the all-gather the
// same; across nodes, halving-doubling on S/R among M ranks:
//   T = 2(α_i + (R-1)/R·S/B_i) + T_hd(M, S/R, α_e, B_e).
// B_e is what each rank gets across nodes: B/R when the R ranks of a node
// share its host link (the case the scheme is for), B when each has its own.
double HierarchicalAllReduceSeconds(int n, int ranks_per_node, double bytes,
                                    const LinkCost& intra,
                                    const LinkCost& inter, double eager_bytes) {
  if (n <= 1) return 0;
  const int r = std::max(1, ranks_per_node);
  const int nodes = n / r;
  double seconds = 0;
  if (r > 1) {
    seconds += 2 * (intra.alpha_s + (r - 1.0) / r * bytes / intra.bytes_per_s);
  }
  return seconds +
         HalvingDoublingAllReduceSeconds(nodes, bytes / r, inter, eager_bytes);
}

}  // namespace gradsync
