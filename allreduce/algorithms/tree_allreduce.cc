#include "allreduce/algorithms/tree_allreduce.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/float_sum.h"
#include "core/base/logging.h"

namespace gradsync {
namespace {

// Parent and children of position p (1-based) of the bit tree over 1..n
// (tree_allreduce.h); 0 is "none".
TreeNode BitTreeNode(int n, int p) {
  const int bit = p & -p;
  TreeNode node;
  node.parent = (p ^ bit) | (bit << 1);
  if (node.parent > n) node.parent = p ^ bit;
  int low = bit >> 1;
  if (low > 0) node.children.push_back(p - low);
  while (low > 0 && p + low > n) low >>= 1;
  if (low > 0) node.children.push_back(p + low);
  return node;
}

DoubleBinaryTrees BitTrees(int n) {
  // Position (1-based) -> rank in tree `tree`; 0 (no such node) -> -1.
  auto rank_of = [n](int tree, int p) {
    if (p == 0) return -1;
    if (tree == 0) return p - 1;
    return n % 2 == 0 ? n - p : p % n;
  };
  DoubleBinaryTrees trees;
  for (int tree = 0; tree < 2; ++tree) {
    trees.nodes[tree].resize(n);
    for (int p = 1; p <= n; ++p) {
      const TreeNode at = BitTreeNode(n, p);
      TreeNode& node = trees.nodes[tree][rank_of(tree, p)];
      node.parent = rank_of(tree, at.parent);
      for (int child : at.children) {
        node.children.push_back(rank_of(tree, child));
      }
    }
  }
  return trees;
}

// Fills parent/children of positions [lo, hi) whose subtree hangs below
// `parent`; returns the subtree's root position (-1 when empty).
int BuildMidpoint(int lo, int hi, int parent, std::vector<TreeNode>& nodes) {
  if (lo >= hi) return -1;
  const int root = lo + (hi - lo) / 2;
  nodes[root].parent = parent;
  const int left = BuildMidpoint(lo, root, root, nodes);
  const int right = BuildMidpoint(root + 1, hi, root, nodes);
  if (left >= 0) nodes[root].children.push_back(left);
  if (right >= 0) nodes[root].children.push_back(right);
  return root;
}

DoubleBinaryTrees MidpointTrees(int n) {
  std::vector<TreeNode> positions(n);
  BuildMidpoint(0, n, -1, positions);
  DoubleBinaryTrees trees;
  for (int tree = 0; tree < 2; ++tree) {
    auto rank_of = [&](int x) { return x < 0 ? -1 : (x + tree) % n; };
    trees.nodes[tree].resize(n);
    for (int x = 0; x < n; ++x) {
      TreeNode& node = trees.nodes[tree][rank_of(x)];
      node.parent = rank_of(positions[x].parent);
      for (int child : positions[x].children) {
        node.children.push_back(rank_of(child));
      }
    }
  }
  return trees;
}

}  // namespace

int TreeSlices(int64_t half_bytes, int64_t slice_bytes) {
  const int64_t wanted = half_bytes / std::max<int64_t>(1, slice_bytes);
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, kMaxTreeSlices));
}

int64_t TreeStepBytes(const LinkCost& link, int busiest_edges) {
  if (link.alpha_s <= 0 || link.bytes_per_s <= 0) return 0;
  return static_cast<int64_t>(2 * link.alpha_s * link.bytes_per_s /
                              std::max(1, busiest_edges));
}

std::pair<int, int> BusiestRank(const DoubleBinaryTrees& trees) {
  const int n = static_cast<int>(trees.nodes[0].size());
  int most = 0;
  int count = 0;
  for (int rank = 0; rank < n; ++rank) {
    int edges = 0;
    for (const std::vector<TreeNode>& tree : trees.nodes) {
      edges += (tree[rank].parent >= 0) +
               static_cast<int>(tree[rank].children.size());
    }
    if (edges > most) {
      most = edges;
      count = 0;
    }
    if (edges == most) ++count;
  }
  return {most, count};
}

DoubleBinaryTrees BuildDoubleBinaryTrees(int world_size) {
  DoubleBinaryTrees bit = BitTrees(world_size);
  DoubleBinaryTrees midpoint = MidpointTrees(world_size);
  // Fewer edges on the busiest rank, then fewer such ranks; the bit trees
  // on a tie.
  if (BusiestRank(midpoint) < BusiestRank(bit)) {
    midpoint.shape = "midpoint";
    return midpoint;
  }
  bit.shape = "bit";
  return bit;
}

TreeLevels MeasureTreeLevels(const DoubleBinaryTrees& trees) {
  TreeLevels levels;
  for (int t = 0; t < 2; ++t) {
    const std::vector<TreeNode>& tree = trees.nodes[t];
    const int n = static_cast<int>(tree.size());
    levels.depth[t].assign(n, 0);
    levels.height[t].assign(n, 0);
    for (int rank = 0; rank < n; ++rank) {
      int up = 0;
      for (int x = rank; tree[x].parent >= 0; x = tree[x].parent) {
        ++up;
        int& height = levels.height[t][tree[x].parent];
        height = std::max(height, up);
      }
      levels.depth[t][rank] = up;
      levels.tree_depth[t] = std::max(levels.tree_depth[t], up);
    }
  }
  return levels;
}

TreeNode DoubleBinaryTreeNode(int world_size, int rank, int tree) {
  return BuildDoubleBinaryTrees(world_size).nodes[tree][rank];
}

int DoubleBinaryTreeDepth(int world_size) {
  int depth = 0;
  while ((2 << depth) <= world_size) ++depth;
  return std::max(depth, 1);
}

TreeAllReduce::TreeAllReduce(PeerTransport* transport, int64_t chunk_bytes)
    : transport_(transport), exchange_(transport, chunk_bytes, "tree") {
  const int n = transport->world_size();
  const DoubleBinaryTrees trees = BuildDoubleBinaryTrees(n);
  for (int tree = 0; tree < 2; ++tree) {
    nodes_[tree] = trees.nodes[tree][transport->rank()];
  }
  levels_ = MeasureTreeLevels(trees);
  shape_ = trees.shape;
  busiest_edges_ = BusiestRank(trees).first;
}

void TreeAllReduce::SetLink(const LinkCost& link) {
  link_ = link;
  has_link_ = link.alpha_s > 0 && link.bytes_per_s > 0;
  step_bytes_ = TreeStepBytes(link, busiest_edges_);
  if (transport_->rank() == 0 && has_link_) {
    GS_LOG(INFO) << "tree: slices of at least "
                 << std::max(exchange_.chunk_bytes(), step_bytes_) / 1024
                 << " KiB (a chunk, or 2·α·B/E = " << step_bytes_ / 1024
                 << " KiB: α " << link.alpha_s * 1e6 << " us, B "
                 << link.bytes_per_s / 1e9 << " GB/s, E " << busiest_edges_
                 << "); a rank's reduce leads the sums coming back by its "
                    "round trip in slices";
  }
}

std::string TreeAllReduce::SummaryJson() const {
  std::string json = absl::StrCat(
      "{\"tree_shape\":\"", shape_,
      "\",\"tree_busiest_edges\":", busiest_edges_,
      ",\"tree_slice_min_bytes\":",
      std::max(exchange_.chunk_bytes(), step_bytes_), ",\"tree_lead\":");
  if (!has_link_) return absl::StrCat(json, "\"none\"}");
  return absl::StrCat(
      json, "\"round trip\",\"tree_link_alpha_us\":", link_.alpha_s * 1e6,
      ",\"tree_link_GBps\":", link_.bytes_per_s / 1e9, "}");
}

std::vector<int> TreeAllReduce::Peers(int rank, int world_size) {
  std::set<int> peers;
  const DoubleBinaryTrees trees = BuildDoubleBinaryTrees(world_size);
  for (int tree = 0; tree < 2; ++tree) {
    const TreeNode& node = trees.nodes[tree][rank];
    if (node.parent >= 0) peers.insert(node.parent);
    peers.insert(node.children.begin(), node.children.end());
  }
  return {peers.begin(), peers.end()};
}

absl::Status TreeAllReduce::Run(float* data, int64_t count, float scale,
                                uint32_t tag) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tree rank ", transport_->rank(),
                     ": broken in an earlier all-reduce: ", broken_.message()));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tree: negative element count ", count));
  }
  if (count == 0) return absl::OkStatus();
  if (transport_->world_size() > 1) {
    // Tree t carries half t. Transfers on one connection in one direction
    // go one after the other (a TCP stream), so both ends must queue them in
    // the same order, and a ready transfer should not wait behind one of the
    // other tree that is not. Every transfer is keyed by the step at which
    // its sender can start it — a reduce from c: the height of c's subtree;
    // a broadcast from p: the root's height plus p's depth — which both ends
    // compute alike. Queued by key, a transfer only ever waits on transfers
    // of smaller keys, so the order cannot deadlock.
    const int64_t half = (count + 1) / 2;
    float* halves[2] = {data, data + half};
    const int64_t sizes[2] = {half, count - half};
    // Each half in `slices` consecutive slices, slice s's transfers keyed
    // s later: on a connection that carries both a reduce of one tree and
    // a broadcast of the other, the broadcast's first slices go as soon as
    // they are ready instead of behind the whole reduce.
    // Slices of a chunk, or of a step's bandwidth-delay product where that
    // is more (tree_allreduce.h).
    const int slices =
        TreeSlices(half * 4, std::max(exchange_.chunk_bytes(), step_bytes_));
    auto slice_begin = [&](int tree, int slice) {
      return sizes[tree] * slice / slices;
    };
    const int me = transport_->rank();
    struct Planned {
      int key;
      int tree;
      bool broadcast;
      int slice;
      bool send;
      int peer;
    };
    std::vector<Planned> plan;
    for (int slice = 0; slice < slices; ++slice) {
      for (int tree = 0; tree < 2; ++tree) {
        const TreeNode& node = nodes_[tree];
        const int down = levels_.tree_depth[tree];
        for (int child : node.children) {
          plan.push_back({levels_.height[tree][child] + slice, tree, false,
                          slice, false, child});
          plan.push_back({down + levels_.depth[tree][me] + slice, tree, true,
                          slice, true, child});
        }
        if (node.parent >= 0) {
          plan.push_back({levels_.height[tree][me] + slice, tree, false, slice,
                          true, node.parent});
          plan.push_back({down + levels_.depth[tree][node.parent] + slice, tree,
                          true, slice, false, node.parent});
        }
      }
    }
    std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
      return std::tie(a.key, a.tree, a.broadcast, a.slice, a.peer) <
             std::tie(b.key, b.tree, b.broadcast, b.slice, b.peer);
    });
    // What each slice's sends wait on: the reduce receives (up), or the
    // broadcast receive from the parent (down; the root has none and sends
    // the sums).
    std::vector<std::vector<int>> reduced[2];
    std::vector<std::vector<int>> landed[2];
    for (int tree = 0; tree < 2; ++tree) {
      reduced[tree].resize(slices);
      landed[tree].resize(slices);
    }
    for (const Planned& step : plan) {
      const int tree = step.tree;
      const int64_t begin = slice_begin(tree, step.slice);
      float* at = halves[tree] + begin;
      const int64_t n = slice_begin(tree, step.slice + 1) - begin;
      if (!step.send) {
        const int index = exchange_.Receive(step.peer, at, n, !step.broadcast);
        (step.broadcast ? landed : reduced)[tree][step.slice].push_back(index);
      } else if (!step.broadcast) {
        // Up to the parent, once slice `slice - lead` is back down.
        const int lead = levels_.tree_depth[tree] + levels_.depth[tree][me] -
                         levels_.height[tree][me];
        std::vector<int> gates;
        if (has_link_ && step.slice >= lead) {
          gates = landed[tree][step.slice - lead];
        }
        exchange_.Send(step.peer, at, n, reduced[tree][step.slice],
                       std::move(gates));
      } else {
        exchange_.Send(step.peer, at, n,
                       nodes_[tree].parent >= 0 ? landed[tree][step.slice]
                                                : reduced[tree][step.slice]);
      }
    }
    absl::Status status = exchange_.Run(
        RoundLabel{sequence_, tag, 0, "reduce and broadcast over both trees"});
    if (!status.ok()) {
      ++sequence_;
      transport_->Abort();
      broken_ = status;
      return status;
    }
  }
  ++sequence_;
  // Every rank scales the same sums: identical bits everywhere.
  if (scale != 1.0f) ScaleInPlace(data, count, scale);
  return absl::OkStatus();
}

}  // namespace gradsync
