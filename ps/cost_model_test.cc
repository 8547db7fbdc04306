// The parameter server's α–β formulas: their closed forms at the layouts where
// they coincide (colocated = mixed with every worker serving, separate = mixed
// with none, BytePS's optimum = balanced shares), and the partitioner's shares.
#include "ps/cost_model.h"

#include "gtest/gtest.h"

namespace gradsync {
namespace {

const LinkCost kLink{1e-3, 1.25e8};  // 1 ms, 1 Gbit/s
constexpr double kMiB = 1 << 20;
const PsKeyTail kNoTail{0, kMiB};

TEST(PsCostModel, SeparateServersCarryTheBusierLinkTailAndARoundTrip) {
  const double bytes = 64 * kMiB;
  // K = 1: the server's link takes N·S.
  EXPECT_NEAR(SeparatePsSeconds(8, bytes, kLink, 1.0, kNoTail),
              8 * bytes / 1.25e8 + 2e-3, 1e-12);
  // K = N balanced: a worker's S; the last 4 MiB key's 1 MiB block 8 times.
  EXPECT_NEAR(SeparatePsSeconds(8, bytes, kLink, 1.0 / 8, {4 * kMiB, kMiB}),
              bytes / 1.25e8 + 8 * kMiB / 1.25e8 + 2e-3, 1e-12);
  // A server that sums slower than its link bounds the step.
  EXPECT_NEAR(SeparatePsSeconds(8, bytes, kLink, 1.0, kNoTail, 1e8),
              8 * bytes / 1e8 + 2e-3, 1e-12);
  EXPECT_EQ(PsTailBlockBytes({4 * kMiB, kMiB}), kMiB);
  EXPECT_EQ(PsTailBlockBytes({64 << 10, kMiB}), 64 << 10);
}

TEST(PsCostModel, ColocatedHasTheRingsBandwidthTermAndTwoLatencies) {
  for (int n : {2, 3, 4, 8, 16}) {
    for (double bytes : {4096.0, kMiB, 64 * kMiB}) {
      const double want =
          std::max(2.0 * (n - 1) / n * bytes / kLink.bytes_per_s + 1e-3,
                   2e-3 + (n - 1.0) / n * bytes / kLink.bytes_per_s);
      EXPECT_NEAR(ColocatedPsSeconds(n, bytes, kLink, 1.0 / n, kNoTail), want,
                  1e-12);
    }
  }
  EXPECT_EQ(ColocatedPsSeconds(1, kMiB, kLink, 1.0, kNoTail), 0);
}

TEST(PsCostModel, MixedReducesToColocatedAndSeparateAtItsEnds) {
  const PsKeyTail tail{256 << 10, kMiB};
  for (int n : {2, 4, 8}) {
    const double bytes = 16 * kMiB;
    EXPECT_NEAR(*MixedPsSeconds(n, n, 0, bytes, kLink, 1.0 / n, 1.0 / n, tail),
                ColocatedPsSeconds(n, bytes, kLink, 1.0 / n, tail), 1e-12);
    EXPECT_NEAR(*MixedPsSeconds(n, 0, 2, bytes, kLink, 0.5, 0.5, tail),
                SeparatePsSeconds(n, bytes, kLink, 0.5, tail), 1e-12);
  }
  EXPECT_FALSE(MixedPsSeconds(4, 5, 0, kMiB, kLink, 0.2, 0.2, kNoTail).ok());
  EXPECT_FALSE(MixedPsSeconds(4, 0, 0, kMiB, kLink, 1, 1, kNoTail).ok());
}

TEST(PsCostModel, BalancedSharesReachBytePsOptimum) {
  // c = N serving workers beside k separate servers with ServerShares'
  // balanced targets: the busiest link is BytePS's optimum (latency aside).
  const LinkCost wide{0, 1.25e8};
  for (int n : {2, 4, 8}) {
    for (int k = 1; k <= n; ++k) {
      absl::StatusOr<std::vector<double>> shares =
          ServerShares(PartitionPolicy::kBalanced, n, n, k);
      ASSERT_TRUE(shares.ok());
      const double bytes = 64 * kMiB;
      EXPECT_NEAR(*MixedPsSeconds(n, n, k, bytes, wide, shares->front(),
                                  shares->back(), kNoTail),
                  BytePsOptimumSeconds(n, k, bytes, wide), 1e-9)
          << n << " " << k;
    }
  }
  // k = 0 is the colocated bandwidth term, k = N the separate servers' S/B.
  EXPECT_NEAR(BytePsOptimumSeconds(4, 0, kMiB, kLink), 1.5 * kMiB / 1.25e8,
              1e-12);
  EXPECT_NEAR(BytePsOptimumSeconds(4, 4, kMiB, kLink), kMiB / 1.25e8, 1e-12);
}

TEST(PsCostModel, BalancedShareIsAtLeastOneKey) {
  EXPECT_DOUBLE_EQ(BalancedLargestShare(16 * kMiB, 4, 4 * kMiB), 0.25);
  // Two keys on eight servers: each holds half or nothing.
  EXPECT_DOUBLE_EQ(BalancedLargestShare(8 * kMiB, 8, 4 * kMiB), 0.5);
  // 10 MiB in 4 MiB keys (4, 4, 2) on two servers: 6 and 4.
  EXPECT_DOUBLE_EQ(BalancedLargestShare(10 * kMiB, 2, 4 * kMiB), 0.6);
  EXPECT_EQ(BalancedLargestShare(0, 4, 4 * kMiB), 0);
}

TEST(PsCostModel, PlacedSharesFollowTheTargets) {
  // Equal targets, many small keys: 1/K each kind.
  absl::StatusOr<PlacedShares> equal =
      PlaceShares(64 * kMiB, 4, 2, 2, PartitionPolicy::kEqual, 64 << 10);
  ASSERT_TRUE(equal.ok());
  EXPECT_NEAR(equal->colocated, 0.25, 1e-3);
  EXPECT_NEAR(equal->separate, 0.25, 1e-3);
  // Balanced, N = 4, c = 2, s = 2: f_c = 1/6, f_s = 1/3.
  absl::StatusOr<PlacedShares> balanced =
      PlaceShares(64 * kMiB, 4, 2, 2, PartitionPolicy::kBalanced, 64 << 10);
  ASSERT_TRUE(balanced.ok());
  EXPECT_NEAR(balanced->colocated, 1.0 / 6, 2e-3);
  EXPECT_NEAR(balanced->separate, 1.0 / 3, 2e-3);
  EXPECT_FALSE(
      PlaceShares(kMiB, 2, 3, 0, PartitionPolicy::kEqual, 4 * kMiB).ok());
}

}  // namespace
}  // namespace gradsync
