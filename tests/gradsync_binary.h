// Runs the real gradsync binary (a data dependency of the test) and captures
// its exit code and output, for tests of the command line and of whole jobs.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "core/launch/launcher.h"
#include "gtest/gtest.h"

namespace gradsync {

inline std::string GradsyncBinary() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/gradsync/tools/gradsync";
}

inline std::string TestTempDir() { return std::getenv("TEST_TMPDIR"); }

// Runs `gradsync <args...>` with `env` added, bounded by `deadline`.
inline ProcessResult RunGradsync(
    const std::vector<std::string>& args,
    const std::vector<std::pair<std::string, std::string>>& env = {},
    absl::Duration deadline = absl::Seconds(240)) {
  ProcessSpec spec;
  spec.name = "gradsync";
  spec.argv = {GradsyncBinary()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = env;
  LaunchOptions options;
  options.echo = false;
  options.deadline = deadline;
  auto result = RunProcessGroup({spec}, options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return ProcessResult{};
  return result->processes[0];
}

// Runs `specs` as one process group, bounded by `deadline`; with
// `stop_on_failure` false every process runs to its own end. An empty result
// (and a test failure) if the group could not be started.
inline LaunchResult RunGroup(const std::vector<ProcessSpec>& specs,
                             bool stop_on_failure,
                             absl::Duration deadline = absl::Seconds(120)) {
  LaunchOptions options;
  options.echo = false;
  options.stop_on_failure = stop_on_failure;
  options.deadline = deadline;
  auto result = RunProcessGroup(specs, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : LaunchResult{};
}

// Every process's output under a line naming it and its exit code, for
// failure messages.
inline std::string GroupOutputs(const LaunchResult& result) {
  std::string all;
  for (const ProcessResult& p : result.processes) {
    all += "---- " + p.name + " (exit " + std::to_string(p.exit_code) + ")\n" +
           p.output;
  }
  return all;
}

}  // namespace gradsync
