// Double binary tree all-reduce (the idea of NCCL's tree algorithm, Sanders,
// Speck & Träff 2009), over the peer transport's connections
// (peer_exchange.h).
//
// Why two trees. One binary tree alone makes every leaf idle on the way down
// and every internal node send twice: half of its ranks' links would stay
// unused. Two trees over the same ranks, the leaves of one the internal nodes
// of the other, use every link; each tree carries half of the buffer. In each
// tree, chunks are summed up towards the root (a node forwards a chunk to its
// parent as soon as both children's chunks are added in) and broadcast back
// down (a node forwards a chunk to its children as soon as it has landed).
// Each half goes in slices (below), slice s keyed s steps later, so a
// connection that carries one tree's reduce and the other's broadcast
// interleaves them by slice instead of sending the whole reduce first. So for
// large buffers the pipeline is full and the time approaches the bandwidth
// bound, while a small buffer crosses only 2·depth = 2·floor(log2 N) links:
// the latency of halving-doubling without its power-of-two fold.
//
// The bit trees, N = 8 (as NCCL's src/graph/trees.cc draws them). Positions
// 1..N; position p with lowest set bit b has children p − b/2 and p + b/2
// (the latter halved until it is at most N) and its parent at (p − b) + 2b,
// or p − b when that is past N; counted from 1 so that the depth is
// floor(log2 N). The leaves are the odd positions. Rank r sits at position
// r + 1 in tree 1 and at N − r in tree 2 for even N (odd and even positions
// swap: every leaf of one tree is internal in the other), at r (rank 0 at N)
// for odd N. By rank:
//
//        tree 1 (position r + 1)          tree 2 (position N − r)    depth
//                 7                                0                 0
//                /                                /                  |
//               3                                4                   1
//            /     \                          /     \                |
//           1       5                        6       2               2
//          / \     / \                      / \     / \              |
//         0   2   4   6                    7   5   3   1             3
//
//   Rank 3 is internal in tree 1 (three edges) and a leaf in tree 2 (one):
//   four edges, the most any rank has, for every N.
//
// The lead. A leaf has all of its half from the start; left alone it pours
// it into its socket at once and takes its parent's incoming link from the
// forwarded sums and broadcasts the pipeline waits on. So, as NCCL's fixed
// FIFO slots do hop by hop, a rank sends slice s up only once slice
// s − (D + d − h) has come back down from the root, for a rank at depth d,
// height h in a tree of depth D: the steps a slice takes from this rank up
// to the root's sum and back.
//
//   slices of one half:  | 0 | 1 | 2 | 3 | ... |        (2·α·B/E or a chunk)
//   leaf (d = D, h = 0):  up 0, 1, .., 2D−1 at once; then up s only after
//                         s − 2D has come down again
//
// For the gate not to throttle a long link, a slice must cover a step's
// flight: slices are a chunk, or twice a hop's bandwidth-delay product at the
// busiest rank's share of the link, 2·α·B/E (TreeStepBytes, from SetLink's
// link), whichever is more, at most kMaxTreeSlices of them. A gate waits on a
// transfer of a smaller key, so the order still cannot deadlock. Without
// SetLink slices are a chunk and nothing is gated.
//
// Tree construction. What bounds a large buffer is the busiest rank: it moves
// S/2 per tree edge it has over both trees, so the trees should give every
// rank at most 4 edges (internal in one tree, a leaf in the other) and as few
// ranks as possible 4. Two constructions, the one with the fewer edges on the
// busiest rank, then the fewer such ranks, is used (the bit trees on a tie):
//  - bit trees (NCCL's, drawn above): at most 4 edges a rank for every N.
//  - midpoint trees: the middle position is the root, each half recursively
//    a subtree; rank x at position x in tree 1, x − 1 in tree 2. 5 edges on
//    one or two ranks at N = 8–12 and 16–17, but where both have 4, fewer
//    ranks with 4 (one at N = 4, 5; the bit trees have two).
// What each choice measured (interleaving, the gate, bit against midpoint
// trees): docs/results/allreduce_family.md, "Notes from the code".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "core/sync/link_cost.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

// One rank's place in one tree: parent (-1 at the root) and up to two
// children.
struct TreeNode {
  int parent = -1;
  std::vector<int> children;
};

// How many slices each tree's half of `half_bytes` is pipelined in: one per
// `slice_bytes` (a chunk, or TreeStepBytes where that is more), at most
// kMaxTreeSlices.
constexpr int kMaxTreeSlices = 256;
int TreeSlices(int64_t half_bytes, int64_t slice_bytes);
// The bytes a slice needs to cover one step of the lead (above): twice a
// hop's bandwidth-delay product at the busiest rank's share of the link,
// 2·α·B/E with E its tree edges; 0 for an unknown link.
int64_t TreeStepBytes(const LinkCost& link, int busiest_edges);

// Both trees over `world_size` ranks (above): nodes[tree][rank].
struct DoubleBinaryTrees {
  std::vector<TreeNode> nodes[2];
  const char* shape = "";  // "bit" or "midpoint"
};
DoubleBinaryTrees BuildDoubleBinaryTrees(int world_size);
// The most tree edges (parent and children, over both trees) a rank has, and
// how many ranks have that many.
std::pair<int, int> BusiestRank(const DoubleBinaryTrees& trees);
// Per tree: every rank's depth (levels above it) and height (levels below
// it), and the tree's depth D; what the keys of the tree's transfers and
// the cost model's hops count in.
struct TreeLevels {
  std::vector<int> depth[2];
  std::vector<int> height[2];
  int tree_depth[2] = {0, 0};
};
TreeLevels MeasureTreeLevels(const DoubleBinaryTrees& trees);
// `rank`'s place in tree `tree` (0 or 1) of `world_size` ranks.
TreeNode DoubleBinaryTreeNode(int world_size, int rank, int tree);
// Edges of the tree from the root to the deepest leaf: floor(log2 N), and 1
// for one rank.
int DoubleBinaryTreeDepth(int world_size);

class TreeAllReduce : public AllReduceAlgorithm {
 public:
  // `transport` must have been created with Peers(rank, world_size).
  TreeAllReduce(PeerTransport* transport, int64_t chunk_bytes);
  static std::vector<int> Peers(int rank, int world_size);

  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;
  void SetEagerBytes(int64_t bytes) override {
    exchange_.set_eager_bytes(bytes);
  }
  // The link the lead is sized by (above): probed or given, as the
  // selector's (selecting_allreduce.h). Between all-reduces only.
  void SetLink(const LinkCost& link);
  int64_t bytes_sent() const override { return exchange_.bytes_sent(); }
  int64_t bytes_received() const override { return exchange_.bytes_received(); }
  // The trees' shape and the lead's link and slice size, for the summary.
  std::string SummaryJson() const override;

 private:
  PeerTransport* transport_;
  PeerExchange exchange_;
  TreeNode nodes_[2];
  // The order transfers are queued in (Run) and the lead are counted in
  // these levels.
  TreeLevels levels_;
  const char* shape_ = "";
  int busiest_edges_ = 0;
  LinkCost link_;
  bool has_link_ = false;
  int64_t step_bytes_ = 0;  // TreeStepBytes of the link; 0: none
  uint32_t sequence_ = 0;
  absl::Status broken_;
};

}  // namespace gradsync
