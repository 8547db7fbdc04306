// The settings a worker states at Join: gradsync's training flags with their
// values, without the per-process ones, and every per-process name a real
// flag (a renamed flag would otherwise silently become compared).
#include "tools/job_settings.h"

#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "core/telemetry/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::Contains;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

TEST(JobSettingsTest, EveryPerProcessFlagIsAFlagOfGradsync) {
  for (absl::string_view name : PerProcessFlags()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << "--" << name << " is listed as per-process "
                             << "but gradsync defines no such flag";
    EXPECT_TRUE(IsGradsyncFlagFile(flag->Filename())) << name;
  }
}

TEST(JobSettingsTest, TrainingFlagsAreStatedWithTheirValues) {
  absl::CommandLineFlag* lr = absl::FindCommandLineFlag("lr");
  ASSERT_NE(lr, nullptr);
  std::string error;
  ASSERT_TRUE(lr->ParseFrom("0.5", &error)) << error;
  const WorkerSettings settings = WorkerSettingsFromFlags();
  EXPECT_THAT(settings.values, Contains(Pair("--lr", "0.5")));
  EXPECT_THAT(settings.values, Contains(Key("--sync")));
  EXPECT_THAT(settings.values, Contains(Key("--compression")));
  EXPECT_THAT(settings.values, Contains(Key("--ps_consistency")));
  EXPECT_THAT(settings.values, Contains(Key("--ring_chunk_kb")));
  EXPECT_THAT(settings.values, Contains(Key("--seed")));
}

TEST(JobSettingsTest, PerProcessAndForeignFlagsAreLeftOut) {
  const WorkerSettings settings = WorkerSettingsFromFlags();
  for (const char* name : {"--metrics_dir", "--gpus", "--data_dir",
                           "--timeout_s", "--bind", "--ps_bind"}) {
    EXPECT_THAT(settings.values, Not(Contains(Key(name))));
  }
  for (const auto& [name, value] : settings.values) {
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(absl::string_view(name).substr(2));
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_TRUE(IsGradsyncFlagFile(flag->Filename())) << name;
  }
}

// A server states only flags that every worker states too (so the
// coordinator can always compare them), each with its value.
TEST(JobSettingsTest, AServerStatesWorkerSettingsOnly) {
  absl::FlagSaver restore;
  absl::CommandLineFlag* window = absl::FindCommandLineFlag("ps_message_kb");
  ASSERT_NE(window, nullptr);
  std::string error;
  ASSERT_TRUE(window->ParseFrom("64", &error)) << error;
  const WorkerSettings server = ServerSettingsFromFlags();
  EXPECT_EQ(server.values.size(), ServerFlags().size());
  EXPECT_THAT(server.values, Contains(Pair("--ps_message_kb", "64")));
  const WorkerSettings worker = WorkerSettingsFromFlags();
  for (const auto& [name, value] : server.values) {
    EXPECT_THAT(worker.values, Contains(Pair(name, value))) << name;
  }
}

bool Lists(const std::vector<IgnoredFlag>& ignored, const std::string& name) {
  for (const IgnoredFlag& flag : ignored) {
    if (flag.name == name) return true;
  }
  return false;
}

void Set(const char* name, const char* value) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  ASSERT_NE(flag, nullptr) << name;
  std::string error;
  ASSERT_TRUE(flag->ParseFrom(value, &error)) << error;
}

TEST(JobSettingsTest, AStrategyFlagTheStrategyDoesNotReadIsNamed) {
  absl::FlagSaver restore;
  Set("ps_consistency", "asp");
  Set("allreduce_eager_kb", "64");
  Set("ps_bind", "127.0.0.1:0");  // per-process: never listed
  const std::vector<IgnoredFlag> ring = FlagsIgnoredBy("ring", {false, true});
  ASSERT_TRUE(Lists(ring, "ps_consistency"));
  EXPECT_FALSE(Lists(ring, "allreduce_eager_kb"));
  EXPECT_FALSE(Lists(ring, "ps_bind"));
  for (const IgnoredFlag& flag : ring) {
    if (flag.name != "ps_consistency") continue;
    EXPECT_EQ(flag.value, "asp");
    EXPECT_THAT(flag.why, ::testing::HasSubstr("--sync=ring"));
  }
  const std::vector<IgnoredFlag> ps = FlagsIgnoredBy("ps", {true, false});
  EXPECT_FALSE(Lists(ps, "ps_consistency"));
  EXPECT_TRUE(Lists(ps, "allreduce_eager_kb"));
  EXPECT_TRUE(FlagsIgnoredBy("hybrid", {true, true}).empty());
}

TEST(JobSettingsTest, FlagsAtTheirDefaultsAreNeverIgnored) {
  absl::FlagSaver restore;
  EXPECT_TRUE(FlagsIgnoredBy("local", {false, false}).empty());
}

}  // namespace
}  // namespace gradsync
