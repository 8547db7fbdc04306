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

// A run's timeline as core/train/step_timeline.h writes it: worker 0's
// step 4 (the last), its compute from 1,002,000 us, buckets handed off 5 and
// 12 ms into it (out of their index order), and worker 1 and a server,
// which are not read.
constexpr char kRunTrace[] = R"({"traceEvents": [
  {"ph": "X", "name": "step 3", "cat": "step", "pid": 0, "tid": 0, "ts": 900000, "dur": 50000},
  {"name": "bucket 0 (9.00 MiB): handed off -> step synchronized", "cat": "bucket",
   "pid": 0, "tid": 2, "id": 300000, "ph": "b", "ts": 901000},
  {"ph": "X", "name": "step 4", "cat": "step", "pid": 0, "tid": 0, "ts": 1000000, "dur": 40000},
  {"ph": "X", "name": "forward+backward", "cat": "compute", "pid": 0, "tid": 1,
   "ts": 1002000, "dur": 20000},
  {"name": "bucket 1 (0.25 MiB): handed off -> step synchronized", "cat": "bucket",
   "pid": 0, "tid": 2, "id": 400001, "ph": "b", "ts": 1007000},
  {"name": "bucket 0 (1.50 MiB): handed off -> step synchronized", "cat": "bucket",
   "pid": 0, "tid": 2, "id": 400000, "ph": "b", "ts": 1014000},
  {"ph": "X", "name": "optimizer", "cat": "optimizer", "pid": 0, "tid": 0,
   "ts": 1030000, "dur": 2500},
  {"ph": "X", "name": "step 4", "cat": "step", "pid": 1, "tid": 0, "ts": 1000000, "dur": 40000},
  {"ph": "X", "name": "step 4", "cat": "step", "pid": 1000, "tid": 0, "ts": 1000000, "dur": 1}
]})";

TEST(ParseRunTraceTest, LastStepOfWorkerZeroWithoutLayout) {
  auto profile = ParseRunTrace(kRunTrace, "", "RUN");
  ASSERT_TRUE(profile.ok()) << profile.status();
  // Step 3 has other buckets and no forward+backward: step 4 alone.
  EXPECT_EQ(profile->traced_steps, 1);
  EXPECT_EQ(profile->forward_ms, 0);
  EXPECT_EQ(profile->backward_ms, 20.0);
  EXPECT_EQ(profile->optimizer_ms, 2.5);
  // In hand-off order, bytes from the spans' MiB.
  ASSERT_EQ(profile->buckets.size(), 2u);
  EXPECT_EQ(profile->buckets[0].bytes, 262144);
  EXPECT_EQ(profile->buckets[0].ready_ms, 5.0);
  EXPECT_EQ(profile->buckets[1].bytes, 1572864);
  EXPECT_EQ(profile->buckets[1].ready_ms, 12.0);
  EXPECT_EQ(profile->gradient_bytes, 262144 + 1572864);
}

// Worker 0's three steps with the same two buckets, one of them slowed
// (backward 40 ms, buckets at 9 and 30 ms against 20 ms, 5 and 12 ms), and
// a step without a forward+backward span, which is left out.
constexpr char kSlowedStepTrace[] = R"({"traceEvents": [
  {"ph": "X", "name": "step 1", "cat": "step", "pid": 0, "ts": 0, "dur": 50000},
  {"ph": "X", "name": "forward+backward", "cat": "compute", "pid": 0, "ts": 1000, "dur": 20000},
  {"name": "bucket 0 (1.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 6000},
  {"name": "bucket 1 (2.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 13000},
  {"ph": "X", "name": "optimizer", "cat": "optimizer", "pid": 0, "ts": 30000, "dur": 2000},
  {"ph": "X", "name": "step 2", "cat": "step", "pid": 0, "ts": 100000, "dur": 60000},
  {"ph": "X", "name": "forward+backward", "cat": "compute", "pid": 0, "ts": 101000, "dur": 40000},
  {"name": "bucket 0 (1.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 110000},
  {"name": "bucket 1 (2.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 131000},
  {"ph": "X", "name": "optimizer", "cat": "optimizer", "pid": 0, "ts": 150000, "dur": 9000},
  {"ph": "X", "name": "step 3", "cat": "step", "pid": 0, "ts": 200000, "dur": 10000},
  {"name": "bucket 0 (1.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 201000},
  {"ph": "X", "name": "step 4", "cat": "step", "pid": 0, "ts": 300000, "dur": 50000},
  {"ph": "X", "name": "forward+backward", "cat": "compute", "pid": 0, "ts": 301000, "dur": 20000},
  {"name": "bucket 1 (2.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 313000},
  {"name": "bucket 0 (1.00 MiB): handed off", "cat": "bucket", "pid": 0, "ph": "b", "ts": 306000},
  {"ph": "X", "name": "optimizer", "cat": "optimizer", "pid": 0, "ts": 330000, "dur": 2000}
]})";

TEST(ParseRunTraceTest, EachFigureIsTheMedianOverTheStepsWithTheSameBuckets) {
  auto profile = ParseRunTrace(kSlowedStepTrace, "", "RUN");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->traced_steps, 3);  // step 3 has no forward+backward
  EXPECT_EQ(profile->backward_ms, 20.0);
  EXPECT_EQ(profile->optimizer_ms, 2.0);
  ASSERT_EQ(profile->buckets.size(), 2u);
  EXPECT_EQ(profile->buckets[0].bytes, 1 << 20);
  EXPECT_EQ(profile->buckets[0].ready_ms, 5.0);
  EXPECT_EQ(profile->buckets[1].bytes, 2 << 20);
  EXPECT_EQ(profile->buckets[1].ready_ms, 12.0);
}

TEST(ParseRunTraceTest, LayoutGivesExactBytes) {
  auto profile = ParseRunTrace(
      kRunTrace, R"({"buckets": [{"index": 0, "bytes": 1572868},
                                 {"index": 1, "bytes": 262400}]})",
      "RUN");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->buckets[0].bytes, 262400);
  EXPECT_EQ(profile->buckets[1].bytes, 1572868);
}

TEST(ParseRunTraceTest, RefusesWhatIsNotAStepTrace) {
  EXPECT_THAT(ParseRunTrace("[]", "", "RUN").status().message(),
              HasSubstr("RUN: its trace is not a Chrome trace"));
  EXPECT_THAT(
      ParseRunTrace(R"({"traceEvents": []})", "", "RUN").status().message(),
      HasSubstr("has no step spans"));
  EXPECT_THAT(ParseRunTrace(R"({"traceEvents": [{"ph": "X", "name": "step 1",
      "cat": "step", "pid": 0, "ts": 0, "dur": 10}]})",
                            "", "RUN")
                  .status()
                  .message(),
              HasSubstr("has no bucket spans"));
}

}  // namespace
}  // namespace sim
}  // namespace gradsync
