// Tests of bfloat16.h's rounding against an independent reference: the two
// bf16 neighbours of a float compared in double, ties to the even one. Edge
// cases by name (zeros, ties, the largest finite values and overflow, the
// normal/subnormal boundary, NaNs and infinities), then a sweep of every bf16
// value (all 65536 high halves) with the low halves that decide the rounding,
// then random bit patterns.
#include "core/device/bfloat16.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace {

namespace bf = bfloat16;

// The nearest bf16 by value: the truncation `low` and the next bf16 away from
// zero `high` bracket |x|; the closer wins, a tie goes to the one whose last
// mantissa bit is 0. Past the largest bf16 the next "value" is 2^128
// (IEEE's rule: overflow to infinity from half an ulp above the largest).
uint16_t ReferenceRound(float x) {
  const uint32_t bits = bf::FloatBits(x);
  if (std::isnan(x)) return 0;  // callers check NaNs separately
  if (std::isinf(x)) return static_cast<uint16_t>(bits >> 16);
  const uint16_t low = static_cast<uint16_t>(bits >> 16);
  if ((bits & 0xffffu) == 0) return low;
  const uint16_t high = static_cast<uint16_t>(low + 1);
  const double magnitude = std::fabs(static_cast<double>(x));
  const double low_value = std::fabs(static_cast<double>(bf::FromBits(low)));
  const double high_value =
      (high & 0x7fffu) == 0x7f80u
          ? std::ldexp(1.0, 128)
          : std::fabs(static_cast<double>(bf::FromBits(high)));
  const double below = magnitude - low_value;
  const double above = high_value - magnitude;
  if (below < above) return low;
  if (above < below) return high;
  return (low & 1u) == 0 ? low : high;
}

void ExpectRoundsLikeReference(uint32_t bits) {
  const float x = bf::FloatFromBits(bits);
  const uint16_t got = bf::RoundToBits(x);
  if (std::isnan(x)) {
    const float back = bf::FromBits(got);
    ASSERT_TRUE(std::isnan(back)) << std::hex << "bits 0x" << bits;
    ASSERT_EQ(got >> 15, bits >> 31) << std::hex << "sign of NaN 0x" << bits;
    return;
  }
  ASSERT_EQ(got, ReferenceRound(x)) << std::hex << "bits 0x" << bits;
}

TEST(Bfloat16Test, ExactValuesAreKept) {
  for (float value : {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 1.0078125f,
                      -3.140625f, 65536.0f, 1e-30f * 0.0f}) {
    EXPECT_EQ(bf::Round(value), value) << value;
  }
  EXPECT_EQ(bf::RoundToBits(-0.0f), 0x8000u);  // the sign of zero survives
  EXPECT_EQ(bf::RoundToBits(0.0f), 0x0000u);
  EXPECT_EQ(bf::RoundToBits(1.0f), 0x3f80u);
  EXPECT_EQ(bf::FromBits(0x3f80u), 1.0f);
  EXPECT_EQ(bf::FromBits(0xc049u), -3.140625f);
}

TEST(Bfloat16Test, TiesGoToEven) {
  // 1 + 2⁻⁸ lies halfway between 1 (even) and 1 + 2⁻⁷ (odd): down.
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x3f808000u)), 0x3f80u);
  // 1 + 3·2⁻⁸ lies halfway between 1 + 2⁻⁷ (odd) and 1 + 2⁻⁶ (even): up.
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x3f818000u)), 0x3f82u);
  // Just below and above a tie.
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x3f807fffu)), 0x3f80u);
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x3f808001u)), 0x3f81u);
  // Negative ties mirror the positive ones.
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0xbf808000u)), 0xbf80u);
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0xbf818000u)), 0xbf82u);
  // A tie whose rounding up carries into the exponent: 2 − 2⁻⁸ lies halfway
  // between 2 − 2⁻⁷ (0x3fff, odd) and 2 (0x4000, even).
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x3fff8000u)), 0x4000u);
  EXPECT_EQ(bf::Round(bf::FloatFromBits(0x3fff8000u)), 2.0f);
}

TEST(Bfloat16Test, LargestValuesAndOverflow) {
  const float largest = bf::FromBits(0x7f7fu);  // (2 − 2⁻⁷)·2¹²⁷
  EXPECT_EQ(bf::Round(largest), largest);
  // float32's largest lies past largest + half an ulp: infinity, as IEEE
  // rounds (and PyTorch's bf16 cast gives).
  EXPECT_EQ(bf::Round(std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf::Round(-std::numeric_limits<float>::max()),
            -std::numeric_limits<float>::infinity());
  // Just under the halfway point stays finite; the halfway point is a tie
  // from an odd bf16 (0x7f7f), so it goes up, to infinity.
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x7f7f8000u)), 0x7f80u);
}

TEST(Bfloat16Test, InfinitiesAndNansAreKept) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf::RoundToBits(inf), 0x7f80u);
  EXPECT_EQ(bf::RoundToBits(-inf), 0xff80u);
  EXPECT_EQ(bf::Round(inf), inf);
  EXPECT_EQ(bf::Round(-inf), -inf);
  // NaNs whose payload lies only in the dropped half: a truncation would
  // make them infinities, the rounding must not.
  for (uint32_t bits : {0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fc00000u,
                        0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7f8fffffu}) {
    const uint16_t rounded = bf::RoundToBits(bf::FloatFromBits(bits));
    EXPECT_TRUE(std::isnan(bf::FromBits(rounded))) << std::hex << bits;
    EXPECT_EQ(rounded >> 15, bits >> 31) << std::hex << bits;
  }
  EXPECT_TRUE(std::isnan(bf::Round(std::nanf(""))));
}

TEST(Bfloat16Test, SubnormalsAndTheNormalBoundary) {
  // The smallest float32 subnormal is below half of bf16's smallest (2⁻¹³³):
  // it rounds to zero, keeping its sign.
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x00000001u)), 0x0000u);
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x80000001u)), 0x8000u);
  // bf16's smallest subnormal, exactly, and its half (a tie to even: zero)
  // and just above its half (up).
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x00010000u)), 0x0001u);
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x00008000u)), 0x0000u);
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x00008001u)), 0x0001u);
  // The largest subnormals round up into the smallest normal (2⁻¹²⁶).
  EXPECT_EQ(bf::RoundToBits(bf::FloatFromBits(0x007fffffu)), 0x0080u);
  EXPECT_EQ(bf::Round(bf::FloatFromBits(0x007fffffu)),
            std::numeric_limits<float>::min());
}

TEST(Bfloat16Test, ErrorIsWithinHalfAnUlp) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1000.0f, 1000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = uniform(random);
    const double error = std::fabs(static_cast<double>(bf::Round(x)) - x);
    ASSERT_LE(error, bf::kUnitRoundoff * std::fabs(x)) << x;
  }
}

// Every bf16 value (the high half: sign, exponent, 7 mantissa bits) with the
// low halves that decide its rounding: zero, one, just below the tie, the
// tie, just above it, the largest, and a few others.
TEST(Bfloat16Test, SweepOfEveryBf16ValueMatchesTheReference) {
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x3fffu, 0x7ffeu, 0x7fffu,
                           0x8000u, 0x8001u, 0xbfffu, 0xfffeu, 0xffffu};
  for (uint32_t high = 0; high <= 0xffffu; ++high) {
    for (uint32_t low : lows) {
      ExpectRoundsLikeReference((high << 16) | low);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(Bfloat16Test, RandomBitPatternsMatchTheReference) {
  std::mt19937 random(39);
  for (int i = 0; i < (1 << 22); ++i) {
    ExpectRoundsLikeReference(static_cast<uint32_t>(random()));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The walks the bf16 casts use (layer_geometry.h's NhwcWalk).
// The array forms are the element functions over every element: random bit
// patterns (NaNs and infinities among them) to bits and back.
TEST(Bfloat16Test, ArraysConvertEveryElement) {
  std::mt19937 generator(7);
  std::vector<float> values(1000);
  for (float& v : values) v = bfloat16::FloatFromBits(generator());
  std::vector<uint16_t> bits(values.size());
  bfloat16::RoundToBits(values.data(), static_cast<int64_t>(values.size()),
                        bits.data());
  std::vector<float> back(values.size());
  bfloat16::FromBits(bits.data(), static_cast<int64_t>(bits.size()),
                     back.data());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(bits[i], bfloat16::RoundToBits(values[i])) << i;
    ASSERT_EQ(bfloat16::FloatBits(back[i]),
              bfloat16::FloatBits(bfloat16::FromBits(bits[i])))
        << i;
  }
}

TEST(NhwcWalkTest, NhwcLayoutIsTheIdentity) {
  NhwcWalk walk{2, 3, 4, 5, NhwcLayout(3, 4, 5)};
  for (int64_t i = 0; i < walk.count(); ++i) ASSERT_EQ(walk.OffsetOf(i), i);
  const NhwcWalk flat = ContiguousWalk(37);
  EXPECT_EQ(flat.count(), 37);
  for (int64_t i = 0; i < 37; ++i) ASSERT_EQ(flat.OffsetOf(i), i);
}

TEST(NhwcWalkTest, NchwIsReadInNhwcOrder) {
  const int n = 2, c = 3, h = 4, w = 5;
  NhwcWalk walk{n, c, h, w, NchwLayout(c, h, w)};
  int64_t index = 0;
  for (int b = 0; b < n; ++b) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int ch = 0; ch < c; ++ch, ++index) {
          ASSERT_EQ(walk.OffsetOf(index), ((b * c + ch) * h + y) * w + x);
        }
      }
    }
  }
}

// A PyTorch-order weight [out][in][k][k] walked as (n = out, c = in, h, w)
// comes out in KRSC order: out, then kh, kw, then in.
TEST(NhwcWalkTest, WeightBecomesKrsc) {
  const int out = 4, in = 3, k = 3;
  NhwcWalk walk{out, in, k, k, NchwLayout(in, k, k)};
  int64_t index = 0;
  for (int o = 0; o < out; ++o) {
    for (int r = 0; r < k; ++r) {
      for (int s = 0; s < k; ++s) {
        for (int i = 0; i < in; ++i, ++index) {
          ASSERT_EQ(walk.OffsetOf(index), ((o * in + i) * k + r) * k + s);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gradsync
