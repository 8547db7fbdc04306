// Jobs started the way a cluster's launcher starts them: every process a
// `gradsync train` or `gradsync server` of its own, told who it is only by
// environment variables (core/cluster/cluster_env.h). A job given the
// variables README documents runs; a job whose processes disagree on its
// shape, whose coordinator gives up, or whose worker fails at start-up ends
// on every process within 15 s, each naming the cause; and servers whose
// job ended without them stop.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"
#include "tests/job_checks.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;

using ::testing::HasSubstr;
using Env = std::vector<std::pair<std::string, std::string>>;

// The bound of issue 15: a job that cannot run ends on every process within
// this long of its cause.
constexpr absl::Duration kMaxTimeToExit = absl::Seconds(15);

class JobStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto port = PickFreePort();
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    dir_ = absl::StrCat(
        TestTempDir(), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // torchrun's variables of one worker, and what every process shares.
  Env Common() const {
    return {{"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", absl::StrCat(port_)},
            {"GRADSYNC_JOB_ID", "job-start-test"}};
  }

  std::vector<std::string> TrainingFlags() const {
    return {"--sync=ps",
            "--data=synthetic",
            "--synthetic_size=1024",
            "--layers=64,32,10",
            "--batch_size=16",
            "--epochs=1",
            "--max_steps=8",
            "--progress=false",
            "--check_params_every=1",
            "--timeout_s=30",
            "--metrics_dir=" + dir_,
            "--dump_params=" + dir_ + "/params"};
  }

  ProcessSpec Worker(int rank, int world, Env extra,
                     std::vector<std::string> flags = {}) const {
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", rank);
    spec.argv = {GradsyncBinary(), "train"};
    for (const std::string& flag : TrainingFlags()) spec.argv.push_back(flag);
    for (const std::string& flag : flags) spec.argv.push_back(flag);
    spec.env = Common();
    spec.env.push_back({"RANK", absl::StrCat(rank)});
    spec.env.push_back({"WORLD_SIZE", absl::StrCat(world)});
    spec.env.insert(spec.env.end(), extra.begin(), extra.end());
    return spec;
  }

  ProcessSpec Server(int rank, Env extra,
                     std::vector<std::string> flags = {}) const {
    ProcessSpec spec;
    spec.name = absl::StrCat("server ", rank);
    spec.argv = {GradsyncBinary(), "server", "--timeout_s=60"};
    for (const std::string& flag : flags) spec.argv.push_back(flag);
    spec.env = Common();
    spec.env.push_back({"GRADSYNC_ROLE", "server"});
    spec.env.push_back({"GRADSYNC_SERVER_RANK", absl::StrCat(rank)});
    spec.env.insert(spec.env.end(), extra.begin(), extra.end());
    return spec;
  }

  // Every process failed by itself, within kMaxTimeToExit of `cause` (the
  // first process to end when none is given), and its output names `why`.
  static void ExpectAllEndedNaming(const LaunchResult& result,
                                   const std::string& why,
                                   absl::Time cause = absl::InfiniteFuture()) {
    ASSERT_NE(result.exit_code, 124) << "the job hung:\n"
                                     << GroupOutputs(result);
    for (const ProcessResult& p : result.processes) {
      cause = std::min(cause, p.ended);
    }
    for (const ProcessResult& p : result.processes) {
      EXPECT_NE(p.exit_code, 0) << p.name << "\n" << p.output;
      EXPECT_FALSE(p.stopped_by_launcher) << p.name;
      EXPECT_LE(p.ended - cause, kMaxTimeToExit)
          << p.name << " ended " << absl::FormatDuration(p.ended - cause)
          << " after the cause\n"
          << p.output;
      EXPECT_THAT(p.output, HasSubstr(why)) << p.name;
    }
  }

  int port_ = 0;
  std::string dir_;
};

// Issue 15's job, with the variables README documents now: torchrun's for
// the workers, and for the servers their role, rank and count beside
// WORLD_SIZE (which counts the workers) — no RANK.
TEST_F(JobStartTest, ServersGivenTheDocumentedVariablesJoinTheJob) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "2"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "2"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result =
      RunGroup({Worker(0, 2, servers), Worker(1, 2, servers),
                Server(0, server_env), Server(1, server_env)},
               /*stop_on_failure=*/true);
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
  EXPECT_THAT(FinishedServerRanks(GroupOutputs(result)), ElementsAre(0, 1));
  ExpectFinishedJob(dir_, dir_ + "/params", 2, 2);
}

// BytePS / ps-lite users' variables: DMLC_ROLE, DMLC_NUM_WORKER,
// DMLC_NUM_SERVER, DMLC_PS_ROOT_URI/PORT (worker 0's host: gradsync has no
// scheduler), DMLC_WORKER_ID, and GRADSYNC_SERVER_RANK for the server.
TEST_F(JobStartTest, DmlcVariablesRunAParameterServerJob) {
  const Env dmlc = {{"DMLC_NUM_WORKER", "2"},
                    {"DMLC_NUM_SERVER", "1"},
                    {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                    {"DMLC_PS_ROOT_PORT", absl::StrCat(port_)},
                    {"GRADSYNC_JOB_ID", "job-start-test"}};
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < 2; ++rank) {
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", rank);
    spec.argv = {GradsyncBinary(), "run"};
    for (const std::string& flag : TrainingFlags()) spec.argv.push_back(flag);
    spec.env = dmlc;
    spec.env.push_back({"DMLC_ROLE", "worker"});
    spec.env.push_back({"DMLC_WORKER_ID", absl::StrCat(rank)});
    specs.push_back(std::move(spec));
  }
  ProcessSpec server;
  server.name = "server 0";
  server.argv = {GradsyncBinary(), "run", "--timeout_s=60"};
  server.env = dmlc;
  server.env.push_back({"DMLC_ROLE", "server"});
  server.env.push_back({"GRADSYNC_SERVER_RANK", "0"});
  specs.push_back(std::move(server));
  const LaunchResult result = RunGroup(specs, /*stop_on_failure=*/true);
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
  EXPECT_THAT(FinishedServerRanks(GroupOutputs(result)), ElementsAre(0));
  ExpectFinishedJob(dir_, dir_ + "/params", 2, 1);
}

// The same servers given only what README used to document (no WORLD_SIZE):
// they believe in one worker. Worker 0's coordinator refuses them at Join,
// and every process ends with one error naming both sides.
TEST_F(JobStartTest, ServerOfAnotherShapeEndsTheJobNamingBothSides) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "2"}};
  const LaunchResult result =
      RunGroup({Worker(0, 2, servers), Worker(1, 2, servers),
                Server(0, servers), Server(1, servers)},
               /*stop_on_failure=*/false);
  ExpectAllEndedNaming(
      result,
      "it sees a job of 1 workers and 2 servers (1 worker (no variable: one "
      "worker), 2 servers (GRADSYNC_NUM_SERVERS)), but worker 0, which hosts "
      "the coordinator, sees 2 workers and 2 servers (2 workers "
      "(WORLD_SIZE), 2 servers (GRADSYNC_NUM_SERVERS))");
}

// Workers not told about the servers: the coordinator knows no server, so
// the server's rank is unknown to it, and the job ends. (Worker 1 is not
// started: worker 0 waits for it in Join, so the server surely finds the
// coordinator still there — a server arriving after the job ended would
// wait out its --timeout_s, the one case nothing can shorten.)
TEST_F(JobStartTest, WorkersUnawareOfTheServersEndTheJob) {
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result =
      RunGroup({Worker(0, 2, {}), Server(0, server_env)}, false);
  ExpectAllEndedNaming(result,
                       "unknown server 0: the job has 2 workers and 0 servers");
}

// Worker 1 never starts: worker 0 gives up after its --timeout_s, naming
// it, and the server, whose own deadline is far away, follows at once.
TEST_F(JobStartTest, CoordinatorWhoseWorkersNeverArriveEndsTheJob) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "1"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result = RunGroup(
      {Worker(0, 2, servers, {"--timeout_s=3"}), Server(0, server_env)}, false);
  ExpectAllEndedNaming(result, "waiting for worker 1");
  EXPECT_THAT(result.processes[1].output, HasSubstr("the job lost worker 0"));
}

// Worker 1 fails after joining, before the first step (its metrics folder
// cannot be made: a per-process flag, so its Join is accepted): everyone
// ends naming it, long before any deadline.
TEST_F(JobStartTest, WorkerFailingAtStartUpEndsTheJob) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "1"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "3"}};
  const LaunchResult result =
      RunGroup({Worker(0, 3, servers),
                Worker(1, 3, servers, {"--metrics_dir=/dev/null/metrics"}),
                Worker(2, 3, servers), Server(0, server_env)},
               false);
  ExpectAllEndedNaming(result, "worker 1");
  for (const ProcessResult& p : result.processes) {
    if (p.name == "worker 1") continue;
    EXPECT_THAT(p.output, HasSubstr("the job lost worker 1")) << p.name;
    EXPECT_THAT(p.output, HasSubstr("it failed: ")) << p.name;
  }
}

// Issue 42's job started by hand: the workers differ in one training flag.
// Worker 0's coordinator refuses worker 1 at Join, and both end before any
// step, naming the flag with both values; no parameters are written (they
// used to end with exit 0 and different parameters).
TEST_F(JobStartTest, WorkersWithDifferentTrainingFlagsFailAtStartUp) {
  const LaunchResult result =
      RunGroup({Worker(0, 2, {}, {"--sync=ring", "--lr=0.05"}),
                Worker(1, 2, {}, {"--sync=ring", "--lr=0.5"})},
               false);
  ExpectAllEndedNaming(result,
                       "its --lr=0.5 differs from worker 0's --lr=0.05; give "
                       "every worker the same training flags");
  EXPECT_THAT(result.processes[0].output, HasSubstr("the job lost worker 1"));
  EXPECT_THAT(result.processes[1].output,
              HasSubstr("worker 1 was refused at Join"));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(std::ifstream(absl::StrCat(dir_, "/params.worker", rank)))
        << "worker " << rank << " trained";
  }
}

// A parameter server started with another --ps_* flag than the workers
// (here the size of its result messages) is refused at Join like a worker
// with other training flags: every process ends at once naming the server,
// worker 0 and the flag with both values.
TEST_F(JobStartTest, ServerWithOtherStrategyFlagsFailsAtStartUp) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "1"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result =
      RunGroup({Worker(0, 2, servers), Worker(1, 2, servers),
                Server(0, server_env, {"--ps_message_kb=64"})},
               /*stop_on_failure=*/false);
  ExpectAllEndedNaming(result,
                       "its --ps_message_kb=64 differs from worker 0's "
                       "--ps_message_kb=0; give every parameter server the "
                       "--ps_* flags the workers have");
  EXPECT_THAT(result.processes[2].output,
              HasSubstr("server 0 was refused at Join"));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(std::ifstream(absl::StrCat(dir_, "/params.worker", rank)))
        << "worker " << rank << " trained";
  }
}

// Issue 42's derived settings: the same flags everywhere, but the server
// was not given the job's link (GRADSYNC_LINK) that the workers were, so it
// would size its streams' windows apart from them. Worker 0's coordinator
// compares what each process derived before it joined: the job fails at
// start-up, every process naming the server, worker 0 and the first derived
// setting with both values, and what to give every process.
TEST_F(JobStartTest, ServerGivenAnotherLinkFailsAtStartUp) {
  const Env workers = {{"GRADSYNC_NUM_SERVERS", "1"},
                       {"GRADSYNC_LINK", "100mbit,10ms"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result = RunGroup(
      {Worker(0, 2, workers), Worker(1, 2, workers), Server(0, server_env)},
      /*stop_on_failure=*/false);
  ExpectAllEndedNaming(result, "its derived ps_");
  EXPECT_THAT(result.processes[2].output,
              HasSubstr("server 0 was refused at Join: its derived ps_"));
  for (const ProcessResult& p : result.processes) {
    EXPECT_THAT(p.output, HasSubstr("give every process the same link"))
        << p.name;
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(std::ifstream(absl::StrCat(dir_, "/params.worker", rank)))
        << "worker " << rank << " trained";
  }
}

// The same between workers (servers inside them, --ps_colocate): worker 1
// without the link is refused at Join naming worker 0's derived value.
TEST_F(JobStartTest, WorkerGivenAnotherLinkFailsAtStartUp) {
  const LaunchResult result = RunGroup(
      {Worker(0, 2, {{"GRADSYNC_LINK", "100mbit,10ms"}}, {"--ps_colocate"}),
       Worker(1, 2, {}, {"--ps_colocate"})},
      /*stop_on_failure=*/false);
  ExpectAllEndedNaming(result, "differs from worker 0's derived ps_");
  EXPECT_THAT(result.processes[1].output,
              HasSubstr("worker 1 was refused at Join: its derived ps_"));
}

// A server's timeline is written when the job ends: a --trace it cannot
// write ends the job at start-up, every process naming the server and the
// path, before any step.
TEST_F(JobStartTest, ServerWithAnUnwritableTraceFailsAtStartUp) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
  const std::string plain = dir_ + "/plain";
  std::ofstream(plain) << "x";
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "1"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result = RunGroup(
      {Worker(0, 2, servers), Worker(1, 2, servers),
       Server(0, server_env, {"--trace=" + plain + "/t.json"})},
      /*stop_on_failure=*/false);
  ExpectAllEndedNaming(result, "server 0: --trace=" + plain +
                                   "/t.server0.json cannot be written: " +
                                   plain + " is a file, not a folder");
}

// Per-process flags (paths, the wait deadline) may differ: the job runs.
TEST_F(JobStartTest, WorkersWithDifferentPerProcessFlagsRun) {
  const LaunchResult result =
      RunGroup({Worker(0, 2, {}, {"--sync=ring", "--timeout_s=40"}),
                Worker(1, 2, {},
                       {"--sync=ring", "--metrics_dir=" + dir_ + "/worker1",
                        "--data_dir=" + dir_ + "/elsewhere"})},
               /*stop_on_failure=*/true);
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
}

// Worker 0 is killed while the job assembles (worker 1 never comes): the
// server, blocked in its Join, ends naming the lost coordinator.
TEST_F(JobStartTest, CoordinatorKilledBeforeTheJobStartsEndsTheServer) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "1"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  std::vector<ProcessSpec> specs = {Worker(0, 2, servers),
                                    Server(0, server_env)};
  LaunchOptions options;
  options.echo = false;
  options.stop_on_failure = false;
  options.deadline = absl::Seconds(120);
  // Kill worker 0 once the server has had time to join and wait: the
  // server's output must name the loss whenever it happens.
  options.on_started = [](const std::vector<pid_t>& pids) {
    absl::SleepFor(absl::Seconds(2));
    kill(pids[0], SIGKILL);
  };
  auto result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const ProcessResult& server = result->processes[1];
  EXPECT_EQ(server.exit_code, 1) << server.output;
  EXPECT_LE(server.ended - result->processes[0].ended, kMaxTimeToExit);
  EXPECT_THAT(server.output, HasSubstr("coordinator")) << server.output;
}

// A job that never used its server (--sync=ring): once worker 0 has ended
// the job, the server stops too, saying why, instead of waiting out
// --ps_idle_timeout_s.
TEST_F(JobStartTest, ServerOfAJobThatEndedWithoutItStops) {
  const Env servers = {{"GRADSYNC_NUM_SERVERS", "1"}};
  const Env server_env = {{"GRADSYNC_NUM_SERVERS", "1"}, {"WORLD_SIZE", "2"}};
  const LaunchResult result =
      RunGroup({Worker(0, 2, servers, {"--sync=ring"}),
                Worker(1, 2, servers, {"--sync=ring"}), Server(0, server_env)},
               false);
  ASSERT_EQ(result.processes[0].exit_code, 0) << GroupOutputs(result);
  ASSERT_EQ(result.processes[1].exit_code, 0) << GroupOutputs(result);
  const ProcessResult& server = result.processes[2];
  EXPECT_EQ(server.exit_code, 1) << server.output;
  EXPECT_LE(server.ended - result.processes[0].ended, kMaxTimeToExit);
  EXPECT_THAT(server.output, HasSubstr("worker 0 ended the job"));
}

}  // namespace
}  // namespace gradsync
