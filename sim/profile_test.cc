#include "sim/profile.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace sim {
namespace {

using ::testing::HasSubstr;

// Three tensors in registration order; backward makes the last ready first.
constexpr char kProfile[] = R"({"model": "tiny", "batch": 8, "precision": "fp32",
  "forward_ms": 2.0, "backward_ms": 3.0, "optimizer_ms": 0.5,
  "params": [{"name": "a", "numel": 100, "ready_ms": 3.0},
             {"name": "b", "numel": 200, "ready_ms": 2.0},
             {"name": "c", "numel": 300, "ready_ms": 1.0}]})";

TEST(ParseProfileTest, BucketsFollowBackwardsOrderAndCap) {
  // A cap of 1000 bytes: c (1200 bytes) fills one bucket, b and a the next.
  auto profile = ParseProfile(kProfile, 1000, "tiny.json");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->name, "tiny-b8-fp32");
  EXPECT_EQ(profile->gradient_bytes, 2400);
  ASSERT_EQ(profile->buckets.size(), 2u);
  EXPECT_EQ(profile->buckets[0].bytes, 1200);
  EXPECT_EQ(profile->buckets[0].ready_ms, 1.0);
  EXPECT_EQ(profile->buckets[1].bytes, 1200);
  EXPECT_EQ(profile->buckets[1].ready_ms, 3.0);  // its latest tensor, a
  EXPECT_EQ(profile->forward_ms, 2.0);
  EXPECT_EQ(profile->optimizer_ms, 0.5);
  // Each bucket's tensors in registration order, for the PS's keys.
  EXPECT_THAT(profile->tensor_bytes, ::testing::ElementsAre(400, 800, 1200));
  EXPECT_EQ(profile->buckets[0].first_tensor, 2);
  EXPECT_EQ(profile->buckets[0].end_tensor, 3);
  EXPECT_EQ(profile->buckets[1].first_tensor, 0);
  EXPECT_EQ(profile->buckets[1].end_tensor, 2);
  // One bucket when the cap holds everything.
  profile = ParseProfile(kProfile, 1 << 20, "tiny.json");
  ASSERT_TRUE(profile.ok());
  ASSERT_EQ(profile->buckets.size(), 1u);
  EXPECT_EQ(profile->buckets[0].ready_ms, 3.0);
}

TEST(ParseProfileTest, RefusesProfilesItCannotReplay) {
  struct Case {
    const char* text;
    const char* words;
  } cases[] = {
      {"[1, 2]", "is not a JSON object"},
      {R"({"forward_ms": 1, "backward_ms": 1, "optimizer_ms": 1})",
       "has no params"},
      {R"({"forward_ms": 1, "backward_ms": 1, "optimizer_ms": 1, "params": []})",
       "has no params"},
      {R"({"backward_ms": 1, "optimizer_ms": 1, "params": []})",
       "'forward_ms' is missing"},
      {R"({"forward_ms": 1, "backward_ms": 1, "optimizer_ms": 1,
           "params": [{"numel": -4, "ready_ms": 1}]})",
       "param 0 needs a positive integer numel"},
  };
  for (const Case& c : cases) {
    auto profile = ParseProfile(c.text, 1000, "bad.json");
    ASSERT_FALSE(profile.ok()) << c.text;
    EXPECT_THAT(std::string(profile.status().message()), HasSubstr("bad.json"));
    EXPECT_THAT(std::string(profile.status().message()), HasSubstr(c.words));
  }
}

TEST(CustomProfileTest, SplitsTheGradientIntoEqualTensors) {
  StepProfile profile = CustomProfile(1000, 3, 500);
  EXPECT_EQ(profile.gradient_bytes, 1000);
  ASSERT_EQ(profile.buckets.size(), 2u);  // 333 + 333, then 334
  EXPECT_EQ(profile.buckets[0].bytes, 666);
  EXPECT_EQ(profile.buckets[1].bytes, 334);
  EXPECT_THAT(profile.tensor_bytes, ::testing::ElementsAre(334, 333, 333));
  EXPECT_EQ(profile.buckets[1].first_tensor, 0);
  EXPECT_EQ(profile.buckets[1].end_tensor, 1);
  EXPECT_EQ(profile.forward_ms + profile.backward_ms, 0);
}

}  // namespace
}  // namespace sim
}  // namespace gradsync
