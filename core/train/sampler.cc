// DistributedSampler: PyTorch's torch.utils.data.DistributedSampler, with a
// shuffle whose result is fixed by (seed, epoch) on every platform, so all
// ranks agree on the global order without talking to each other.
#include "core/train/sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gradsync {
namespace {

// Uniform integer in [0, bound) from mt19937_64 by rejection, without modulo
// bias. std::uniform_int_distribution is implementation-defined, and every
// rank (possibly built with a different standard library) must draw the same
// permutation.
uint64_t UniformBelow(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    const uint64_t x = engine();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace

absl::StatusOr<DistributedSampler> DistributedSampler::Create(
    const SamplerOptions& options) {
  if (options.dataset_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: dataset_size must be >= 1, got ",
                     options.dataset_size));
  }
  if (options.num_replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: num_replicas must be >= 1, got ",
                     options.num_replicas));
  }
  if (options.rank < 0 || options.rank >= options.num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: rank ", options.rank, " is outside [0, ",
        options.num_replicas, ") for num_replicas ", options.num_replicas));
  }
  if (options.drop_last && options.dataset_size < options.num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: with drop_last, dataset_size ",
        options.dataset_size, " must be >= num_replicas ", options.num_replicas,
        " or every rank would get no samples"));
  }
  DistributedSampler sampler;
  sampler.options_ = options;
  const int64_t n = options.num_replicas;
  sampler.num_samples_ = options.drop_last ? options.dataset_size / n
                                           : (options.dataset_size + n - 1) / n;
  return sampler;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t epoch) const {
  const int64_t size = options_.dataset_size;
  const int64_t n = options_.num_replicas;
  const int64_t total_size = num_samples_ * n;

  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    // Seeded like PyTorch (seed + epoch), so one rank-independent permutation
    // per epoch. Fisher–Yates from the back: position i swaps with a uniform
    // j in [0, i].
    std::mt19937_64 engine(options_.seed + static_cast<uint64_t>(epoch));
    for (int64_t i = size - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(
          UniformBelow(engine, static_cast<uint64_t>(i) + 1));
      std::swap(order[i], order[j]);
    }
  }

  // Global position p < size is order[p]; beyond it (padding, only without
  // drop_last) the list repeats from its head, cyclically when the world is
  // larger than the data set. With drop_last total_size <= size truncates.
  std::vector<int64_t> shard;
  shard.reserve(num_samples_);
  for (int64_t p = options_.rank; p < total_size; p += n) {
    shard.push_back(order[p % size]);
  }
  return shard;
}

}  // namespace gradsync
