// Halving-doubling all-reduce (Rabenseifner; Thakur, Rabenseifner & Gropp
// 2005), over the peer transport's connections (peer_exchange.h).
//
// With p = N a power of two: reduce-scatter by recursive halving — in step k
// every rank swaps half of its current range with the rank whose index
// differs in bit log2(p)-1-k, keeping (and adding into) the other half, so
// after log2 p steps rank v holds the sum of block v; then all-gather by
// recursive doubling, the same exchanges in reverse order, each sending the
// range it holds. Each rank sends and receives 2(p-1)/p of the buffer, like
// the ring, but in 2·log2 p steps instead of 2(N-1): the latency-optimal
// member of the family for small buffers.
//
// N not a power of two (r = N - p extra ranks): the first 2r ranks pair up;
// the even one of each pair sends its whole buffer to the odd one and sits
// out, the odd one takes part as virtual rank i/2, and at the end sends the
// result back. That costs two more steps and n/B twice, on r pairs only.
//
// The 1/N scale is applied to the block a rank owns after reduce-scatter, so
// the all-gather already carries averaged values and every rank ends with the
// same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

// The indices (into a group of `group_size`) that index `index` exchanges
// with. Symmetric.
std::vector<int> HalvingDoublingPartners(int group_size, int index);

// All-reduces `count` floats at `data` among `members` (global ranks, the same
// list on every member; this rank is members[index]), scaled by `scale`.
// Rounds are numbered from label->round on; label->round is left after the
// last. Shared with the hierarchical scheme, which runs it across nodes.
absl::Status HalvingDoublingInGroup(PeerExchange& exchange,
                                    const std::vector<int>& members, int index,
                                    float* data, int64_t count, float scale,
                                    RoundLabel* label);

class HalvingDoublingAllReduce : public AllReduceAlgorithm {
 public:
  // `transport` must have been created with Peers(rank, world_size).
  HalvingDoublingAllReduce(PeerTransport* transport, int64_t chunk_bytes);
  static std::vector<int> Peers(int rank, int world_size);

  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;
  void SetEagerBytes(int64_t bytes) override {
    exchange_.set_eager_bytes(bytes);
  }
  int64_t bytes_sent() const override { return exchange_.bytes_sent(); }
  int64_t bytes_received() const override { return exchange_.bytes_received(); }

 private:
  PeerTransport* transport_;
  PeerExchange exchange_;
  uint32_t sequence_ = 0;
  absl::Status broken_;
};

}  // namespace gradsync
