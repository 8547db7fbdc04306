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
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/launch/netem.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

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
  return {"--model=custom",   "--custom_params=200000", "--custom_tensors=4",
          "--data=synthetic", "--synthetic_size=256",   "--batch_size=8",
          "--epochs=100",     "--progress=false",       "--timeout_s=30"};
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
    std::vector<std::string> args = {
        "launch",
        "--run_dir=" + TestTempDir() + "/run" + std::to_string(runs_++)};
    args.insert(args.end(), launch_flags.begin(), launch_flags.end());
    args.push_back("--");
    const std::vector<std::string> job = SmallJob();
    args.insert(args.end(), job.begin(), job.end());
    args.insert(args.end(), training_flags.begin(), training_flags.end());
    return RunGradsync(args, {}, deadline);
  }

  void ExpectNothingLeft(const ProcessResult& result) {
    const std::string prefix = NetworkPrefix(result.output);
    ASSERT_FALSE(prefix.empty()) << "no network in the output:\n"
                                 << result.output;
    auto left = ListNamespaces(prefix + "-");
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_THAT(*left, ::testing::IsEmpty()) << result.output;
  }

  int runs_ = 0;
};

TEST_F(NetemJobTest, RingJobRunsInNamespacesAndCleansUp) {
  const ProcessResult result = Launch({"--workers=2", "--netem=1gbit,200us"},
                                      {"--sync=ring", "--max_steps=6"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // Worker 0 hosts the coordinator at its namespace address, and worker 1
  // is reached at its own.
  EXPECT_THAT(result.output, HasSubstr("coordinator on 10.213.1.1:"));
  EXPECT_THAT(result.output, HasSubstr("10.213.1.2:"));
  ExpectNothingLeft(result);
}

TEST_F(NetemJobTest, ParameterServerJobRunsInNamespacesAndCleansUp) {
  const ProcessResult result =
      Launch({"--workers=2", "--servers=1", "--netem=1gbit"},
             {"--sync=ps", "--max_steps=6"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // The server (process 2) advertises its namespace address.
  EXPECT_THAT(result.output, HasSubstr("serving at 10.213.1.3:"));
  // The run folder maps each process to its namespace, address and port.
  const std::string prefix = NetworkPrefix(result.output);
  std::ifstream in(TestTempDir() + "/run" + std::to_string(runs_ - 1) +
                   "/network.txt");
  const std::string map((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  EXPECT_THAT(map, HasSubstr(absl::StrCat("bridge ", prefix, "-br\n")));
  EXPECT_THAT(map, HasSubstr(absl::StrCat("worker 1 ", prefix,
                                          "-n1 10.213.1.2 bridge-port p1\n")));
  EXPECT_THAT(map, HasSubstr(absl::StrCat("server 0 ", prefix,
                                          "-n2 10.213.1.3 bridge-port p2\n")));
  ExpectNothingLeft(result);
}

// --ranks_per_host: two workers behind each emulated host link, which
// --sync=hierarchical takes as its nodes (LOCAL_WORLD_SIZE of the host).
TEST_F(NetemJobTest, RanksShareHostsAndHierarchicalUsesThem) {
  const ProcessResult result =
      Launch({"--workers=4", "--netem=1gbit", "--ranks_per_host=2"},
             {"--sync=hierarchical", "--max_steps=4"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr("hierarchical: 2 ranks per node, from the processes "
                        "on this host (LOCAL_WORLD_SIZE); 2 nodes"));
  const std::string prefix = NetworkPrefix(result.output);
  std::ifstream in(TestTempDir() + "/run" + std::to_string(runs_ - 1) +
                   "/network.txt");
  const std::string map((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  EXPECT_THAT(map, HasSubstr(absl::StrCat("worker 1 ", prefix,
                                          "-n0 10.213.1.1 bridge-port p0\n")));
  EXPECT_THAT(map, HasSubstr(absl::StrCat("worker 2 ", prefix,
                                          "-n1 10.213.1.2 bridge-port p1\n")));
  ExpectNothingLeft(result);
}

TEST_F(NetemJobTest, FailingJobCleansUp) {
  const ProcessResult result = Launch(
      {"--workers=2", "--netem=1gbit"},
      {"--sync=ring", "--max_steps=50", "--fault_rank=1", "--fault_step=2"});
  EXPECT_EQ(result.exit_code, 3) << result.output;
  ExpectNothingLeft(result);
}

TEST_F(NetemJobTest, StoppedLauncherCleansUp) {
  // A job far longer than the deadline: the test's own launcher sends our
  // gradsync launch SIGTERM after 6 s, as Ctrl-C would.
  const ProcessResult result =
      Launch({"--workers=2", "--netem=100mbit"},
             {"--sync=ring", "--max_steps=100000"}, absl::Seconds(6));
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
// core/cluster/coordinator.cc).
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

// Which side of a partition notices first is a race, and both are right: the
// members left with the coordinator name the lost one after their keepalive
// watchdog fires (within about 10 s), while the cut-off member may learn
// sooner, when its kernel gives up resolving its peers (No route to host), and
// end the job first by naming the coordinator it lost. Either way the output
// must name `member` as the one cut off.
void ExpectNamesCutOffMember(const std::string& output,
                             const std::string& member) {
  const bool named_by_survivors =
      absl::StrContains(output, absl::StrCat("the job lost ", member, " ("));
  const bool named_by_itself = absl::StrContains(
      output, absl::StrCat("] ", member, ": the job lost its coordinator"));
  EXPECT_TRUE(named_by_survivors || named_by_itself)
      << "no process named " << member << " as cut off:\n"
      << output;
}

struct Partition {
  std::string network_prefix;  // empty: the cut never happened
  absl::Time cut_at;
};

// The bridge namespace of the job's emulated network, from the map the
// launcher writes to <run_dir>/network.txt; empty until the file appears.
std::string BridgeNamespaceOf(const std::string& run_dir) {
  std::ifstream in(run_dir + "/network.txt");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "bridge ")) return line.substr(7);
  }
  return "";
}

// Runs a long job in `run_dir` and, once worker 0 has logged kCutStep steps,
// takes process `node`'s link down at the bridge (both directions go silent).
ProcessResult LaunchAndCut(const std::vector<std::string>& args,
                           const std::string& run_dir, int node,
                           Partition* partition) {
  const std::string metrics = run_dir + "/metrics/worker0.jsonl";
  std::atomic<bool> done{false};
  std::thread cutter([&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(90);
    // Polling files, not a race: nothing here is timed by it.
    while (!done && absl::Now() < give_up && LinesIn(metrics) < kCutStep) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    const std::string bridge = BridgeNamespaceOf(run_dir);
    if (done || bridge.empty()) return;
    auto cut = RunCommand({"/usr/sbin/ip", "-n", bridge, "link", "set",
                           absl::StrCat("p", node), "down"});
    partition->cut_at = absl::Now();
    if (cut.ok())
      partition->network_prefix = bridge.substr(0, bridge.size() - 3);
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
      dir, /*node=*/2, &partition);
  ASSERT_FALSE(partition.network_prefix.empty()) << "the link was never cut:\n"
                                                 << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, 124) << "the job hung:\n" << result.output;
  const absl::Duration took = result.ended - partition.cut_at;
  EXPECT_LE(took, kMaxTimeToExit) << result.output;
  ExpectNamesCutOffMember(result.output, "worker 2");
  std::printf(
      "PARTITION ring, worker 2's link cut at step %d: job over %.2f s later\n",
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
      {"launch", "--run_dir=" + dir, "--workers=2", "--servers=2",
       "--netem=1gbit", "--", "--model=custom", "--custom_params=200000",
       "--custom_tensors=4", "--data=synthetic", "--synthetic_size=256",
       "--batch_size=8", "--epochs=100000", "--progress=false", "--sync=ps",
       "--metrics_dir=" + dir + "/metrics"},
      dir, /*node=*/3, &partition);  // server 1
  ASSERT_FALSE(partition.network_prefix.empty()) << "the link was never cut:\n"
                                                 << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, 124) << "the job hung:\n" << result.output;
  const absl::Duration took = result.ended - partition.cut_at;
  EXPECT_LE(took, kMaxTimeToExit) << result.output;
  ExpectNamesCutOffMember(result.output, "server 1");
  std::printf(
      "PARTITION ps, server 1's link cut at step %d: job over %.2f s later\n",
      kCutStep, absl::ToDoubleSeconds(took));
  PrintLossReports(result.output);
  auto left = ListNamespaces(partition.network_prefix + "-");
  ASSERT_TRUE(left.ok());
  EXPECT_THAT(*left, ::testing::IsEmpty());
}

}  // namespace
}  // namespace gradsync
