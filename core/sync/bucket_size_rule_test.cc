// The bucket cap's rule: the MLP gets several buckets, large models DDP's
// 25 MiB, tiny ones the 1 MiB floor; the warning fires for one bucket only.
#include "core/sync/bucket_size_rule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::vector<ParamSpec> Mlp() {
  return {{"fc0.weight", {512, 784}}, {"fc0.bias", {512}},
          {"fc1.weight", {256, 512}}, {"fc1.bias", {256}},
          {"fc2.weight", {10, 256}},  {"fc2.bias", {10}}};
}

TEST(BucketSizeRuleTest, CapsWithinTheFloorAndCeiling) {
  EXPECT_EQ(ChooseBucketBytes(int64_t{200} << 20).bucket_bytes, 25 << 20);
  EXPECT_EQ(ChooseBucketBytes(int64_t{40} << 20).bucket_bytes, 10 << 20);
  EXPECT_EQ(ChooseBucketBytes(int64_t{100} << 10).bucket_bytes, 1 << 20);
  EXPECT_THAT(ChooseBucketBytes(40 << 20).reason, HasSubstr("auto: "));
}

TEST(BucketSizeRuleTest, TheDefaultMlpGetsMoreThanOneBucket) {
  absl::StatusOr<ParamLayout> automatic =
      ParamLayout::Create(Mlp(), ChooseBucketBytes(535818 * 4).bucket_bytes);
  ASSERT_TRUE(automatic.ok());
  EXPECT_GE(automatic->buckets().size(), 2u);
  EXPECT_FALSE(SingleBucketWarning(*automatic, 1.0).has_value());
}

TEST(BucketSizeRuleTest, WarnsWhenTheCapHoldsTheWholeModel) {
  absl::StatusOr<ParamLayout> one = ParamLayout::Create(Mlp(), 25 << 20);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->buckets().size(), 1u);
  const std::optional<std::string> warning = SingleBucketWarning(*one, 25);
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("--bucket_mb=25 holds the whole 2.14 MB"));
  EXPECT_THAT(*warning, HasSubstr("leave --bucket_mb unset"));
  // A model of one tensor cannot overlap anyway: nothing to say.
  absl::StatusOr<ParamLayout> single =
      ParamLayout::Create({{"w", {1000}}}, 25 << 20);
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(SingleBucketWarning(*single, 25).has_value());
}

}  // namespace
}  // namespace gradsync
