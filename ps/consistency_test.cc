// The update and consistency rules on their own (ps/consistency.h).
#include "ps/consistency.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(ConsistencyTest, NamesParseBack) {
  for (ps::UpdateMode mode : {ps::UPDATE_WORKER, ps::UPDATE_SERVER}) {
    absl::StatusOr<ps::UpdateMode> parsed =
        ParseUpdateMode(UpdateModeName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
  for (ps::Consistency mode :
       {ps::CONSISTENCY_BSP, ps::CONSISTENCY_SSP, ps::CONSISTENCY_ASP}) {
    absl::StatusOr<ps::Consistency> parsed =
        ParseConsistency(ConsistencyName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
}

TEST(ConsistencyTest, NotesForMessages) {
  EXPECT_EQ(ConsistencyNote(ps::CONSISTENCY_BSP, 0), "");
  EXPECT_EQ(ConsistencyNote(ps::CONSISTENCY_SSP, 2), " (SSP, staleness 2)");
  EXPECT_EQ(ConsistencyNote(ps::CONSISTENCY_ASP, 0), " (ASP)");
}

TEST(ConsistencyTest, UnknownNamesAreRefusedWithTheChoices) {
  EXPECT_THAT(std::string(ParseUpdateMode("both").status().message()),
              HasSubstr("choose worker or server"));
  EXPECT_THAT(std::string(ParseConsistency("BSP").status().message()),
              HasSubstr("choose bsp, ssp or asp"));
}

TEST(ConsistencyTest, StalenessBoundsAndTheServersOptimizer) {
  EXPECT_TRUE(CheckConsistency(ps::CONSISTENCY_BSP, 0, ps::UPDATE_WORKER).ok());
  EXPECT_TRUE(CheckConsistency(ps::CONSISTENCY_SSP, 0, ps::UPDATE_SERVER).ok());
  EXPECT_TRUE(
      CheckConsistency(ps::CONSISTENCY_SSP, kMaxStaleness, ps::UPDATE_SERVER)
          .ok());
  EXPECT_TRUE(CheckConsistency(ps::CONSISTENCY_ASP, 0, ps::UPDATE_SERVER).ok());
  for (int32_t staleness : {-1, kMaxStaleness + 1}) {
    absl::Status status =
        CheckConsistency(ps::CONSISTENCY_SSP, staleness, ps::UPDATE_SERVER);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << staleness;
    EXPECT_THAT(std::string(status.message()), HasSubstr("--ps_staleness"));
  }
  // A bound is only for SSP.
  EXPECT_THAT(
      std::string(CheckConsistency(ps::CONSISTENCY_ASP, 2, ps::UPDATE_SERVER)
                      .message()),
      HasSubstr("only for --ps_consistency=ssp"));
  // SSP and ASP step the parameters on the servers.
  for (ps::Consistency mode : {ps::CONSISTENCY_SSP, ps::CONSISTENCY_ASP}) {
    EXPECT_THAT(
        std::string(CheckConsistency(mode, 0, ps::UPDATE_WORKER).message()),
        HasSubstr("needs --ps_update=server"));
  }
  EXPECT_TRUE(absl::IsInvalidArgument(CheckConsistency(
      static_cast<ps::Consistency>(77), 0, ps::UPDATE_SERVER)));
}

}  // namespace
}  // namespace gradsync
