#include "allreduce/tree_allreduce.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "allreduce/float_sum.h"

namespace gradsync {
namespace {

// Fills parent/children of positions [lo, hi) whose subtree hangs below
// `parent`; returns the subtree's root position (-1 when empty).
int BuildInOrder(int lo, int hi, int parent, std::vector<TreeNode>& nodes) {
  if (lo >= hi) return -1;
  const int root = lo + (hi - lo) / 2;
  nodes[root].parent = parent;
  const int left = BuildInOrder(lo, root, root, nodes);
  const int right = BuildInOrder(root + 1, hi, root, nodes);
  if (left >= 0) nodes[root].children.push_back(left);
  if (right >= 0) nodes[root].children.push_back(right);
  return root;
}

int Depth(const std::vector<TreeNode>& nodes, int x) {
  int depth = 0;
  while (nodes[x].parent >= 0) {
    x = nodes[x].parent;
    ++depth;
  }
  return depth;
}

}  // namespace

TreeNode DoubleBinaryTreeNode(int world_size, int rank, int tree) {
  std::vector<TreeNode> positions(world_size);
  BuildInOrder(0, world_size, -1, positions);
  const int shift = tree == 0 ? 0 : 1;
  auto rank_of = [&](int x) { return x < 0 ? -1 : (x + shift) % world_size; };
  const TreeNode& at = positions[(rank - shift + world_size) % world_size];
  TreeNode node;
  node.parent = rank_of(at.parent);
  for (int child : at.children) node.children.push_back(rank_of(child));
  return node;
}

int DoubleBinaryTreeDepth(int world_size) {
  std::vector<TreeNode> positions(world_size);
  BuildInOrder(0, world_size, -1, positions);
  int depth = 0;
  for (int x = 0; x < world_size; ++x) {
    depth = std::max(depth, Depth(positions, x));
  }
  return std::max(depth, 1);
}

TreeAllReduce::TreeAllReduce(RingTransport* transport, int64_t chunk_bytes)
    : transport_(transport), exchange_(transport, chunk_bytes, "tree") {
  for (int tree = 0; tree < 2; ++tree) {
    nodes_[tree] =
        DoubleBinaryTreeNode(transport->world_size(), transport->rank(), tree);
  }
}

std::vector<int> TreeAllReduce::Peers(int rank, int world_size) {
  std::set<int> peers;
  for (int tree = 0; tree < 2; ++tree) {
    const TreeNode node = DoubleBinaryTreeNode(world_size, rank, tree);
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
    // Tree t carries half t. Both ends of every connection queue its
    // transfers in this order — reduce of tree 0, of tree 1, broadcast of
    // tree 0, of tree 1 — so the streams agree; a reduce never waits on a
    // broadcast, so the order cannot deadlock.
    const int64_t half = (count + 1) / 2;
    float* halves[2] = {data, data + half};
    const int64_t sizes[2] = {half, count - half};
    std::vector<int> reduced[2];
    for (int tree = 0; tree < 2; ++tree) {
      const TreeNode& node = nodes_[tree];
      for (int child : node.children) {
        reduced[tree].push_back(
            exchange_.Receive(child, halves[tree], sizes[tree], /*add=*/true));
      }
      if (node.parent >= 0) {
        exchange_.Send(node.parent, halves[tree], sizes[tree], reduced[tree]);
      }
    }
    for (int tree = 0; tree < 2; ++tree) {
      const TreeNode& node = nodes_[tree];
      std::vector<int> final_part = reduced[tree];
      if (node.parent >= 0) {
        final_part = {exchange_.Receive(node.parent, halves[tree], sizes[tree],
                                        /*add=*/false)};
      }
      for (int child : node.children) {
        exchange_.Send(child, halves[tree], sizes[tree], final_part);
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
