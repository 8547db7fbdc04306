// Two `gradsync launch --nnodes=2` launchers on two emulated hosts (network
// namespaces joined by a bridge, addresses in 10.213.0.0/16, built by
// core/launch/netem.h): each runs its node's share of a ring job and of a
// mixed parameter-server job, the job token shared through the environment;
// the job has the right N, K and ranks, and every worker ends with the same
// parameters. And a node that fails ends the other node's processes too.
// Needs root (namespaces); skips otherwise.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster/job_token.h"
#include "core/launch/launcher.h"
#include "core/launch/netem.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"
#include "tests/job_checks.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;

using ::testing::HasSubstr;

constexpr int kPort = 29500;  // free in the fresh namespaces

class MultiNodeLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status ok = CheckEmulationPrerequisites();
    if (!ok.ok()) GTEST_SKIP() << ok.message();
    EmulatedNetworkOptions options;
    options.nodes = 2;
    auto link = ParseLinkSpec("1gbit");
    ASSERT_TRUE(link.ok()) << link.status();
    options.link = *link;
    auto network = EmulatedNetwork::Create(options);
    ASSERT_TRUE(network.ok()) << network.status();
    network_ = std::move(*network);
    auto token = NewJobToken();
    ASSERT_TRUE(token.ok()) << token.status();
    token_ = *token;
  }

  void TearDown() override {
    if (network_ == nullptr) return;
    const std::string prefix = network_->prefix();
    EXPECT_TRUE(network_->Destroy().ok());
    auto left = ListNamespaces(prefix + "-");
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_THAT(*left, ::testing::IsEmpty());
  }

  // One launcher per host, as a person would start them by hand on two
  // machines: the same command but for --node_rank and the run folder.
  LaunchResult RunTwoNodes(const std::string& dir, int workers, int servers,
                           const std::vector<std::string>& training_flags) {
    std::vector<ProcessSpec> specs;
    for (int node = 0; node < 2; ++node) {
      ProcessSpec spec;
      spec.name = absl::StrCat("node ", node);
      spec.argv = network_->ExecPrefix(node);
      for (const std::string& arg :
           {GradsyncBinary(),
            std::string("launch"),
            absl::StrCat("--nnodes=2"),
            absl::StrCat("--node_rank=", node),
            absl::StrCat("--master_addr=", network_->NodeAddress(0)),
            absl::StrCat("--master_port=", kPort),
            absl::StrCat("--workers=", workers),
            absl::StrCat("--servers=", servers),
            absl::StrCat("--run_dir=", dir, "/node", node),
            std::string("--"),
            std::string("--data=synthetic"),
            std::string("--synthetic_size=1024"),
            std::string("--layers=64,32,10"),
            std::string("--batch_size=16"),
            std::string("--epochs=1"),
            std::string("--max_steps=8"),
            std::string("--progress=false"),
            std::string("--check_params_every=1"),
            std::string("--timeout_s=30"),
            absl::StrCat("--dump_params=", dir, "/params")}) {
        spec.argv.push_back(arg);
      }
      spec.argv.insert(spec.argv.end(), training_flags.begin(),
                       training_flags.end());
      spec.env = {{kJobTokenEnv, token_}};
      specs.push_back(std::move(spec));
    }
    // Each node must end by itself: nothing stops one when the other fails.
    return RunGroup(specs, /*stop_on_failure=*/false);
  }

  std::unique_ptr<EmulatedNetwork> network_;
  std::string token_;
};

TEST_F(MultiNodeLaunchTest, RingJobOnTwoHosts) {
  const std::string dir = TestTempDir() + "/ring";
  const LaunchResult result = RunTwoNodes(dir, 2, 0, {"--sync=ring"});
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
  // Node 1's workers are ranks 2 and 3, reached at node 1's address.
  EXPECT_THAT(result.processes[1].output,
              HasSubstr(absl::StrCat("node 1 of 2 (", network_->NodeAddress(1),
                                     "), workers 2..3 of 4")));
  // Worker 0's node gathers the summary.
  ExpectFinishedJob(dir + "/node0", dir + "/params", 4, 0);
}

TEST_F(MultiNodeLaunchTest, ParameterServerJobOnTwoHosts) {
  const std::string dir = TestTempDir() + "/ps";
  const LaunchResult result = RunTwoNodes(dir, 1, 1, {"--sync=ps"});
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
  EXPECT_THAT(FinishedServerRanks(GroupOutputs(result)), ElementsAre(0, 1));
  // Server 1 runs on node 1 and advertises its address there.
  EXPECT_THAT(result.processes[1].output,
              HasSubstr(absl::StrCat("serving at ", network_->NodeAddress(1))));
  ExpectFinishedJob(dir + "/node0", dir + "/params", 2, 2);
}

// Worker 3, on node 1, fails at step 2: node 0's processes hear of it
// through the coordinator and end too, naming it.
TEST_F(MultiNodeLaunchTest, FailureOnOneNodeEndsTheOther) {
  const std::string dir = TestTempDir() + "/fail";
  const LaunchResult result = RunTwoNodes(
      dir, 2, 0, {"--sync=ring", "--fault_rank=3", "--fault_step=2"});
  ASSERT_NE(result.exit_code, 124) << GroupOutputs(result);
  EXPECT_EQ(result.processes[1].exit_code, 3) << GroupOutputs(result);
  EXPECT_NE(result.processes[0].exit_code, 0) << GroupOutputs(result);
  EXPECT_THAT(result.processes[0].output, HasSubstr("worker 3"));
}

}  // namespace
}  // namespace gradsync
