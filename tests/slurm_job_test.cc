// Real Slurm: tests/local_slurm.sh starts munged, slurmctld and slurmd of
// Debian's munge and slurm-wlm in a fresh folder (generated key and config,
// free ports) and stops them afterwards, also on failure; inside it,
// `sbatch tools/cluster/gradsync.sbatch` runs a mixed parameter-server job
// (workers and servers as the tasks of one Slurm job) and a plain `srun`
// runs a ring job. Each job has the right N, K and ranks, and every worker
// ends with the same parameters. Needs root; skips only where the packages
// are missing (tools/install_deps.sh installs them).
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

// local_slurm.sh's code for "the packages are not installed".
constexpr int kNotInstalled = 77;

std::string SourceFile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/gradsync/", path);
}

std::vector<std::string> TrainingFlags(const std::string& dir,
                                       const std::string& sync) {
  return {"--sync=" + sync,         "--data=synthetic",
          "--synthetic_size=1024",  "--layers=64,32,10",
          "--batch_size=16",        "--epochs=1",
          "--max_steps=8",          "--progress=false",
          "--check_params_every=1", "--timeout_s=30",
          "--metrics_dir=" + dir,   "--dump_params=" + dir + "/params"};
}

class SlurmJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to run slurmd";
  }

  // Runs `command` inside a fresh one-node Slurm cluster.
  ProcessResult InSlurm(
      const std::vector<std::string>& command,
      const std::vector<std::pair<std::string, std::string>>& env) {
    ProcessSpec spec;
    spec.name = "local_slurm";
    spec.argv = {"/bin/bash", SourceFile("tests/local_slurm.sh"), "8"};
    spec.argv.insert(spec.argv.end(), command.begin(), command.end());
    auto token = NewJobToken();
    EXPECT_TRUE(token.ok()) << token.status();
    spec.env = env;
    spec.env.push_back({"GRADSYNC", GradsyncBinary()});
    spec.env.push_back({"GRADSYNC_JOB_TOKEN", token.ok() ? *token : ""});
    LaunchOptions options;
    options.echo = false;
    options.deadline = absl::Seconds(120);
    auto result = RunProcessGroup({spec}, options);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->processes[0] : ProcessResult{};
  }
};

TEST_F(SlurmJobTest, SbatchRunsParameterServerJobOfWorkersAndServers) {
  const std::string dir = TestTempDir() + "/ps";
  std::vector<std::string> command = {
      "sbatch",
      "--wait",
      "--ntasks=4",
      "--time=5",
      "--output=" + dir + ".out",
      SourceFile("tools/cluster/gradsync.sbatch")};
  for (const std::string& flag : TrainingFlags(dir, "ps")) {
    command.push_back(flag);
  }
  const ProcessResult run = InSlurm(command, {{"GRADSYNC_NUM_SERVERS", "2"}});
  if (run.exit_code == kNotInstalled) GTEST_SKIP() << run.output;
  const std::string job_output = ReadWholeFile(dir + ".out");
  ASSERT_EQ(run.exit_code, 0) << run.output << "\njob output:\n" << job_output;
  EXPECT_THAT(FinishedServerRanks(job_output), ElementsAre(0, 1)) << job_output;
  ExpectFinishedJob(dir, dir + "/params", 2, 2);
}

TEST_F(SlurmJobTest, SrunRunsRingJob) {
  const std::string dir = TestTempDir() + "/ring";
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  std::vector<std::string> command = {
      "srun", "--ntasks=3", "--kill-on-bad-exit=1", GradsyncBinary(), "run"};
  for (const std::string& flag : TrainingFlags(dir, "ring")) {
    command.push_back(flag);
  }
  const ProcessResult run = InSlurm(
      command,
      {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", absl::StrCat(*port)}});
  if (run.exit_code == kNotInstalled) GTEST_SKIP() << run.output;
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectFinishedJob(dir, dir + "/params", 3, 0);
}

}  // namespace
}  // namespace gradsync
