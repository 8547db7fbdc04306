#include "core/sync/schedule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(ScheduleTest, ParsesBothKindsAndRefusesOthersNamingTheFlag) {
  EXPECT_EQ(*ParseScheduleKind("fifo"), ScheduleKind::kFifo);
  EXPECT_EQ(*ParseScheduleKind("priority"), ScheduleKind::kPriority);
  const auto bad = ParseScheduleKind("lifo");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--schedule=lifo"));
  EXPECT_STREQ(ScheduleKindName(ScheduleKind::kPriority), "priority");
}

TEST(ScheduleTest, RefusesNegativeSizesAndACreditBelowOnePartition) {
  ScheduleOptions options;
  options.partition_bytes = -1024;
  EXPECT_THAT(ValidateScheduleOptions(options).message(),
              HasSubstr("--partition_kb=-1"));
  options.partition_bytes = 0;
  options.credit_bytes = -2048;
  EXPECT_THAT(ValidateScheduleOptions(options).message(),
              HasSubstr("--credit_kb=-2"));
  options.partition_bytes = 8192;
  options.credit_bytes = 4096;
  EXPECT_THAT(ValidateScheduleOptions(options).message(),
              HasSubstr("must hold at least one partition"));
  options.credit_bytes = 8192;
  EXPECT_TRUE(ValidateScheduleOptions(options).ok());
}

TEST(ScheduleTest, PartitionsCoverTheBucketExactlyLowestOffsetFirst) {
  Bucket bucket;
  bucket.index = 3;
  bucket.offset = 100;
  bucket.numel = 10;
  const std::vector<BucketPartition> parts = CutPartitions(bucket, 16);  // 4 floats
  ASSERT_EQ(parts.size(), 3u);
  int64_t next = bucket.offset;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].bucket, 3);
    EXPECT_EQ(parts[i].index, static_cast<int>(i));
    EXPECT_EQ(parts[i].offset, next);
    next += parts[i].numel;
  }
  EXPECT_EQ(next, bucket.offset + bucket.numel);
  EXPECT_EQ(parts.back().numel, 2);
  EXPECT_TRUE(SoonerNeeded(parts[0], parts[1]));
  EXPECT_FALSE(SoonerNeeded(parts[2], parts[1]));
}

TEST(ScheduleTest, WholeBucketWhenNotCutOrRowSparse) {
  Bucket bucket;
  bucket.offset = 8;
  bucket.numel = 64;
  EXPECT_EQ(CutPartitions(bucket, 0).size(), 1u);
  EXPECT_EQ(CutPartitions(bucket, 1 << 20).size(), 1u);
  bucket.sparse_row_width = 8;
  const std::vector<BucketPartition> parts = CutPartitions(bucket, 16);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].numel, 64);
}

}  // namespace
}  // namespace gradsync
