// Whole jobs under `gradsync launch --netem`: every process runs in its own
// namespace and the job works; and the emulated network is gone afterwards,
// whether the job succeeded, failed, or the launcher was told to stop
// (SIGTERM, handled like Ctrl-C); and a network partition — one process's
// link taken down mid-training, so its peers see silence, not a closed
// connection — ends the job within 15 s with errors naming the cut-off
// process. Needs root; skips otherwise.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
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

int64_t LinesIn(const std::string& path) {
  std::ifstream in(path);
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

// The bound issue-level fault handling promises, from the cut to the end of
// the job (every process's own detection: keepalive pings, see
// core/coordinator.cc).
constexpr absl::Duration kMaxTimeToExit = absl::Seconds(15);

// The lines of `output` that report a loss, for the test log.
void PrintLossReports(const std::string& output) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StrContains(line, "lost")) {
      std::printf("  %s\n", std::string(line).c_str());
    }
  }
}
constexpr int kCutStep = 20;

struct Partition {
  std::string network_prefix;  // empty: the cut never happened
  absl::Time cut_at;
};

// Runs a long job and, once worker 0 has logged kCutStep steps, takes
// process `node`'s link down at the bridge (both directions go silent).
// Tests in this binary run one at a time, so the only emulated network that
// appears while the job starts is the job's own.
ProcessResult LaunchAndCut(const std::vector<std::string>& args,
                           const std::string& metrics, int node,
                           Partition* partition) {
  std::set<std::string> existing;
  if (auto before = ListNamespaces("gs"); before.ok()) {
    existing.insert(before->begin(), before->end());
  }
  std::atomic<bool> done{false};
  std::thread cutter([&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(90);
    // Polling files and `ip netns`, not a race: nothing here is timed by it.
    while (!done && absl::Now() < give_up && LinesIn(metrics) < kCutStep) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (done) return;
    auto now = ListNamespaces("gs");
    if (!now.ok()) return;
    for (const std::string& ns : *now) {
      if (existing.count(ns) || !absl::EndsWith(ns, "-br")) continue;
      partition->network_prefix = ns.substr(0, ns.size() - 3);
      auto cut = RunCommand({"/usr/sbin/ip", "-n", ns, "link", "set",
                             absl::StrCat("p", node), "down"});
      partition->cut_at = absl::Now();
      if (!cut.ok()) partition->network_prefix.clear();
      return;
    }
  });
  ProcessResult result = RunGradsync(args, {}, absl::Seconds(150));
  done = true;
  cutter.join();
  return result;
}

TEST_F(NetemJobTest, PartitionedWorkerEndsTheRingJob) {
  const std::string dir = TestTempDir() + "/partition-ring";
  Partition partition;
  const ProcessResult result = LaunchAndCut(
      {"launch", "--run_dir=" + dir, "--workers=3", "--netem=1gbit", "--",
       "--model=custom", "--custom_params=200000", "--custom_tensors=4",
       "--data=synthetic", "--synthetic_size=256", "--batch_size=8",
       "--epochs=100000", "--progress=false", "--sync=ring",
       "--metrics_dir=" + dir + "/metrics"},
      dir + "/metrics/worker0.jsonl", /*node=*/2, &partition);
  ASSERT_FALSE(partition.network_prefix.empty())
      << "the link was never cut:\n" << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, 124) << "the job hung:\n" << result.output;
  const absl::Duration took = result.ended - partition.cut_at;
  EXPECT_LE(took, kMaxTimeToExit) << result.output;
  // Worker 0 (the coordinator) and worker 1 name the lost worker; worker 2,
  // on the far side of the cut, names the coordinator it lost.
  EXPECT_THAT(result.output, HasSubstr("the job lost worker 2 ("));
  std::printf("PARTITION ring, worker 2's link cut at step %d: job over %.2f s later\n",
              kCutStep, absl::ToDoubleSeconds(took));
  PrintLossReports(result.output);
  auto left = ListNamespaces(partition.network_prefix + "-");
  ASSERT_TRUE(left.ok());
  EXPECT_THAT(*left, ::testing::IsEmpty());
}

TEST_F(NetemJobTest, PartitionedServerEndsTheParameterServerJob) {
  const std::string dir = TestTempDir() + "/partition-ps";
  Partition partition;
  const ProcessResult result = LaunchAndCut(
      {"launch", "--run_dir=" + dir, "--workers=2", "--servers=2", "--netem=1gbit", "--",
       "--model=custom", "--custom_params=200000", "--custom_tensors=4",
       "--data=synthetic", "--synthetic_size=256", "--batch_size=8",
       "--epochs=100000", "--progress=false", "--sync=ps",
       "--metrics_dir=" + dir + "/metrics"},
      dir + "/metrics/worker0.jsonl", /*node=*/3, &partition);  // server 1
  ASSERT_FALSE(partition.network_prefix.empty())
      << "the link was never cut:\n" << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, 124) << "the job hung:\n" << result.output;
  const absl::Duration took = result.ended - partition.cut_at;
  EXPECT_LE(took, kMaxTimeToExit) << result.output;
  EXPECT_THAT(result.output, HasSubstr("the job lost server 1 ("));
  std::printf("PARTITION ps, server 1's link cut at step %d: job over %.2f s later\n",
              kCutStep, absl::ToDoubleSeconds(took));
  PrintLossReports(result.output);
  auto left = ListNamespaces(partition.network_prefix + "-");
  ASSERT_TRUE(left.ok());
  EXPECT_THAT(*left, ::testing::IsEmpty());
}

}  // namespace
}  // namespace gradsync
