// Runs a group of processes as one job, the way torchrun does for one machine:
// every process's output goes to its own log file and to the console with a
// "[worker 3] " prefix; the first process to fail stops the others (SIGTERM,
// then SIGKILL after a grace period) and its exit code becomes the job's;
// SIGINT/SIGTERM to the launcher stop everyone; an optional deadline bounds
// the whole job. Used by `gradsync launch` and by the multi-process tests.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradsync {

struct ProcessSpec {
  std::string name;  // console prefix and error messages: "worker 0"
  std::vector<std::string> argv;  // argv[0] is the executable's path
  // Added to (or replacing in) the launcher's environment.
  std::vector<std::pair<std::string, std::string>> env;
  std::string log_path;  // empty: no log file
};

struct ProcessResult {
  std::string name;
  int exit_code = 0;    // 128 + signal when killed by a signal
  int term_signal = 0;  // the signal that ended it, or 0
  // When the launcher saw it end (within its 50 ms tick): fault tests
  // measure how long survivors take to notice a lost peer.
  absl::Time ended = absl::InfinitePast();
  bool stopped_by_launcher = false;  // ended because another process failed
  std::string output;  // the last 256 KiB of its stdout and stderr
};

struct LaunchOptions {
  // Echo every line to our stdout with the process's name as prefix.
  bool echo = true;
  // The whole job is stopped after this; its exit code is then 124.
  absl::Duration deadline = absl::InfiniteDuration();
  // Stop everyone at the first failure (torchrun's behaviour). Fault tests turn
  // it off to watch how the survivors notice a lost peer on their own.
  bool stop_on_failure = true;
  // Between SIGTERM and SIGKILL when stopping the others.
  absl::Duration grace = absl::Seconds(5);
  // Called once every process has started, with their ids in the order of
  // the specs (on the launcher's thread; keep it short): for tests that
  // kill one of them and for tools that sample their memory.
  std::function<void(const std::vector<pid_t>&)> on_started;
  // Called when process `index` (in the order of the specs) exits with
  // code 0 while no failure has been seen: a non-empty answer makes that
  // exit the job's failure (exit code 1) with the answer as its reason. For
  // a process whose clean exit leaves the others waiting for it in vain
  // (a worker command that never joined the job its servers wait for).
  std::function<std::string(int index)> on_clean_exit;
  // Called at every tick (about 50 ms) while processes run and no failure
  // has been seen: a non-empty answer is the job's failure (exit code 1),
  // as for on_clean_exit. For what shows only later: a process that exited
  // cleanly before anyone waited for it, when another then starts waiting
  // (a worker command that never joined, once another worker has).
  std::function<std::string()> on_tick;
};

struct LaunchResult {
  int exit_code = 0;    // 0, the first failure's code, 124 or 130
  std::string failure;  // "worker 2 exited with code 3" (empty if none)
  std::vector<ProcessResult> processes;  // in the order of the specs
};

// Starts every spec and returns when all have ended. An error status means the
// job could not be started (an executable missing, fork failing), not that a
// process failed: that is in LaunchResult.
absl::StatusOr<LaunchResult> RunProcessGroup(
    const std::vector<ProcessSpec>& specs, const LaunchOptions& options);

// A free TCP port for another process to listen on, below the kernel's
// ephemeral range when there is room (outgoing connections cannot take it
// before its user binds it); the kernel's choice otherwise. It stays
// reserved until this process exits: no other PickFreePort, here or in
// another process, gives it, while a listener that sets SO_REUSEADDR (gRPC,
// torch's store, gradsync's own) can still take it.
absl::StatusOr<int> PickFreePort();

}  // namespace gradsync
