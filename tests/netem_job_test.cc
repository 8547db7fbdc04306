// Whole jobs under `gradsync launch --netem`: every process runs in its own
// namespace and the job works; and the emulated network is gone afterwards,
// whether the job succeeded, failed, or the launcher was told to stop
// (SIGTERM, handled like Ctrl-C). Needs root; skips otherwise.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"
#include "tools/netem.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// The launcher logs "namespaces gs1a2b-*"; returns "gs1a2b".
std::string NetworkPrefix(const std::string& output) {
  const std::string marker = "(namespaces ";
  const size_t at = output.find(marker);
  if (at == std::string::npos) return "";
  const size_t start = at + marker.size();
  return output.substr(start, output.find("-*", start) - start);
}

std::vector<std::string> SmallJob() {
  return {"--model=custom", "--custom_params=200000", "--custom_tensors=4",
          "--data=synthetic", "--synthetic_size=256", "--batch_size=8", "--epochs=100",
          "--progress=false", "--timeout_s=30"};
}

class NetemJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status ok = CheckEmulationPrerequisites();
    if (!ok.ok()) GTEST_SKIP() << ok.message();
  }

  ProcessResult Launch(const std::vector<std::string>& launch_flags,
                       const std::vector<std::string>& training_flags,
                       absl::Duration deadline = absl::Seconds(120)) {
    std::vector<std::string> args = {"launch", "--run_dir=" + TestTempDir() + "/run" +
                                                   std::to_string(runs_++)};
    args.insert(args.end(), launch_flags.begin(), launch_flags.end());
    args.push_back("--");
    const std::vector<std::string> job = SmallJob();
    args.insert(args.end(), job.begin(), job.end());
    args.insert(args.end(), training_flags.begin(), training_flags.end());
    return RunGradsync(args, {}, deadline);
  }

  void ExpectNothingLeft(const ProcessResult& result) {
    const std::string prefix = NetworkPrefix(result.output);
    ASSERT_FALSE(prefix.empty()) << "no network in the output:\n" << result.output;
    auto left = ListNamespaces(prefix + "-");
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_THAT(*left, ::testing::IsEmpty()) << result.output;
  }

  int runs_ = 0;
};

TEST_F(NetemJobTest, RingJobRunsInNamespacesAndCleansUp) {
  const ProcessResult result =
      Launch({"--workers=2", "--netem=1gbit,200us"}, {"--sync=ring", "--max_steps=6"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // Worker 0 hosts the coordinator at its namespace address, and worker 1
  // is reached at its own.
  EXPECT_THAT(result.output, HasSubstr("coordinator on 10.213.1.1:"));
  EXPECT_THAT(result.output, HasSubstr("10.213.1.2:"));
  ExpectNothingLeft(result);
}

TEST_F(NetemJobTest, ParameterServerJobRunsInNamespacesAndCleansUp) {
  const ProcessResult result = Launch({"--workers=2", "--servers=1", "--netem=1gbit"},
                                      {"--sync=ps", "--max_steps=6"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // The server (process 2) advertises its namespace address.
  EXPECT_THAT(result.output, HasSubstr("serving at 10.213.1.3:"));
  ExpectNothingLeft(result);
}

TEST_F(NetemJobTest, FailingJobCleansUp) {
  const ProcessResult result =
      Launch({"--workers=2", "--netem=1gbit"},
             {"--sync=ring", "--max_steps=50", "--fault_rank=1", "--fault_step=2"});
  EXPECT_EQ(result.exit_code, 3) << result.output;
  ExpectNothingLeft(result);
}

TEST_F(NetemJobTest, StoppedLauncherCleansUp) {
  // A job far longer than the deadline: the test's own launcher sends our
  // gradsync launch SIGTERM after 6 s, as Ctrl-C would.
  const ProcessResult result =
      Launch({"--workers=2", "--netem=100mbit"}, {"--sync=ring", "--max_steps=100000"},
             absl::Seconds(6));
  EXPECT_NE(result.exit_code, 0);
  ExpectNothingLeft(result);
}

}  // namespace
}  // namespace gradsync
