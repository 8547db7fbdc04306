#include "allreduce/algorithms/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "allreduce/algorithms/ring_allgather.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "core/base/power_of_two.h"

namespace gradsync {

std::vector<std::pair<int, int>> TreeRankCosts(int n) {
  if (n <= 1) return {};
  const DoubleBinaryTrees trees = BuildDoubleBinaryTrees(n);
  const TreeLevels levels = MeasureTreeLevels(trees);
  const auto& depth = levels.depth;
  const auto& height = levels.height;
  const auto& tree_depth = levels.tree_depth;
  std::vector<std::pair<int, int>> costs;
  for (int rank = 0; rank < n; ++rank) {
    // Per peer, the last transfer rank sends it (tree_allreduce.cc's order:
    // key, then tree, then reduce before broadcast) and its last byte's
    // hops: a reduce's up to the root and down to the deepest leaf, a
    // broadcast's down to rank's deepest descendant.
    struct Last {
      std::tuple<int, int, int> order{-1, -1, -1};
      int hops = 0;
    };
    std::map<int, Last> last;
    int edges = 0;
    auto add = [&](int peer, int key, int t, int broadcast, int hops) {
      Last& entry = last[peer];
      const std::tuple<int, int, int> order{key, t, broadcast};
      if (order > entry.order) entry = Last{order, hops};
      ++edges;
    };
    for (int t = 0; t < 2; ++t) {
      const TreeNode& node = trees.nodes[t][rank];
      if (node.parent >= 0) {
        add(node.parent, height[t][rank], t, 0, depth[t][rank] + tree_depth[t]);
      }
      for (int child : node.children) {
        add(child, tree_depth[t] + depth[t][rank], t, 1, height[t][rank]);
      }
    }
    int hops = 0;
    for (const auto& [peer, entry] : last) hops = std::max(hops, entry.hops);
    if (std::find(costs.begin(), costs.end(), std::make_pair(edges, hops)) ==
        costs.end()) {
      costs.emplace_back(edges, hops);
    }
  }
  std::sort(costs.begin(), costs.end());
  return costs;
}

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
// which once handed bandwidth-bound buffers to halving-doubling
// (docs/results/allreduce_family.md, "Notes from the code").
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
  const int p = static_cast<int>(LargestPowerOfTwoAtMost(n));
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
// store-and-forward per chunk). Rank r sends (and receives) W_r = E_r·S/2
// bytes, E_r its tree edges (parent and children) over both trees: at most 4
// in tree_allreduce.h's construction. Its connections share its link as TCP
// shares it, evenly, with nothing sent first (the lead only keeps a reduce
// from running ahead, tree_allreduce.h), so all of them end together, at
// W_r/B. On a connection that carries two transfers (a reduce of one tree
// and a broadcast of the other), the one queued last (tree_allreduce.cc's
// keys) ends last. Then its last byte still travels:
//  - sent up (r below the root in a tree): its d_r levels to the root, and
//    the root's sum back down D levels to the deepest leaf, d_r + D hops;
//  - sent down: to r's deepest descendant, its height h_r hops.
// H_r the most of these over r's connections. Every tree edge carries data
// both ways, so a rank's first send to a peer stops at the clear to send's
// eager prefix E until that peer's first header has crossed the link
// (peer_exchange.h): a half larger than E waits w = max(0, α − E/B) once, as
// a halving-doubling step does. With the first slice's 2D hops as a floor:
//   T = max(2D·α + (S/2)/B,  max_r (E_r·(S/2)/B + H_r·α) + w).
// At N = 8 a rank with 4 edges whose reduce as a leaf of depth 3 has a
// connection of its own ends on it: T = 4·(S/2)/B + 6α (+ w), the bandwidth
// time and the round trip added, as NCCL's tuner adds its latency to size
// over bandwidth. At N = 2 the root turns each half round on the connection
// it came in on: S/B + α (+ w).
// (An earlier max of the two terms, as if the busiest link's work hid the
// latency, ran below the measured times: docs/results/allreduce_family.md,
// "Notes from the code".) For large S this is E_max/2 times S/B
// against the ring's 2(N-1)/N·S/B: the tree is for latency-bound buffers,
// the ring for bandwidth-bound ones.
double TreeAllReduceSeconds(int n, double bytes, const LinkCost& link,
                            double eager_bytes) {
  if (n <= 1) return 0;
  // The selector predicts every bucket it runs: (E_r, H_r) once per N.
  thread_local int cached_n = -1;
  thread_local std::vector<std::pair<int, int>> ranks;
  if (cached_n != n) {
    ranks = TreeRankCosts(n);
    cached_n = n;
  }
  const double half_seconds = bytes / 2 / link.bytes_per_s;
  double wait = 0;
  if (eager_bytes > 0 && bytes / 2 > eager_bytes) {
    wait = std::max(0.0, link.alpha_s - eager_bytes / link.bytes_per_s);
  }
  double seconds = 2 * DoubleBinaryTreeDepth(n) * link.alpha_s + half_seconds;
  for (const auto& [edges, hops] : ranks) {
    seconds =
        std::max(seconds, edges * half_seconds + hops * link.alpha_s + wait);
  }
  return seconds;
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

// Ring all-gather (ring_allgather.h): N-1 steps, in each every rank passes
// one blob of E bytes, behind its frame header of h bytes, to its right
// neighbour; a blob is forwarded only once it has arrived whole, so the steps
// run one after another:
//   T = (N-1)·α + (N-1)·(E + h)/B.
// The compressed methods that cannot be summed in transit (top-k, one-bit)
// move this way: every link carries N-1 encodings, which grows with N where
// the ring's 2(N-1)/N·S does not.
double RingAllGatherSeconds(int n, double blob_bytes, const LinkCost& link) {
  if (n <= 1) return 0;
  const double frame_bytes = RingAllGather::kHeaderBytes;
  return (n - 1) * link.alpha_s +
         (n - 1) * (blob_bytes + frame_bytes) / link.bytes_per_s;
}

}  // namespace gradsync
