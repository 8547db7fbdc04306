// Each warning fires where the measurement or the model says it should,
// names the fix, and stays silent otherwise.
#include "ps/setting_checks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(AsyncMomentumWarningTest, AspWithTheDefaultMomentumIsWarnedAbout) {
  OptimizerOptions sgd;  // momentum 0.9, the default
  const std::optional<std::string> warning =
      AsyncMomentumWarning(ps::CONSISTENCY_ASP, sgd);
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning,
              HasSubstr("--ps_consistency=asp with SGD momentum 0.90"));
  EXPECT_THAT(*warning, HasSubstr("set --momentum=0.5"));
  EXPECT_TRUE(AsyncMomentumWarning(ps::CONSISTENCY_SSP, sgd).has_value());
}

TEST(AsyncMomentumWarningTest, SilentWhereNothingWasMeasuredToGoWrong) {
  OptimizerOptions sgd;
  EXPECT_FALSE(AsyncMomentumWarning(ps::CONSISTENCY_BSP, sgd).has_value());
  sgd.momentum = 0.5f;
  EXPECT_FALSE(AsyncMomentumWarning(ps::CONSISTENCY_ASP, sgd).has_value());
  OptimizerOptions adam;
  adam.kind = "adam";
  EXPECT_FALSE(AsyncMomentumWarning(ps::CONSISTENCY_ASP, adam).has_value());
}

TEST(TimeoutWarningTest, Vgg16OnOneServerAtOneGigabit) {
  // VGG-16 (553 MB), N = 16, K = 1, 1 Gbit/s: 16 x 553 MB / 125 MB/s = 71 s
  // of pushes into the one server, plus the tail: beyond the default 60 s.
  LinkFigures link;
  link.rate_bytes_per_s = 125e6;
  const double step =
      PredictedPsStepSeconds(int64_t{138357544} * 4, 16, 1.0, 4 << 20, link);
  EXPECT_NEAR(step, 71.0, 1.0);
  const std::optional<std::string> warning =
      TimeoutWarning(absl::Seconds(60), step, "PS K=1");
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("--timeout_s=60 is shorter than twice"));
  EXPECT_THAT(*warning, HasSubstr("set --timeout_s=284"));
  EXPECT_FALSE(TimeoutWarning(absl::Seconds(300), step, "PS K=1").has_value());
}

TEST(TimeoutWarningTest, SilentWithoutAPrediction) {
  EXPECT_EQ(PredictedPsStepSeconds(1 << 20, 4, 1.0, 1 << 20, LinkFigures{}), 0);
  EXPECT_FALSE(TimeoutWarning(absl::Seconds(1), 0, "PS").has_value());
}

}  // namespace
}  // namespace gradsync
