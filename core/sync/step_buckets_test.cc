#include "core/sync/step_buckets.h"

#include <memory>
#include <string>

#include "core/cluster/in_memory_rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(StepBucketsTest, EveryBucketOncePerStepThenTheNextStep) {
  StepBuckets buckets("ring");
  buckets.Reset(3, /*first_step=*/7);
  EXPECT_EQ(buckets.step(), 7);
  ASSERT_TRUE(buckets.MarkReady(2).ok());
  ASSERT_TRUE(buckets.MarkReady(0).ok());
  EXPECT_EQ(buckets.num_ready(), 2);
  EXPECT_FALSE(buckets.all_ready());
  ASSERT_TRUE(buckets.MarkReady(1).ok());
  EXPECT_TRUE(buckets.all_ready());
  EXPECT_TRUE(buckets.CheckAllReady().ok());
  buckets.NextStep();
  EXPECT_EQ(buckets.step(), 8);
  EXPECT_EQ(buckets.num_ready(), 0);
  EXPECT_FALSE(buckets.ready(2));
  // The same bucket again in the new step is fine.
  EXPECT_TRUE(buckets.MarkReady(2).ok());
}

TEST(StepBucketsTest, RepeatsAndStrangersAreRefusedNamingStepAndBucket) {
  StepBuckets buckets("worker 3");
  buckets.Reset(2);
  ASSERT_TRUE(buckets.MarkReady(1).ok());
  const absl::Status repeat = buckets.MarkReady(1);
  EXPECT_EQ(repeat.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(repeat.message()),
              HasSubstr("worker 3: step 0: bucket 1 was handed over twice"));
  const absl::Status stranger = buckets.MarkReady(2);
  EXPECT_THAT(std::string(stranger.message()),
              HasSubstr("BucketReady(2) is out of range (2 buckets)"));
  EXPECT_FALSE(buckets.MarkReady(-1).ok());
  EXPECT_EQ(buckets.num_ready(), 1);  // refused calls mark nothing
}

TEST(StepBucketsTest, FinishingEarlyListsTheMissingBuckets) {
  StepBuckets buckets("ring");
  buckets.Reset(5);
  ASSERT_TRUE(buckets.MarkReady(1).ok());
  ASSERT_TRUE(buckets.MarkReady(3).ok());
  const absl::Status early = buckets.CheckAllReady();
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.message()),
              HasSubstr("Finish before bucket(s) 0, 2, 4 were handed over"));
  buckets.ClearStep();  // abandoned: not counted
  EXPECT_EQ(buckets.step(), 0);
  EXPECT_EQ(buckets.num_ready(), 0);
}

TEST(StepBucketsTest, AStepFailureNamesTheLostMemberWhenThereIsOne) {
  const absl::Status reset = absl::UnavailableError("connection reset");
  EXPECT_EQ(ExplainStepFailure(nullptr, reset), reset);
  auto job = std::make_shared<InMemoryJob>(2, 0);
  InMemoryRendezvous worker0(job, Role::kWorker, 0);
  job->Lose("worker 1", "killed");
  EXPECT_THAT(std::string(ExplainStepFailure(&worker0, reset).message()),
              HasSubstr("the job lost worker 1: killed; so connection reset"));
}

}  // namespace
}  // namespace gradsync
