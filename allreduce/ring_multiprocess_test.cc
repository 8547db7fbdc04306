// The ring across real processes: tests/ring_check_main.cc started N times by
// the launcher (core/launch/launcher.h) with torchrun's environment variables,
// each rank its own process with its own coordinator client, over loopback TCP.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string CheckBinary() {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/gradsync/tests/ring_check_main";
}

absl::StatusOr<LaunchResult> LaunchRing(int workers,
                                        const std::vector<std::string>& flags) {
  absl::StatusOr<int> port = PickFreePort();
  if (!port.ok()) return port.status();
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < workers; ++rank) {
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", rank);
    spec.argv = {CheckBinary(), "--timeout_s=60"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.env = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(workers)},
        {"LOCAL_RANK", std::to_string(rank)},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(*port)},
        {"GRADSYNC_JOB_ID", absl::StrCat("ring-multiprocess-", workers)}};
    specs.push_back(spec);
  }
  LaunchOptions options;
  options.echo = false;
  options.deadline = absl::Seconds(120);
  return RunProcessGroup(specs, options);
}

// Every process's output, for the message of a failed expectation.
std::string AllOutput(const LaunchResult& result) {
  std::string all = result.failure;
  for (const ProcessResult& process : result.processes) {
    absl::StrAppend(&all, "\n--- ", process.name, " (exit code ",
                    process.exit_code, "):\n", process.output);
  }
  return all;
}

class RingMultiprocessTest : public testing::TestWithParam<int> {};

TEST_P(RingMultiprocessTest, EveryProcessGetsExactSums) {
  const int workers = GetParam();
  auto result = LaunchRing(workers, {});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->exit_code, 0) << AllOutput(*result);
  ASSERT_EQ(result->processes.size(), static_cast<size_t>(workers));
  for (int rank = 0; rank < workers; ++rank) {
    EXPECT_THAT(result->processes[rank].output,
                HasSubstr(absl::StrCat("ring check: rank ", rank, " of ",
                                       workers, ": all-reduces of")))
        << result->processes[rank].output;
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, RingMultiprocessTest,
                         testing::Values(2, 4, 8),
                         [](const testing::TestParamInfo<int>& info) {
                           return absl::StrCat("N", info.param);
                         });

// With two processes the survivor's only neighbour is the one that left, so
// its error must name it.
TEST(RingMultiprocessFaultTest, SurvivorNamesTheProcessThatLeft) {
  auto result = LaunchRing(2, {"--depart_rank=1"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 1) << AllOutput(*result);
  EXPECT_THAT(result->failure, HasSubstr("worker 0"));
  const std::string& survivor = result->processes[0].output;
  EXPECT_THAT(survivor, HasSubstr("ring: "));
  EXPECT_THAT(survivor, HasSubstr("neighbour rank 1 (127.0.0.1:"));
  EXPECT_THAT(survivor, HasSubstr("closed the connection"));
  // Which step depends on how far the kernel's buffers let rank 0 run ahead;
  // the in-process test pins the step down.
  EXPECT_THAT(survivor, HasSubstr(" during "));
}

// With four, the failure travels around the ring: the first process to fail
// did so because a connection closed, not by waiting out its deadline.
TEST(RingMultiprocessFaultTest, RingOfFourFailsPromptlyWhenOneLeaves) {
  auto result = LaunchRing(4, {"--depart_rank=2"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 1) << AllOutput(*result);
  EXPECT_THAT(result->failure, Not(HasSubstr("worker 2")));
  std::string first_failure_output;
  for (const ProcessResult& process : result->processes) {
    if (absl::StartsWith(result->failure, process.name + " ")) {
      first_failure_output = process.output;
    }
  }
  EXPECT_THAT(first_failure_output, HasSubstr("closed the connection"));
  EXPECT_THAT(first_failure_output, Not(HasSubstr("no data from")));
}

}  // namespace
}  // namespace gradsync
