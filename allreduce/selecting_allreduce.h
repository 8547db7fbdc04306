// --sync=allreduce: per buffer, the all-reduce of the family with the lowest
// α–β prediction (cost_model.h), the idea of NCCL's tuner; the ring unless
// another is predicted at least 10 % faster (selecting_allreduce.cc says why).
// Holds a ring, halving-doubling and a double binary tree over one transport,
// picks by the buffer's size and records every pick (SummaryJson; the first
// pick for each tag is logged).
//
// α and B come from the options (a probe of the link, `gradsync netem
// --probe`), or, when those are zero, from timing the ring itself at set-up:
// an all-reduce of 16 floats per rank costs 2(N-1)·α, a 4 MiB one
// 2(N-1)α + 2(N-1)/N·S/B.
// Every rank measures, then the measurements are averaged by an all-reduce,
// so all ranks pick alike (a disagreement would fail the transfer headers,
// not corrupt a gradient).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allreduce/allreduce_algorithm.h"
#include "allreduce/cost_model.h"
#include "allreduce/halving_doubling_allreduce.h"
#include "allreduce/ring_allreduce.h"
#include "allreduce/ring_transport.h"
#include "allreduce/tree_allreduce.h"

namespace gradsync {

class SelectingAllReduce : public AllReduceAlgorithm {
 public:
  // `transport` must have been created with Peers(rank, world_size).
  // `link` with zero entries is measured (above).
  static absl::StatusOr<std::unique_ptr<SelectingAllReduce>> Create(
      RingTransport* transport, int64_t chunk_bytes, const LinkCost& link);
  static std::vector<int> Peers(int rank, int world_size);

  // The algorithm this object runs for `count` floats.
  std::string Pick(int64_t count) const;
  // The choice for `bytes` over `n` ranks on `link`: "ring",
  // "halving_doubling" or "tree".
  static std::string Choose(int n, double bytes, const LinkCost& link);

  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;
  int64_t bytes_sent() const override;
  int64_t bytes_received() const override;
  std::string SummaryJson() const override;
  const LinkCost& link() const { return link_; }

 private:
  SelectingAllReduce(RingTransport* transport, int64_t chunk_bytes);
  absl::StatusOr<LinkCost> MeasureLink();

  RingTransport* transport_;
  int64_t chunk_bytes_;
  LinkCost link_;
  bool measured_ = false;
  std::map<std::string, std::unique_ptr<AllReduceAlgorithm>> algorithms_;
  std::map<uint32_t, std::string> picks_;       // tag -> algorithm
  std::map<std::string, int64_t> pick_counts_;  // algorithm -> runs
};

}  // namespace gradsync
