#include "core/train/straggler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(StragglerTest, ParsesRankMillisecondsAndEvery) {
  absl::StatusOr<std::vector<StragglerSpec>> specs =
      ParseStragglers("3:40,1:200.5:10");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].rank, 3);
  EXPECT_EQ((*specs)[0].ms, 40);
  EXPECT_EQ((*specs)[0].every, 1);
  EXPECT_EQ((*specs)[1].rank, 1);
  EXPECT_EQ((*specs)[1].ms, 200.5);
  EXPECT_EQ((*specs)[1].every, 10);
  EXPECT_TRUE(ParseStragglers("")->empty());
}

TEST(StragglerTest, BadTextIsRefusedNamingTheItem) {
  for (const char* text : {"3", "a:40", "3:x", "3:40:0", "3:40:2:1", "3:40,"}) {
    absl::StatusOr<std::vector<StragglerSpec>> specs = ParseStragglers(text);
    EXPECT_FALSE(specs.ok()) << text;
    EXPECT_THAT(specs.status().message(), HasSubstr("RANK:MS[:EVERY]"));
  }
}

TEST(StragglerTest, CheckRefusesRanksOutsideTheJobAndAbsurdSleeps) {
  Slowness slowness;
  slowness.stragglers = {{4, 10, 1}};
  EXPECT_THAT(CheckSlowness(slowness, 4).message(),
              HasSubstr("there is no worker 4 in a job of 4 workers"));
  slowness.stragglers = {{1, 10, 1}, {1, 5, 1}};
  EXPECT_THAT(CheckSlowness(slowness, 4).message(), HasSubstr("twice"));
  slowness.stragglers = {{1, -5, 1}};
  EXPECT_FALSE(CheckSlowness(slowness, 4).ok());
  slowness.stragglers = {{1, 1e9, 1}};
  EXPECT_FALSE(CheckSlowness(slowness, 4).ok());
  slowness.stragglers = {{1, 10, 1}};
  slowness.jitter_ms = -1;
  EXPECT_FALSE(CheckSlowness(slowness, 4).ok());
  slowness.jitter_ms = 3;
  EXPECT_TRUE(CheckSlowness(slowness, 4).ok());
}

TEST(StragglerTest, DelaysFollowTheSpecAndJitterIsReproducible) {
  Slowness slowness;
  slowness.stragglers = {{2, 30, 3}};
  EXPECT_EQ(SlownessDelayMs(slowness, 2, 0), 30);
  EXPECT_EQ(SlownessDelayMs(slowness, 2, 1), 0);
  EXPECT_EQ(SlownessDelayMs(slowness, 2, 3), 30);
  EXPECT_EQ(SlownessDelayMs(slowness, 1, 3), 0);
  slowness.jitter_ms = 5;
  double total = 0;
  for (int step = 0; step < 1000; ++step) {
    const double ms = SlownessDelayMs(slowness, 1, step);
    ASSERT_GE(ms, 0);
    ASSERT_LT(ms, 5);
    EXPECT_EQ(ms, SlownessDelayMs(slowness, 1, step));
    total += ms;
  }
  // Uniform on [0, 5): the mean of 1000 draws is 2.5 +- 0.3 (6 sigma).
  EXPECT_NEAR(total / 1000, 2.5, 0.3);
  EXPECT_NE(SlownessDelayMs(slowness, 1, 7), SlownessDelayMs(slowness, 0, 7));
}

}  // namespace
}  // namespace gradsync
