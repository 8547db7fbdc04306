// The bound on a launch's processes: issue 30's --workers=100000 is refused
// naming both bounds, a job that fits passes, and --max_processes wins.
#include "core/launch/process_budget.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

TEST(ProcessBudgetTest, ATypoOfAHundredThousandWorkersIsRefused) {
  const MachineCapacity machine{2, 24 * 1024 * kMiB};
  const absl::Status status =
      CheckLocalProcesses(100000, 0, 262 * kMiB, 64 * kMiB, machine, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("2 cores hold at most 32"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("262 MiB a worker"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--max_processes"));
}

TEST(ProcessBudgetTest, MemoryBoundsBeforeCores) {
  // 90 workers of 262 MiB do not fit in 80% of 24 GiB, though 64 cores
  // would run them.
  const MachineCapacity machine{64, 24 * 1024 * kMiB};
  EXPECT_FALSE(
      CheckLocalProcesses(90, 0, 262 * kMiB, 64 * kMiB, machine, 0).ok());
  EXPECT_TRUE(
      CheckLocalProcesses(60, 0, 262 * kMiB, 64 * kMiB, machine, 0).ok());
  EXPECT_EQ(MaxLocalProcesses(machine, 262 * kMiB), 75);
}

TEST(ProcessBudgetTest, TheBenchmarksOversubscriptionFitsAndTheUserMayRaise) {
  const MachineCapacity machine{2, 16 * 1024 * kMiB};
  EXPECT_TRUE(
      CheckLocalProcesses(8, 8, 100 * kMiB, 64 * kMiB, machine, 0).ok());
  EXPECT_FALSE(
      CheckLocalProcesses(40, 0, 10 * kMiB, 64 * kMiB, machine, 0).ok());
  EXPECT_TRUE(
      CheckLocalProcesses(40, 0, 10 * kMiB, 64 * kMiB, machine, 40).ok());
  EXPECT_FALSE(
      CheckLocalProcesses(41, 0, 10 * kMiB, 64 * kMiB, machine, 40).ok());
}

TEST(ProcessBudgetTest, ThisMachineHasCores) {
  EXPECT_GE(ThisMachine().cores, 1);
}

}  // namespace
}  // namespace gradsync
