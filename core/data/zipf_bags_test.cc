// The Zipf bags: deterministic from the seed, ids in range, frequencies that
// follow the Zipf law, labels of both classes, bad options refused.
#include "core/data/zipf_bags.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

ZipfBagsOptions SmallOptions() {
  ZipfBagsOptions o;
  o.train_size = 20000;
  o.test_size = 500;
  o.vocabulary = 1000;
  o.bag_size = 8;
  o.exponent = 1.1;
  o.seed = 7;
  return o;
}

TEST(ZipfBagsTest, SameSeedSameData) {
  const auto a = MakeZipfBags(SmallOptions());
  const auto b = MakeZipfBags(SmallOptions());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->train.features, b->train.features);
  EXPECT_EQ(a->train.labels, b->train.labels);
  EXPECT_EQ(a->test.features, b->test.features);
  ZipfBagsOptions other = SmallOptions();
  other.seed = 8;
  EXPECT_NE(MakeZipfBags(other)->train.features, a->train.features);
  // The test set comes from its own stream: more training samples leave it.
  other = SmallOptions();
  other.train_size = 100;
  EXPECT_EQ(MakeZipfBags(other)->test.features, a->test.features);
}

TEST(ZipfBagsTest, ShapesAndIdsInRange) {
  const ZipfBagsOptions o = SmallOptions();
  const DatasetPair data = *MakeZipfBags(o);
  EXPECT_EQ(data.train.size, o.train_size);
  EXPECT_EQ(data.train.feature_dim, o.bag_size);
  EXPECT_EQ(data.train.num_classes, 2);
  EXPECT_EQ(data.train.channels, 0);
  ASSERT_EQ(data.train.features.size(),
            static_cast<size_t>(o.train_size * o.bag_size));
  for (float id : data.train.features) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, o.vocabulary);
    ASSERT_EQ(id, std::floor(id));
  }
  // Both classes, neither rare: the expected score is taken out of the sums.
  int64_t ones = 0;
  for (int32_t label : data.train.labels) ones += label;
  EXPECT_GT(ones, o.train_size * 35 / 100);
  EXPECT_LT(ones, o.train_size * 65 / 100);
}

TEST(ZipfBagsTest, TopIdsFollowTheZipfLaw) {
  const ZipfBagsOptions o = SmallOptions();
  const DatasetPair data = *MakeZipfBags(o);
  std::vector<int64_t> counts(o.vocabulary, 0);
  for (float id : data.train.features) ++counts[static_cast<int64_t>(id)];
  const double draws = static_cast<double>(data.train.features.size());
  double normaliser = 0;
  for (int64_t r = 1; r <= o.vocabulary; ++r) {
    normaliser += std::pow(static_cast<double>(r), -o.exponent);
  }
  const std::vector<int64_t> ids = ZipfIdsByRank(o);
  // The five most frequent ids are ranks 1..5 of the permutation, each seen
  // in its share 1/(r^s·H) of the draws (binomial spread below 1.5 %).
  std::vector<int64_t> by_count(o.vocabulary);
  for (int64_t i = 0; i < o.vocabulary; ++i) by_count[i] = i;
  std::partial_sort(
      by_count.begin(), by_count.begin() + 5, by_count.end(),
      [&](int64_t a, int64_t b) { return counts[a] > counts[b]; });
  for (int r = 1; r <= 5; ++r) {
    EXPECT_EQ(by_count[r - 1], ids[r - 1]) << "rank " << r;
    const double expected =
        std::pow(static_cast<double>(r), -o.exponent) / normaliser;
    EXPECT_NEAR(counts[ids[r - 1]] / draws, expected, 0.05 * expected)
        << "rank " << r;
  }
  // The permutation spreads the frequent ids: they are not ids 0..4.
  EXPECT_NE(std::vector<int64_t>(ids.begin(), ids.begin() + 5),
            std::vector<int64_t>({0, 1, 2, 3, 4}));
}

TEST(ZipfBagsTest, BadOptionsAreRefused) {
  ZipfBagsOptions o = SmallOptions();
  o.vocabulary = 0;
  EXPECT_THAT(MakeZipfBags(o).status().message(),
              testing::HasSubstr("vocabulary of 0 ids"));
  o = SmallOptions();
  o.bag_size = 0;
  EXPECT_THAT(MakeZipfBags(o).status().message(),
              testing::HasSubstr("bag size 0"));
  o = SmallOptions();
  o.exponent = 0;
  EXPECT_THAT(MakeZipfBags(o).status().message(),
              testing::HasSubstr("exponent 0"));
  o = SmallOptions();
  o.num_classes = 1;
  EXPECT_FALSE(MakeZipfBags(o).ok());
}

}  // namespace
}  // namespace gradsync
