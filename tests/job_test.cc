// Whole jobs through `gradsync launch`: the coordinator's join, barriers and
// summary gathering across real processes, and a failing rank stopping the
// job with its exit code.
#include <fstream>
#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Small(std::vector<std::string> args) {
  for (const char* flag :
       {"--data=synthetic", "--synthetic_size=2048", "--layers=64,32,10",
        "--batch_size=32", "--epochs=2", "--progress=false"}) {
    args.push_back(flag);
  }
  return args;
}

TEST(JobTest, TwoWorkersGatherOneSummary) {
  const std::string dir = TestTempDir() + "/two";
  ProcessResult run = RunGradsync(Small(
      {"launch", "--workers=2", "--run_dir=" + dir, "--", "--sync=ring"}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("final test accuracy"));
  std::ifstream in(dir + "/summary.json");
  auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["workers"], 2);
  ASSERT_EQ(summary["ranks"].size(), 2u);
  EXPECT_EQ(summary["ranks"][1]["rank"], 1);
  EXPECT_GT(summary["ranks"][1]["bytes_sent_per_step"].get<int64_t>(), 0);
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.5);
  EXPECT_EQ(summary["manifest"]["flags"]["sync"], "ring");
  // Per-rank logs and metrics exist.
  EXPECT_TRUE(std::ifstream(dir + "/logs/worker1.log").good());
  EXPECT_TRUE(std::ifstream(dir + "/worker1.jsonl").good());
}

TEST(JobTest, FailingRankStopsTheJobWithItsExitCode) {
  const std::string dir = TestTempDir() + "/fail";
  ProcessResult run =
      RunGradsync(Small({"launch", "--workers=3", "--run_dir=" + dir, "--",
                         "--sync=ring", "--fault_rank=1", "--fault_step=3"}));
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_THAT(run.output, HasSubstr("worker 1 exited with code 3"));
}

TEST(JobTest, KilledRankStopsTheJob) {
  const std::string dir = TestTempDir() + "/kill";
  ProcessResult run = RunGradsync(
      Small({"launch", "--workers=2", "--run_dir=" + dir, "--", "--sync=ring",
             "--fault_rank=0", "--fault_step=2", "--fault=kill"}));
  EXPECT_EQ(run.exit_code, 128 + 9) << run.output;
  EXPECT_THAT(run.output, HasSubstr("worker 0 was killed by signal 9"));
}

}  // namespace
}  // namespace gradsync
