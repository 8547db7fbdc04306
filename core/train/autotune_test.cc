#include "core/train/autotune.h"

#include "core/sync/bucket_size_rule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(AutotuneTest, CandidatesSurroundTheDerivedCapWithinBounds) {
  EXPECT_THAT(BucketCandidates(4 * kMiB),
              ElementsAre(4 * kMiB, kMiB, 2 * kMiB, 8 * kMiB, 16 * kMiB));
  // The rule's floor: a quarter of it is the smallest tried.
  EXPECT_THAT(BucketCandidates(kMiB),
              ElementsAre(kMiB, kMinAutotuneBucketBytes, kMiB / 2, 2 * kMiB,
                          4 * kMiB));
  // At DDP's ceiling, twice and four times are the ceiling again: dropped.
  EXPECT_THAT(
      BucketCandidates(kMaxBucketBytes),
      ElementsAre(kMaxBucketBytes, kMaxBucketBytes / 4, kMaxBucketBytes / 2));
}

TEST(AutotuneTest, TheSlowestRankTimesATrialAndTheFastestTrialWins) {
  std::vector<AutotuneTrial> trials(3);
  trials[0].rank_step_ms = {10, 30};  // 30: rank 1 waits
  trials[1].rank_step_ms = {20, 21};  // 21: best by the slowest rank
  trials[2].rank_step_ms = {5, 25};   // rank 0's best is not the job's
  EXPECT_EQ(trials[0].step_ms(), 30);
  EXPECT_EQ(FastestTrial(trials), 1);
  trials[2].rank_step_ms = {21, 21};  // a tie keeps the earlier trial
  EXPECT_EQ(FastestTrial(trials), 1);
  EXPECT_EQ(FastestTrial({}), -1);
}

TEST(AutotuneTest, TrialLineCarriesSettingTimeAndThroughput) {
  AutotuneTrial trial;
  trial.bucket_bytes = kMiB / 4;
  trial.num_buckets = 10;
  trial.steps = 3;
  trial.samples = 256;
  trial.rank_step_ms = {40, 50};
  const nlohmann::json line =
      nlohmann::json::parse(TrialJsonLine(trial, 2, true));
  EXPECT_EQ(line["trial"], 2);
  EXPECT_EQ(line["bucket_mb"], 0.25);
  EXPECT_EQ(line["buckets"], 10);
  EXPECT_EQ(line["step_ms"], 50);
  EXPECT_EQ(line["samples_per_s"], 256 / 0.05);
  EXPECT_EQ(line["chosen"], true);
  EXPECT_THAT(AutotuneSource({trial}, 0),
              HasSubstr("autotune: fastest of 1 trials"));
}

TEST(AutotuneTest, StepTimesRoundTripAndBadOnesAreNamed) {
  const std::vector<double> millis = {1.5, 20.25};
  EXPECT_EQ(*DecodeTrialMillis(EncodeTrialMillis(millis), 1, 2), millis);
  const absl::StatusOr<std::vector<double>> short_list =
      DecodeTrialMillis("1.5", 3, 2);
  ASSERT_FALSE(short_list.ok());
  EXPECT_THAT(short_list.status().message(), HasSubstr("worker 3 timed 1"));
  EXPECT_FALSE(DecodeTrialMillis("1.5,x", 1, 2).ok());
}

}  // namespace
}  // namespace gradsync
