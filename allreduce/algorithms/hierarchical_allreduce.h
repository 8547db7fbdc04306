// Hierarchical (two-level) all-reduce, over the peer transport's
// connections (peer_exchange.h): the scheme of Horovod's hierarchical
// all-reduce and of the large-scale records (Jia et al. 2018; Mikami et al.
// 2018), for jobs whose ranks share a few host links.
//
// Ranks are grouped into nodes of R consecutive ranks (node = rank / R, local
// index = rank % R). (1) Reduce-scatter inside the node: the buffer is cut
// into R shards and every rank sends shard j straight to local rank j while
// adding the shards the others send it into its own. (2) The R ranks with
// the same local index, one per node, all-reduce their shard across nodes
// by halving-doubling (halving_doubling_allreduce.h). (3) All-gather inside
// the node. Across nodes each host link then carries 2(M-1)/M of the buffer
// (M nodes) spread over R connections, in 2·log2 M steps, while the many
// intra-node steps run on the fast local path.
//
// With R = 1 this is halving-doubling; with R = N, one node, steps (1) and
// (3) only.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

class HierarchicalAllReduce : public AllReduceAlgorithm {
 public:
  // `transport` must have been created with Peers(rank, world_size,
  // ranks_per_node); ranks_per_node must divide the world size (Check).
  HierarchicalAllReduce(PeerTransport* transport, int64_t chunk_bytes,
                        int ranks_per_node);
  // InvalidArgument naming both numbers when R does not divide N.
  static absl::Status Check(int world_size, int ranks_per_node);
  static std::vector<int> Peers(int rank, int world_size, int ranks_per_node);

  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;
  void SetEagerBytes(int64_t bytes) override {
    exchange_.set_eager_bytes(bytes);
  }
  int64_t bytes_sent() const override { return exchange_.bytes_sent(); }
  int64_t bytes_received() const override { return exchange_.bytes_received(); }
  std::string SummaryJson() const override;

 private:
  PeerTransport* transport_;
  PeerExchange exchange_;
  int ranks_per_node_;
  std::vector<int> local_members_;  // this node's ranks
  std::vector<int> cross_members_;  // same local index, one per node
  uint32_t sequence_ = 0;
  absl::Status broken_;
};

}  // namespace gradsync
