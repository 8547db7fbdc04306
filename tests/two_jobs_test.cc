// Two jobs started on one port never mix (issue 30, defect 1). Job A's
// worker 0 hosts its coordinator on port P; a second job started on P —
// its worker 0 from a launcher's variables, without and with a job token, or
// a whole `gradsync launch --master_port=P` — fails at once saying the port
// is in use, and job A then finishes untouched: its summary names its own two
// ranks and both hold the same final parameters. A parameter server on a
// taken port is refused the same way.
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cluster/listen_port.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/server/server.h"
#include "tests/gradsync_binary.h"
#include "tests/job_checks.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using Env = std::vector<std::pair<std::string, std::string>>;

// How long the second job may take to fail: it fails before any training.
constexpr absl::Duration kSecondJobFails = absl::Seconds(15);

class TwoJobsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto port = PickFreePort();
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    dir_ = absl::StrCat(TestTempDir(), "/two_jobs_",
                        GetParam() ? "token" : "no_token");
  }

  // torchrun's variables, no job id: the ids come from worker 0.
  Env Variables(int rank, const std::string& token) const {
    Env env = {{"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", absl::StrCat(port_)},
               {"WORLD_SIZE", "2"},
               {"RANK", absl::StrCat(rank)}};
    if (!token.empty()) env.push_back({"GRADSYNC_JOB_TOKEN", token});
    return env;
  }

  std::vector<std::string> Flags(const std::string& job, double lr) const {
    return {"--sync=ring",
            "--data=synthetic",
            "--synthetic_size=1024",
            "--layers=64,32,10",
            "--batch_size=16",
            "--epochs=1",
            "--max_steps=10",
            "--progress=false",
            "--eval=false",
            "--timeout_s=60",
            absl::StrCat("--lr=", lr),
            "--metrics_dir=" + dir_ + "/" + job,
            "--dump_params=" + dir_ + "/" + job + "/params"};
  }

  ProcessSpec Worker(const std::string& job, int rank, double lr,
                     const std::string& token) const {
    ProcessSpec spec;
    spec.name = absl::StrCat(job, " worker ", rank);
    spec.argv = {GradsyncBinary(), "train"};
    for (const std::string& flag : Flags(job, lr)) spec.argv.push_back(flag);
    spec.env = Variables(rank, token);
    return spec;
  }

  void ExpectRefusedForThePort(const ProcessResult& second,
                               absl::Duration took) const {
    EXPECT_NE(second.exit_code, 0) << second.output;
    EXPECT_THAT(second.output,
                HasSubstr(absl::StrCat("port ", port_,
                                       " is in use (by another job?)")));
    EXPECT_LE(took, kSecondJobFails) << second.output;
  }

  int port_ = 0;
  std::string dir_;
};

TEST_P(TwoJobsTest, SecondJobOnThePortFailsAtOnceAndTheFirstFinishes) {
  const bool tokens = GetParam();
  const std::string token_a = tokens ? "job-a-token-0123456789abcdef" : "";
  const std::string token_b = tokens ? "job-b-token-0123456789abcdef" : "";

  // Job A's worker 0 waits for its worker 1, which starts only once the
  // second job has been refused: the order is fixed, not raced.
  LaunchResult first_worker;
  std::thread job_a([&] {
    first_worker = RunGroup({Worker("a", 0, 0.05, token_a)},
                            /*stop_on_failure=*/true, absl::Seconds(120));
  });
  // Joined on every way out (a failed ASSERT too): worker 0 ends by itself
  // within its --timeout_s when its worker 1 never comes.
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{job_a};
  const std::string address = absl::StrCat("127.0.0.1:", port_);
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (CheckPortFree(address).ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(CheckPortFree(address).ok())
      << "job A's coordinator did not listen on " << address << " in 60 s";

  // A second job's worker 0, as a launcher's variables start it.
  absl::Time start = absl::Now();
  ProcessSpec second = Worker("b", 0, 0.2, token_b);
  std::vector<std::string> args(second.argv.begin() + 1, second.argv.end());
  ProcessResult refused = RunGradsync(args, second.env, absl::Seconds(60));
  ExpectRefusedForThePort(refused, absl::Now() - start);

  // A second job started whole by `gradsync launch` on the same port (it
  // makes a token of its own): refused before it starts any process.
  start = absl::Now();
  std::vector<std::string> launch = {"launch", "--workers=2",
                                     absl::StrCat("--master_port=", port_),
                                     "--run_dir=" + dir_ + "/launched", "--"};
  for (const std::string& flag : Flags("launched", 0.2)) launch.push_back(flag);
  refused = RunGradsync(launch, {}, absl::Seconds(60));
  ExpectRefusedForThePort(refused, absl::Now() - start);
  EXPECT_THAT(refused.output, testing::Not(HasSubstr("worker 1")))
      << "launch started workers on a taken port";

  // Job A is untouched: its worker 1 joins and the job finishes.
  const ProcessSpec a1 = Worker("a", 1, 0.05, token_a);
  const ProcessResult second_worker = RunGradsync(
      {a1.argv.begin() + 1, a1.argv.end()}, a1.env, absl::Seconds(120));
  job_a.join();
  EXPECT_EQ(second_worker.exit_code, 0) << second_worker.output;
  ASSERT_EQ(first_worker.processes.size(), 1u);
  EXPECT_EQ(first_worker.processes[0].exit_code, 0)
      << first_worker.processes[0].output;
  ExpectFinishedJob(dir_ + "/a", dir_ + "/a/params", 2, 0);
}

// The parameter servers' listeners had the same flaw: a second server on a
// taken port bound it too and shared the first one's pushes.
TEST(TwoServersTest, SecondParameterServerOnATakenPortIsRefused) {
  ParameterServerOptions options;
  options.job_id = "job-a";
  auto first = ParameterServer::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  options.job_id = "job-b";
  options.bind_address = absl::StrCat("127.0.0.1:", port);
  auto second = ParameterServer::Start(options);
  ASSERT_FALSE(second.ok()) << "two parameter servers listen on port " << port;
  EXPECT_THAT(
      std::string(second.status().message()),
      HasSubstr(absl::StrCat("port ", port, " is in use (by another job?)")));
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutTokens, TwoJobsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tokens" : "NoTokens";
                         });

}  // namespace
}  // namespace gradsync
