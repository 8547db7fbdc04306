// Real Open MPI: tools/cluster/mpirun_job.sh starts a mixed parameter-server
// job (workers and servers as the tasks of one mpirun) and a ring job with
// Debian's mpirun; each job has the right N, K and ranks, and every worker
// ends with the same parameters. Skips only where mpirun is not installed
// (tools/install_deps.sh installs openmpi-bin).
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster/job_token.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"
#include "tests/job_checks.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;

constexpr char kMpirun[] = "/usr/bin/mpirun";

class MpirunJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kMpirun, X_OK) != 0) {
      GTEST_SKIP() << kMpirun
                   << " not found: install Open MPI (apt-get install "
                      "openmpi-bin, as tools/install_deps.sh does)";
    }
  }

  ProcessResult RunJob(const std::string& dir, int workers, int servers,
                       const std::string& sync) {
    auto port = PickFreePort();
    EXPECT_TRUE(port.ok()) << port.status();
    auto token = NewJobToken();
    EXPECT_TRUE(token.ok()) << token.status();
    ProcessSpec spec;
    spec.name = "mpirun";
    spec.argv = {"/bin/bash",
                 std::string(std::getenv("TEST_SRCDIR")) +
                     "/gradsync/tools/cluster/mpirun_job.sh",
                 "--sync=" + sync,
                 "--data=synthetic",
                 "--synthetic_size=1024",
                 "--layers=64,32,10",
                 "--batch_size=16",
                 "--epochs=1",
                 "--max_steps=8",
                 "--progress=false",
                 "--check_params_every=1",
                 "--timeout_s=30",
                 "--metrics_dir=" + dir,
                 "--dump_params=" + dir + "/params"};
    spec.env = {
        {"WORKERS", absl::StrCat(workers)},
        {"SERVERS", absl::StrCat(servers)},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", absl::StrCat(port.ok() ? *port : 0)},
        {"GRADSYNC", GradsyncBinary()},
        {"GRADSYNC_JOB_TOKEN", token.ok() ? *token : ""},
        // Tests run as root in CI; 2 cores hold more tasks than slots.
        {"MPIRUN_ARGS", "--allow-run-as-root --oversubscribe"},
        // Open MPI's session folder goes under the test's own.
        {"TMPDIR", TestTempDir()},
    };
    LaunchOptions options;
    options.echo = false;
    options.deadline = absl::Seconds(120);
    auto result = RunProcessGroup({spec}, options);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->processes[0] : ProcessResult{};
  }
};

TEST_F(MpirunJobTest, ParameterServerJobOfWorkersAndServers) {
  const std::string dir = TestTempDir() + "/ps";
  const ProcessResult run = RunJob(dir, 2, 2, "ps");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(FinishedServerRanks(run.output), ElementsAre(0, 1)) << run.output;
  ExpectFinishedJob(dir, dir + "/params", 2, 2);
}

TEST_F(MpirunJobTest, RingJob) {
  const std::string dir = TestTempDir() + "/ring";
  const ProcessResult run = RunJob(dir, 3, 0, "ring");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectFinishedJob(dir, dir + "/params", 3, 0);
}

}  // namespace
}  // namespace gradsync
