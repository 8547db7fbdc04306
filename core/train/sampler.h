// DistributedSampler with PyTorch's semantics: every epoch the indices
// 0..size-1 are shuffled from (seed, epoch); the list is padded by repeating
// its head to a multiple of the world size (or truncated with drop_last), and
// rank r takes positions r, r + N, r + 2N, ... — disjoint shards that together
// cover the data set.
//
// Because rank r's k-th sample is the global position k·N + r, the union of
// all ranks' batch j (batch size b each) is exactly the global positions
// [j·N·b, (j+1)·N·b): one worker with batch N·b sees the same samples per
// step. The equivalence tests rely on this.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  static absl::StatusOr<DistributedSampler> Create(
      const SamplerOptions& options);

  // Indices of this rank's shard for `epoch`, in order.
  std::vector<int64_t> Indices(int64_t epoch) const;
  // Samples per rank per epoch.
  int64_t num_samples() const { return num_samples_; }

 private:
  SamplerOptions options_;
  int64_t num_samples_ = 0;
};

}  // namespace gradsync
