#include "allreduce/partition_schedule.h"

#include <algorithm>

namespace gradsync {

uint32_t PartitionTag(const BucketPartition& partition, int num_buckets) {
  const uint64_t tag = static_cast<uint64_t>(partition.bucket) +
                       static_cast<uint64_t>(std::max(num_buckets, 1)) *
                           static_cast<uint64_t>(partition.index);
  // Only a step of four billion partitions wraps; the tags then still differ
  // from the agreement's and the probe's.
  return static_cast<uint32_t>(tag % kReadyPrefixTag);
}

std::vector<float> ReadyPrefixVote(int prefix, int num_buckets) {
  std::vector<float> vote(std::max(num_buckets, 0), 0.0f);
  for (int b = 0; b < prefix && b < num_buckets; ++b) vote[b] = 1.0f;
  return vote;
}

int AgreedReadyPrefix(const std::vector<float>& summed_votes, int world_size) {
  // Sums of at most N ones are exact in float32 for any N below 2^24.
  const float all = static_cast<float>(world_size);
  int prefix = 0;
  while (prefix < static_cast<int>(summed_votes.size()) &&
         summed_votes[prefix] == all) {
    ++prefix;
  }
  return prefix;
}

int64_t DerivePartitionBytes(const CollectiveSeconds& predict) {
  const double latency_s = predict(4.0);
  int64_t bytes = kMinDerivedPartitionBytes;
  while (bytes < kMaxDerivedPartitionBytes &&
         predict(static_cast<double>(bytes)) <
             kPartitionLatencyShare * latency_s) {
    bytes *= 2;
  }
  return bytes;
}

void PartitionSchedule::Reset(const std::vector<Bucket>& buckets,
                              int64_t partition_bytes, bool cut) {
  partitions_.clear();
  total_ = 0;
  largest_bytes_ = 0;
  for (const Bucket& bucket : buckets) {
    partitions_.push_back(CutPartitions(bucket, cut ? partition_bytes : 0));
    for (const BucketPartition& partition : partitions_.back()) {
      largest_bytes_ = std::max(largest_bytes_, partition.numel * 4);
    }
    total_ += static_cast<int>(partitions_.back().size());
  }
  NewStep();
}

void PartitionSchedule::NewStep() {
  taken_.clear();
  for (const auto& partitions : partitions_) {
    taken_.emplace_back(partitions.size(), false);
  }
  taken_count_ = 0;
}

bool PartitionSchedule::HasUntakenBelow(int prefix) const {
  const int end = std::min(prefix, num_buckets());
  for (int b = 0; b < end; ++b) {
    for (bool taken : taken_[b]) {
      if (!taken) return true;
    }
  }
  return false;
}

std::vector<BucketPartition> PartitionSchedule::TakeBatch(
    int prefix, int64_t credit_bytes) {
  const int end = std::min(prefix, num_buckets());
  std::vector<BucketPartition> candidates;
  for (int b = 0; b < end; ++b) {
    for (size_t i = 0; i < partitions_[b].size(); ++i) {
      if (!taken_[b][i]) candidates.push_back(partitions_[b][i]);
    }
  }
  // Offsets are distinct (partitions do not overlap), so the order is total
  // and the same on every rank.
  std::sort(candidates.begin(), candidates.end(), SoonerNeeded);
  std::vector<BucketPartition> batch;
  int64_t bytes = 0;
  for (const BucketPartition& partition : candidates) {
    const int64_t size = partition.numel * 4;
    if (!batch.empty() && bytes + size > credit_bytes) break;
    batch.push_back(partition);
    bytes += size;
    taken_[partition.bucket][partition.index] = true;
    ++taken_count_;
  }
  return batch;
}

}  // namespace gradsync
