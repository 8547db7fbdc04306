// PartitionSchedule without sockets: the order of a step's collectives under
// --schedule=priority, the credit, preemption by a late partition, the
// agreement's arithmetic and the derived partition size.
#include "allreduce/partition_schedule.h"

#include <set>
#include <vector>

#include "allreduce/algorithms/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

// Three buckets in backward order over a flat buffer of 3000 floats:
// bucket 0 holds the last layers (highest offsets), bucket 2 the first.
std::vector<Bucket> ThreeBuckets() {
  std::vector<Bucket> buckets(3);
  buckets[0].index = 0;
  buckets[0].offset = 2000;
  buckets[0].numel = 1000;
  buckets[1].index = 1;
  buckets[1].offset = 1000;
  buckets[1].numel = 1000;
  buckets[2].index = 2;
  buckets[2].offset = 0;
  buckets[2].numel = 1000;
  return buckets;
}

TEST(PartitionScheduleTest, PartitionsCoverEveryBucketExactlyOnce) {
  PartitionSchedule schedule;
  schedule.Reset(ThreeBuckets(), /*partition_bytes=*/1200, /*cut=*/true);
  std::vector<int> covered(3000, 0);
  for (int b = 0; b < schedule.num_buckets(); ++b) {
    for (const BucketPartition& partition : schedule.partitions(b)) {
      EXPECT_LE(partition.numel * 4, 1200);
      for (int64_t i = partition.offset; i < partition.offset + partition.numel;
           ++i) {
        ++covered[i];
      }
    }
  }
  for (int64_t i = 0; i < 3000; ++i) ASSERT_EQ(covered[i], 1) << "float " << i;
  EXPECT_EQ(schedule.total_partitions(), 3 * 4);  // 300 + 300 + 300 + 100
}

TEST(PartitionScheduleTest, UncutBucketsAreOnePartitionEach) {
  PartitionSchedule schedule;
  schedule.Reset(ThreeBuckets(), /*partition_bytes=*/1200, /*cut=*/false);
  EXPECT_EQ(schedule.total_partitions(), 3);
  EXPECT_EQ(schedule.largest_partition_bytes(), 4000);
}

TEST(PartitionScheduleTest, EverythingReadyGoesLowestOffsetFirst) {
  PartitionSchedule schedule;
  schedule.Reset(ThreeBuckets(), /*partition_bytes=*/2000, /*cut=*/true);
  std::vector<int64_t> offsets;
  while (!schedule.AllTaken()) {
    for (const BucketPartition& partition : schedule.TakeBatch(3, 1))
      offsets.push_back(partition.offset);
  }
  EXPECT_THAT(offsets, testing::ElementsAre(0, 500, 1000, 1500, 2000, 2500));
}

// The property priority scheduling exists for: a partition that becomes
// ready after lower-priority ones were queued runs before them; what it
// waits for is the batch already taken (the credit), never the queue.
TEST(PartitionScheduleTest, ALateHighPriorityPartitionOvertakesTheQueue) {
  PartitionSchedule schedule;
  schedule.Reset(ThreeBuckets(), /*partition_bytes=*/2000, /*cut=*/true);
  // Only bucket 0 (the last layers) is ready: its first partition goes, one
  // partition's credit.
  std::vector<BucketPartition> first = schedule.TakeBatch(1, 2000);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].bucket, 0);
  EXPECT_EQ(first[0].index, 0);
  EXPECT_TRUE(schedule.HasUntakenBelow(1));  // bucket 0's second, queued
  // Backward ends: buckets 1 and 2 arrive. Bucket 2 (the first layers)
  // goes before bucket 0's queued partition.
  std::vector<int> order;
  while (!schedule.AllTaken()) {
    for (const BucketPartition& partition : schedule.TakeBatch(3, 2000))
      order.push_back(partition.bucket * 10 + partition.index);
  }
  EXPECT_THAT(order, testing::ElementsAre(20, 21, 10, 11, 1));
}

TEST(PartitionScheduleTest, ABatchHoldsWhatTheCreditAllowsAndAtLeastOne) {
  PartitionSchedule schedule;
  schedule.Reset(ThreeBuckets(), /*partition_bytes=*/2000, /*cut=*/true);
  // 2000-byte partitions under a 5000-byte credit: two per batch.
  EXPECT_EQ(schedule.TakeBatch(3, 5000).size(), 2u);
  // A credit smaller than a partition still moves one.
  EXPECT_EQ(schedule.TakeBatch(3, 4).size(), 1u);
  // Nothing ready, nothing taken.
  EXPECT_TRUE(schedule.TakeBatch(0, 1 << 20).empty());
  schedule.NewStep();
  EXPECT_FALSE(schedule.AllTaken());
  EXPECT_EQ(schedule.TakeBatch(3, 1 << 20).size(), 6u);
  EXPECT_TRUE(schedule.AllTaken());
}

TEST(PartitionScheduleTest, TheAgreedPrefixIsTheSmallestVote) {
  const int n = 3;
  const int prefixes[n] = {4, 2, 3};
  std::vector<float> sum(5, 0.0f);
  for (int prefix : prefixes) {
    const std::vector<float> vote = ReadyPrefixVote(prefix, 5);
    for (int b = 0; b < 5; ++b) sum[b] += vote[b];
  }
  EXPECT_EQ(AgreedReadyPrefix(sum, n), 2);
  EXPECT_EQ(AgreedReadyPrefix(ReadyPrefixVote(5, 5), 1), 5);
  EXPECT_EQ(AgreedReadyPrefix(ReadyPrefixVote(0, 5), 1), 0);
}

TEST(PartitionScheduleTest, TagsDifferPerPartitionAndKeepFifosForTheFirst) {
  std::set<uint32_t> tags;
  for (int b = 0; b < 7; ++b) {
    EXPECT_EQ(PartitionTag(BucketPartition{b, 0, 0, 1}, 7),
              static_cast<uint32_t>(b));
    for (int i = 0; i < 100; ++i) {
      const uint32_t tag = PartitionTag(BucketPartition{b, i, 0, 1}, 7);
      EXPECT_LT(tag, kReadyPrefixTag);
      EXPECT_TRUE(tags.insert(tag).second) << "bucket " << b << " part " << i;
    }
  }
}

// The derived size keeps a partition's latency terms at most a tenth of its
// predicted time, and is the smallest power of two that does.
TEST(PartitionScheduleTest, DerivedPartitionsKeepLatencyASmallShare) {
  for (const LinkCost link :
       {LinkCost{50e-6, 1.25e9}, LinkCost{1e-3, 12.5e6}, LinkCost{5e-6, 12.5e9}}) {
    for (int n : {2, 3, 8}) {
      const CollectiveSeconds ring = [n, link](double bytes) {
        return RingAllReduceSeconds(n, bytes, link);
      };
      const int64_t bytes = DerivePartitionBytes(ring);
      EXPECT_GE(bytes, kMinDerivedPartitionBytes);
      EXPECT_LE(bytes, kMaxDerivedPartitionBytes);
      const double latency = ring(4.0);
      if (bytes < kMaxDerivedPartitionBytes) {
        EXPECT_GE(ring(static_cast<double>(bytes)),
                  kPartitionLatencyShare * latency)
            << "N " << n << ", alpha " << link.alpha_s;
      }
      if (bytes > kMinDerivedPartitionBytes) {
        EXPECT_LT(ring(static_cast<double>(bytes / 2)),
                  kPartitionLatencyShare * latency)
            << "N " << n << ", alpha " << link.alpha_s;
      }
    }
  }
}

}  // namespace
}  // namespace gradsync
