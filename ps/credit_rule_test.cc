// --credit_kb's auto for the PS (ps/credit_rule.h).
#include "ps/credit_rule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Pushes: the window, at least one key, however short the link, so a late
// first-layer key waits behind little on the worker's shared uplink.
TEST(CreditRuleTest, PushHoldsOneKeyOnAShortLink) {
  const CreditChoice choice =
      ChooseCredit(64 << 10, 32 << 10, CreditDirection::kPush);
  EXPECT_EQ(choice.credit_bytes, 64 << 10);
  EXPECT_THAT(choice.reason, HasSubstr("at least one key (64 KiB)"));
}

// Pulls on a short link: at least four keys, as pulls wait on other
// workers' pushes.
TEST(CreditRuleTest, PullHoldsAtLeastFourKeys) {
  const CreditChoice choice =
      ChooseCredit(64 << 10, 32 << 10, CreditDirection::kPull);
  EXPECT_EQ(choice.credit_bytes, 4 * (64 << 10));
  EXPECT_THAT(choice.reason, HasSubstr("4 keys of 64 KiB"));
}

// A long link (or one not known, 4 MiB windows): the window decides; pulls
// add one key, the one being answered.
TEST(CreditRuleTest, TheWindowWhereThatIsMore) {
  const CreditChoice push =
      ChooseCredit(64 << 10, 4 << 20, CreditDirection::kPush);
  EXPECT_EQ(push.credit_bytes, 4 << 20);
  EXPECT_THAT(push.reason, HasSubstr("push stream window (4096 KiB"));
  const CreditChoice pull =
      ChooseCredit(64 << 10, 4 << 20, CreditDirection::kPull);
  EXPECT_EQ(pull.credit_bytes, (64 << 10) + (4 << 20));
  EXPECT_THAT(pull.reason, HasSubstr("pull stream window (4096 KiB"));
}

}  // namespace
}  // namespace gradsync
