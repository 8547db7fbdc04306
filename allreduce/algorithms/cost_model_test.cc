// The α–β formulas at points worked by hand; bench/cost_model_test.py checks
// the Python copy against the same numbers.
#include "allreduce/algorithms/cost_model.h"

#include "gtest/gtest.h"

namespace gradsync {
namespace {

const LinkCost kLink{1e-3, 1.25e8};  // 1 ms, 1 Gbit/s

TEST(CostModel, RingAtHandWorkedPoints) {
  // Latency-bound: 64 KiB over 8 ranks, s = 8 KiB takes 65.5 us < α, so the
  // first byte's 14 hops and one segment: 14·1 ms + 8 KiB / 125 MB/s.
  EXPECT_NEAR(RingAllReduceSeconds(8, 65536, kLink), 14e-3 + 8192 / 1.25e8,
              1e-12);
  // Bandwidth-bound: 64 MiB, s = 8 MiB takes 67 ms > α, so the link's
  // 14 segments and one latency.
  const double big = 64.0 * (1 << 20);
  EXPECT_NEAR(RingAllReduceSeconds(8, big, kLink), 14 * big / 8 / 1.25e8 + 1e-3,
              1e-12);
  // Never below either bound alone, never above store-and-forward.
  for (double bytes : {4096.0, 1048576.0, big}) {
    const double t = RingAllReduceSeconds(8, bytes, kLink);
    EXPECT_GE(t, 14 * kLink.alpha_s);
    EXPECT_GE(t, 1.75 * bytes / kLink.bytes_per_s);
    EXPECT_LE(t, 14 * kLink.alpha_s + 1.75 * bytes / kLink.bytes_per_s);
  }
  EXPECT_EQ(RingAllReduceSeconds(1, 65536, kLink), 0);
}

TEST(CostModel, HalvingDoublingPowerOfTwoAndFold) {
  EXPECT_NEAR(HalvingDoublingAllReduceSeconds(8, 65536, kLink),
              6e-3 + 1.75 * 65536 / 1.25e8, 1e-12);
  // N = 6: p = 4, plus the fold and the return.
  EXPECT_NEAR(HalvingDoublingAllReduceSeconds(6, 65536, kLink),
              4e-3 + 1.5 * 65536 / 1.25e8 + 2e-3 + 2 * 65536 / 1.25e8, 1e-12);
}

TEST(CostModel, HalvingDoublingWaitsForClearsToSendAboveTheEagerPrefix) {
  // 5 ms, 1 Gbit/s, N = 8, 4 MiB: steps of 2, 1 and 0.5 MiB, all above the
  // 256 KiB prefix, each waiting 5 ms − 256 KiB/B in both phases but the
  // first all-gather step (its partner is the last reduce-scatter step's).
  const LinkCost slow{5e-3, 1.25e8};
  const double eager = 256 << 10;
  const double wait = 5e-3 - eager / 1.25e8;
  EXPECT_NEAR(HalvingDoublingAllReduceSeconds(8, 4 << 20, slow, eager),
              HalvingDoublingAllReduceSeconds(8, 4 << 20, slow) + 5 * wait,
              1e-12);
  // Only the steps above the prefix: 1 MiB has one (512 KiB) per phase;
  // N = 2 one step per phase, the all-gather's with the same partner.
  EXPECT_NEAR(HalvingDoublingAllReduceSeconds(8, 1 << 20, slow, eager),
              HalvingDoublingAllReduceSeconds(8, 1 << 20, slow) + 2 * wait,
              1e-12);
  EXPECT_NEAR(HalvingDoublingAllReduceSeconds(2, 1 << 20, slow, eager),
              HalvingDoublingAllReduceSeconds(2, 1 << 20, slow) + wait, 1e-12);
  // Where the prefix covers the header's flight (1 ms), nothing.
  EXPECT_EQ(HalvingDoublingAllReduceSeconds(8, 4 << 20, kLink, eager),
            HalvingDoublingAllReduceSeconds(8, 4 << 20, kLink));
}

TEST(CostModel, TreeBeatsRingWhenLatencyBoundAndLosesWhenBandwidthBound) {
  // N = 8: depth 3; every rank with 4 tree edges is a leaf of depth 3 in one
  // tree: its 4 halves, then its last byte's 3 hops up and 3 down.
  EXPECT_NEAR(TreeAllReduceSeconds(8, 65536, kLink), 4 * 32768 / 1.25e8 + 6e-3,
              1e-12);
  EXPECT_NEAR(TreeAllReduceSeconds(8, 16 << 20, kLink),
              4 * (8 << 20) / 1.25e8 + 6e-3, 1e-12);
  // N = 4 (midpoint trees, depth 2): the root of tree 1, 4 edges, ends on
  // its broadcast down 2 levels; the ranks with 3 edges end on a reduce
  // from depth 1 (1 + 2 hops) or on a broadcast; a leaf of both trees (2
  // edges) on its reduce from depth 2 (2 + 2). 1 MiB: 4 halves + 2α;
  // 64 KiB: 2 halves + 4α.
  EXPECT_NEAR(TreeAllReduceSeconds(4, 1 << 20, kLink),
              4 * (1 << 19) / 1.25e8 + 2e-3, 1e-12);
  EXPECT_NEAR(TreeAllReduceSeconds(4, 65536, kLink), 2 * 32768 / 1.25e8 + 4e-3,
              1e-12);
  // N = 2: each rank's one connection carries its reduce and then its
  // broadcast back, one hop: S/B + α.
  EXPECT_NEAR(TreeAllReduceSeconds(2, 1 << 20, kLink),
              2 * (1 << 19) / 1.25e8 + 1e-3, 1e-12);
  // With the clear to send's 256 KiB prefix on a 5 ms link, the half waits
  // 5 ms − 256 KiB/B once; within the prefix, or on a 1 ms link, nothing.
  const LinkCost slow{5e-3, 1.25e8};
  const double eager = 256 << 10;
  EXPECT_NEAR(TreeAllReduceSeconds(2, 1 << 20, slow, eager),
              2 * (1 << 19) / 1.25e8 + 5e-3 + (5e-3 - eager / 1.25e8), 1e-12);
  EXPECT_EQ(TreeAllReduceSeconds(2, 1 << 19, slow, eager),
            TreeAllReduceSeconds(2, 1 << 19, slow));
  EXPECT_EQ(TreeAllReduceSeconds(8, 16 << 20, kLink, eager),
            TreeAllReduceSeconds(8, 16 << 20, kLink));
  EXPECT_LT(TreeAllReduceSeconds(8, 65536, kLink),
            RingAllReduceSeconds(8, 65536, kLink));
  const double big = 64.0 * (1 << 20);
  EXPECT_GT(TreeAllReduceSeconds(8, big, kLink),
            RingAllReduceSeconds(8, big, kLink));
}

TEST(CostModel, HierarchicalSharedLinkPoint) {
  // N = 8 in 4 nodes of 2 sharing a 1 Gbit/s link: 2·(1 ms + S/2/B) inside,
  // then halving-doubling of S/2 among 4 at B/2.
  const LinkCost shared{1e-3, 1.25e8 / 2};
  EXPECT_NEAR(
      HierarchicalAllReduceSeconds(8, 2, 65536, kLink, shared),
      2 * (1e-3 + 0.5 * 65536 / 1.25e8) + 4e-3 + 1.5 * 32768 / (1.25e8 / 2),
      1e-12);
}

TEST(CostModel, HierarchicalWithOneRankPerNodeIsHalvingDoubling) {
  EXPECT_NEAR(HierarchicalAllReduceSeconds(8, 1, 65536, kLink, kLink),
              HalvingDoublingAllReduceSeconds(8, 65536, kLink), 1e-12);
}

}  // namespace
}  // namespace gradsync
