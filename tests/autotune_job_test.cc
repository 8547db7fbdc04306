// --autotune through `gradsync launch`: real processes agree on one bucket cap
// (the ring and the parameter server regroup between steps), and a tuned job
// ends with the same parameters, byte for byte, as an untuned job started with
// the chosen --bucket_mb. Two workers, so the PS's sums are exact whatever
// order the pushes arrive in.
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// An MLP of 0.66 MB: the caps tried (0.25 .. 4 MiB) group it in 1 to 3
// buckets.
std::vector<std::string> Job(const std::string& dir,
                             const std::vector<std::string>& sync_flags,
                             const std::string& tuning) {
  std::vector<std::string> args = {"launch", "--workers=2", "--run_dir=" + dir};
  for (const std::string& flag : sync_flags) {
    if (flag.rfind("--servers", 0) == 0) args.push_back(flag);
  }
  args.push_back("--");
  for (const std::string& flag : sync_flags) {
    if (flag.rfind("--servers", 0) != 0) args.push_back(flag);
  }
  for (const char* flag : {
           "--data=synthetic",
           "--synthetic_size=512",
           "--layers=64,512,256,10",
           "--batch_size=16",
           "--epochs=1",
           "--max_steps=5",
           "--progress=false",
       }) {
    args.push_back(flag);
  }
  args.push_back("--dump_params=" + dir + "/params");
  args.push_back(tuning);
  return args;
}

class AutotuneJobTest
    : public testing::TestWithParam<std::vector<std::string>> {};

TEST_P(AutotuneJobTest, TunedJobTrainsAsTheUntunedJobWithItsChoice) {
  const std::string tuned = TestTempDir() + "/tuned" + GetParam()[0].substr(7);
  ProcessResult run = RunGradsync(Job(tuned, GetParam(), "--autotune"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream log(tuned + "/autotune.jsonl");
  std::string line;
  double chosen_mb = -1;
  int trials = 0;
  while (std::getline(log, line)) {
    const nlohmann::json trial = nlohmann::json::parse(line);
    EXPECT_EQ(trial["rank_step_ms"].size(), 2u) << line;
    ++trials;
    if (trial["chosen"].get<bool>()) chosen_mb = trial["bucket_mb"];
  }
  ASSERT_GE(trials, 2) << run.output;
  ASSERT_GT(chosen_mb, 0);

  const std::string plain = TestTempDir() + "/plain" + GetParam()[0].substr(7);
  ProcessResult untuned = RunGradsync(
      Job(plain, GetParam(), "--bucket_mb=" + std::to_string(chosen_mb)));
  ASSERT_EQ(untuned.exit_code, 0) << untuned.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string name = "/params.worker" + std::to_string(rank);
    const std::string a = ReadAll(tuned + name);
    ASSERT_FALSE(a.empty()) << tuned + name;
    EXPECT_TRUE(a == ReadAll(plain + name))
        << "worker " << rank << ": the trials changed the training result";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, AutotuneJobTest,
    testing::Values(std::vector<std::string>{"--sync=ring"},
                    std::vector<std::string>{"--sync=ps", "--servers=1"}),
    [](const testing::TestParamInfo<std::vector<std::string>>& info) {
      return info.param[0].substr(7);
    });

}  // namespace
}  // namespace gradsync
