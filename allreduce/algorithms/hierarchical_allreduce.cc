#include "allreduce/algorithms/hierarchical_allreduce.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/halving_doubling_allreduce.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

int64_t ShardOffset(int64_t count, int shards, int s) {
  return s * (count / shards) + std::min<int64_t>(s, count % shards);
}

}  // namespace

absl::Status HierarchicalAllReduce::Check(int world_size, int ranks_per_node) {
  if (ranks_per_node < 1 || world_size % ranks_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchical all-reduce: ", ranks_per_node,
        " ranks per node do not divide ", world_size,
        " ranks into whole nodes; give a ranks-per-node count that divides "
        "the number of workers"));
  }
  return absl::OkStatus();
}

std::vector<int> HierarchicalAllReduce::Peers(int rank, int world_size,
                                              int ranks_per_node) {
  const int node = rank / ranks_per_node;
  const int local = rank % ranks_per_node;
  std::set<int> peers;
  for (int j = 0; j < ranks_per_node; ++j) {
    if (j != local) peers.insert(node * ranks_per_node + j);
  }
  const int nodes = world_size / ranks_per_node;
  for (int partner : HalvingDoublingPartners(nodes, node)) {
    peers.insert(partner * ranks_per_node + local);
  }
  return {peers.begin(), peers.end()};
}

HierarchicalAllReduce::HierarchicalAllReduce(PeerTransport* transport,
                                             int64_t chunk_bytes,
                                             int ranks_per_node)
    : transport_(transport),
      exchange_(transport, chunk_bytes, "hierarchical"),
      ranks_per_node_(ranks_per_node) {
  const int node = transport->rank() / ranks_per_node;
  const int local = transport->rank() % ranks_per_node;
  for (int j = 0; j < ranks_per_node; ++j) {
    local_members_.push_back(node * ranks_per_node + j);
  }
  for (int m = 0; m < transport->world_size() / ranks_per_node; ++m) {
    cross_members_.push_back(m * ranks_per_node + local);
  }
}

absl::Status HierarchicalAllReduce::Run(float* data, int64_t count, float scale,
                                        uint32_t tag) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("hierarchical rank ", transport_->rank(),
                     ": broken in an earlier all-reduce: ", broken_.message()));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hierarchical: negative element count ", count));
  }
  if (count == 0) return absl::OkStatus();
  const int r = ranks_per_node_;
  const int local = transport_->rank() % r;
  const int node = transport_->rank() / r;
  RoundLabel label{sequence_++, tag, 0, ""};
  float* shard = data + ShardOffset(count, r, local);
  const int64_t shard_count =
      ShardOffset(count, r, local + 1) - ShardOffset(count, r, local);
  absl::Status status = [&]() -> absl::Status {
    if (r > 1) {
      for (int j = 0; j < r; ++j) {
        if (j == local) continue;
        const int64_t offset = ShardOffset(count, r, j);
        exchange_.Send(local_members_[j], data + offset,
                       ShardOffset(count, r, j + 1) - offset);
        exchange_.Receive(local_members_[j], shard, shard_count, /*add=*/true);
      }
      label.what = "the reduce-scatter inside the node";
      RETURN_IF_ERROR(exchange_.Run(label));
    }
    ++label.round;
    RETURN_IF_ERROR(HalvingDoublingInGroup(exchange_, cross_members_, node,
                                           shard, shard_count, scale, &label));
    if (r > 1) {
      for (int j = 0; j < r; ++j) {
        if (j == local) continue;
        const int64_t offset = ShardOffset(count, r, j);
        exchange_.Send(local_members_[j], shard, shard_count);
        exchange_.Receive(local_members_[j], data + offset,
                          ShardOffset(count, r, j + 1) - offset,
                          /*add=*/false);
      }
      label.what = "the all-gather inside the node";
      RETURN_IF_ERROR(exchange_.Run(label));
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    transport_->Abort();
    broken_ = status;
  }
  return status;
}

std::string HierarchicalAllReduce::SummaryJson() const {
  return absl::StrCat("{\"ranks_per_node\":", ranks_per_node_,
                      ",\"nodes\":", cross_members_.size(), "}");
}

}  // namespace gradsync
