// --credit_kb's auto for the PS (ps/credit_rule.h).
#include "ps/credit_rule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// A short link: the keys in flight decide.
TEST(CreditRuleTest, AtLeastFourKeys) {
  const CreditChoice choice = ChooseCredit(64 << 10, 32 << 10, "push");
  EXPECT_EQ(choice.credit_bytes, 4 * (64 << 10));
  EXPECT_THAT(choice.reason, HasSubstr("4 keys of 64 KiB"));
}

// A long link (or one not known, 4 MiB windows): one key + the window.
TEST(CreditRuleTest, OneKeyPlusTheWindowWhereThatIsMore) {
  const CreditChoice choice = ChooseCredit(64 << 10, 4 << 20, "pull");
  EXPECT_EQ(choice.credit_bytes, (64 << 10) + (4 << 20));
  EXPECT_THAT(choice.reason, HasSubstr("pull stream window (4096 KiB"));
}

}  // namespace
}  // namespace gradsync
