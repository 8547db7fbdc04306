// The launcher with ordinary shell processes: exit codes, first failure
// stopping the rest, deadlines, logs and output prefixes.
#include "core/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

ProcessSpec Shell(const std::string& name, const std::string& script) {
  ProcessSpec spec;
  spec.name = name;
  spec.argv = {"/bin/sh", "-c", script};
  return spec;
}

LaunchOptions Quiet() {
  LaunchOptions options;
  options.echo = false;
  options.grace = absl::Seconds(2);
  return options;
}

TEST(LauncherTest, AllSucceedGivesZeroAndKeepsOutputAndEnvironment) {
  std::vector<ProcessSpec> specs = {Shell("worker 0", "echo hello $RANK"),
                                    Shell("worker 1", "echo hello $RANK")};
  specs[0].env = {{"RANK", "0"}};
  specs[1].env = {{"RANK", "1"}};
  specs[1].log_path = std::string(getenv("TEST_TMPDIR")) + "/worker1.log";
  auto result = RunProcessGroup(specs, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_TRUE(result->failure.empty());
  ASSERT_EQ(result->processes.size(), 2u);
  EXPECT_EQ(result->processes[0].output, "hello 0\n");
  EXPECT_EQ(result->processes[1].output, "hello 1\n");
  std::ifstream log(specs[1].log_path);
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_EQ(text.str(), "hello 1\n");
}

TEST(LauncherTest, FirstFailureStopsTheOthersAndSetsTheExitCode) {
  // worker 1 would run for ten minutes; worker 0's failure must end it.
  std::vector<ProcessSpec> specs = {Shell("worker 0", "exit 7"),
                                    Shell("worker 1", "exec sleep 600")};
  const absl::Time start = absl::Now();
  auto result = RunProcessGroup(specs, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 7);
  EXPECT_EQ(result->failure, "worker 0 exited with code 7");
  EXPECT_TRUE(result->processes[1].stopped_by_launcher);
  EXPECT_EQ(result->processes[1].term_signal, SIGTERM);
  // Not a speed assertion: only that the sleeper did not run to its end.
  EXPECT_LT(absl::Now() - start, absl::Seconds(300));
}

// A clean exit that leaves the others waiting in vain (a worker command
// that never joined) is made the job's failure by on_clean_exit, and stops
// the rest; a clean exit it accepts is none.
TEST(LauncherTest, CleanExitTheCallerRefusesStopsTheJob) {
  std::vector<ProcessSpec> specs = {Shell("worker 0", "exit 0"),
                                    Shell("server 0", "exec sleep 600")};
  LaunchOptions options = Quiet();
  std::vector<int> asked;
  options.on_clean_exit = [&asked](int index) {
    asked.push_back(index);
    return absl::StrCat("process ", index, " never joined");
  };
  auto result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 1);
  EXPECT_EQ(result->failure, "process 0 never joined");
  EXPECT_EQ(result->processes[0].exit_code, 0);
  EXPECT_TRUE(result->processes[1].stopped_by_launcher);
  EXPECT_EQ(asked, std::vector<int>{0});

  specs = {Shell("worker 0", "exit 0"), Shell("worker 1", "exit 0")};
  options.on_clean_exit = [](int) { return std::string(); };
  result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_TRUE(result->failure.empty());
}

// What shows only later (a worker that never joined ended first, and
// another has joined since and waits for it) fails the job through
// on_tick, and stops the rest; a tick with no answer changes nothing.
TEST(LauncherTest, FailureTheCallerSeesLaterStopsTheJob) {
  const std::string flag =
      std::string(getenv("TEST_TMPDIR")) + "/worker1.connected";
  std::vector<ProcessSpec> specs = {
      Shell("worker 0", "exit 0"),
      Shell("worker 1", "sleep 0.3; touch " + flag + "; exec sleep 600")};
  LaunchOptions options = Quiet();
  options.on_tick = [&flag] {
    return access(flag.c_str(), F_OK) == 0
               ? std::string("worker 0 never joined; worker 1 waits for it")
               : std::string();
  };
  const absl::Time start = absl::Now();
  auto result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 1);
  EXPECT_EQ(result->failure, "worker 0 never joined; worker 1 waits for it");
  EXPECT_TRUE(result->processes[1].stopped_by_launcher);
  EXPECT_LT(absl::Now() - start, absl::Seconds(300));

  specs = {Shell("worker 0", "exit 0"), Shell("worker 1", "sleep 0.2")};
  options.on_tick = [] { return std::string(); };
  result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_TRUE(result->failure.empty());
}

TEST(LauncherTest, WithoutStopOnFailureTheOthersRunToTheirEnd) {
  std::vector<ProcessSpec> specs = {
      Shell("worker 0", "exit 5"), Shell("worker 1", "sleep 1; echo survived")};
  // worker 1 outlives worker 0's failure; the default would SIGTERM it.
  LaunchOptions options = Quiet();
  options.stop_on_failure = false;
  auto result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 5);
  EXPECT_EQ(result->failure, "worker 0 exited with code 5");
  EXPECT_FALSE(result->processes[1].stopped_by_launcher);
  EXPECT_EQ(result->processes[1].output, "survived\n");
}

TEST(LauncherTest, ProcessIgnoringSigtermIsKilledAfterGrace) {
  // worker 0 fails only once server 0 ignores SIGTERM: a SIGTERM that came
  // earlier would (rightly) end it.
  const std::string ready = std::string(getenv("TEST_TMPDIR")) + "/trap-set";
  std::vector<ProcessSpec> specs = {
      Shell("server 0",
            "trap '' TERM; touch " + ready + "; while :; do sleep 1; done"),
      Shell("worker 0",
            "until [ -e " + ready + " ]; do sleep 0.01; done; exit 2")};
  auto result = RunProcessGroup(specs, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 2);
  EXPECT_EQ(result->processes[0].term_signal, SIGKILL);
}

TEST(LauncherTest, OnStartedGivesPidsInSpecOrderAndEndsAreTimed) {
  std::vector<ProcessSpec> specs = {Shell("worker 0", "echo $$"),
                                    Shell("worker 1", "echo $$")};
  std::vector<pid_t> pids;
  LaunchOptions options = Quiet();
  options.on_started = [&](const std::vector<pid_t>& started) {
    pids = started;
  };
  const absl::Time start = absl::Now();
  auto result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(pids.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(result->processes[i].output, absl::StrCat(pids[i], "\n"));
    EXPECT_GE(result->processes[i].ended, start);
    EXPECT_LE(result->processes[i].ended, absl::Now());
  }
}

TEST(LauncherTest, KilledBySignalIsReported) {
  std::vector<ProcessSpec> specs = {Shell("worker 0", "kill -9 $$")};
  auto result = RunProcessGroup(specs, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 128 + 9);
  EXPECT_THAT(result->failure, HasSubstr("worker 0 was killed by signal 9"));
}

TEST(LauncherTest, DeadlineStopsEveryoneAndNamesWhoWasRunning) {
  std::vector<ProcessSpec> specs = {Shell("worker 0", "exec sleep 600"),
                                    Shell("worker 1", "true")};
  LaunchOptions options = Quiet();
  options.deadline = absl::Seconds(1);
  auto result = RunProcessGroup(specs, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 124);
  EXPECT_THAT(result->failure, HasSubstr("worker 0 still running"));
  EXPECT_THAT(result->failure, ::testing::Not(HasSubstr("worker 1")));
}

// Issue 30: a launch of very many processes ignored SIGTERM until every one
// had started. The first process asks the launcher to stop; it must start
// no more than those already forked by the time the signal lands.
TEST(LauncherTest, SigtermWhileStartingStopsStartingMore) {
  constexpr int kProcesses = 500;
  std::vector<ProcessSpec> specs = {
      Shell("worker 0", "kill -TERM $PPID; exec sleep 60")};
  for (int i = 1; i < kProcesses; ++i) {
    specs.push_back(Shell(absl::StrCat("worker ", i), "exit 0"));
  }
  auto result = RunProcessGroup(specs, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 128 + SIGTERM);
  EXPECT_THAT(result->failure, HasSubstr("signal"));
  EXPECT_LT(result->processes.size(), static_cast<size_t>(kProcesses))
      << "every process was started although the launcher was told to stop";
  EXPECT_TRUE(result->processes[0].stopped_by_launcher);
}

TEST(LauncherTest, MissingExecutableIsAnErrorBeforeAnythingStarts) {
  ProcessSpec spec;
  spec.name = "worker 0";
  spec.argv = {"/nonexistent/gradsync"};
  auto result = RunProcessGroup({spec}, Quiet());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("/nonexistent/gradsync"));
}

// A socket on 127.0.0.1:port; with `reuse`, SO_REUSEADDR as listeners set it.
int BindLoopback(int port, bool reuse) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(LauncherTest, PickFreePortReservesThePortForItsListener) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
  // Another picker (an exclusive bind) is refused while this process lives...
  EXPECT_EQ(BindLoopback(*port, /*reuse=*/false), -1);
  // ...and so a second pick gives another port,
  auto second = PickFreePort();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(*second, *port);
  // while the listener it was picked for binds, listens and is reached.
  const int listener = BindLoopback(*port, /*reuse=*/true);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  ASSERT_EQ(listen(listener, 1), 0) << std::strerror(errno);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(*port));
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0)
      << std::strerror(errno);
  close(client);
  close(listener);
}

}  // namespace
}  // namespace gradsync
