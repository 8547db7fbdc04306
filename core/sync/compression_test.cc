#include "core/sync/compression.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) v = normal(generator);
  return out;
}

std::vector<float> Decoded(const EncodedBucket& encoded) {
  std::vector<float> out(encoded.numel, 0.0f);
  EXPECT_TRUE(AddDecoded(encoded, absl::MakeSpan(out)).ok());
  return out;
}

TEST(CompressionSpecTest, ParsesEveryFormAndRoundTrips) {
  for (const char* text :
       {"none", "fp16", "bf16", "topk:0.01", "randomk:0.5", "onebit",
        "topk:1"}) {
    absl::StatusOr<CompressionSpec> spec = CompressionSpec::Parse(text);
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    absl::StatusOr<CompressionSpec> again =
        CompressionSpec::Parse(spec->ToString());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *spec) << text;
  }
  EXPECT_EQ(CompressionSpec::Parse("topk:0.01")->ratio, 0.01);
  // Printed as typed, for logs and manifests.
  EXPECT_EQ(CompressionSpec::Parse("topk:0.05")->ToString(), "topk:0.05");
  EXPECT_EQ(CompressionSpec::Parse("randomk:0.001")->ToString(),
            "randomk:0.001");
}

TEST(CompressionSpecTest, RefusesBadInputWithOneClearError) {
  for (const char* text : {"topk:0", "topk:2", "topk:-0.1", "topk", "topk:x",
                           "zip", "fp16:0.5", "", "randomk:0.1:2"}) {
    absl::StatusOr<CompressionSpec> spec = CompressionSpec::Parse(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr("--compression="));
    EXPECT_THAT(spec.status().message(), HasSubstr("topk:RATIO"));
  }
}

TEST(CompressionSpecTest, KeptElementsIsAtLeastOneAndAtMostAll) {
  CompressionSpec spec = *CompressionSpec::Parse("topk:0.01");
  EXPECT_EQ(spec.KeptElements(1000), 10);
  EXPECT_EQ(spec.KeptElements(10), 1);
  EXPECT_EQ(CompressionSpec::Parse("fp16")->KeptElements(10), 10);
  EXPECT_TRUE(spec.UsesErrorFeedback());
  EXPECT_FALSE(CompressionSpec::Parse("bf16")->UsesErrorFeedback());
}

TEST(HalfTest, ExactValuesRoundTripAndRoundingIsToNearestEven) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f,
                  5.9604645e-08f /* smallest subnormal */}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to 1 + 2^-9.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(70000.0f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(1e-10f)), 0.0f);
  // Every binary16 value converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << h;
  }
}

TEST(HalfTest, RelativeErrorIsWithinHalfAnUlp) {
  for (float v : RandomFloats(10000, 1)) {
    EXPECT_NEAR(HalfToFloat(FloatToHalf(v)), v, std::fabs(v) * 0x1p-11f + 0x1p-25f);
    EXPECT_NEAR(Bfloat16ToFloat(FloatToBfloat16(v)), v, std::fabs(v) * 0x1p-8f);
  }
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(3.0f)), 3.0f);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
}

TEST(CompressorTest, NoneIsTheIdentity) {
  std::vector<float> g = RandomFloats(100, 2);
  Compressor compressor(CompressionSpec(), 0);
  EncodedBucket encoded;
  ASSERT_TRUE(compressor.Encode(g, {}, 0, 0, &encoded).ok());
  EXPECT_EQ(encoded.encoding, Encoding::kFloat32);
  EXPECT_EQ(Decoded(encoded), g);
}

TEST(CompressorTest, TopKKeepsTheLargestAndFeedsTheRestBack) {
  std::vector<float> g = {0.1f, -5.0f, 0.2f, 3.0f, -0.3f, 0.0f};
  std::vector<float> residual(g.size(), 0.0f);
  Compressor compressor(*CompressionSpec::Parse("topk:0.34"), 0);  // k = 2
  EncodedBucket encoded;
  ASSERT_TRUE(compressor.Encode(g, absl::MakeSpan(residual), 0, 0, &encoded).ok());
  EXPECT_EQ(encoded.encoding, Encoding::kSparse);
  EXPECT_THAT(encoded.index, ElementsAre(1, 3));
  EXPECT_THAT(encoded.values, ElementsAre(-5.0f, 3.0f));
  EXPECT_THAT(residual, ElementsAre(0.1f, 0.0f, 0.2f, 0.0f, -0.3f, 0.0f));
  // Next step, a zero gradient: the residual's largest two go out.
  std::vector<float> zero(g.size(), 0.0f);
  ASSERT_TRUE(compressor.Encode(zero, absl::MakeSpan(residual), 1, 0, &encoded).ok());
  EXPECT_THAT(encoded.index, ElementsAre(2, 4));
  EXPECT_THAT(residual, ElementsAre(0.1f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f));
}

// With error feedback nothing is lost: sent + residual == sum of gradients.
TEST(CompressorTest, ErrorFeedbackConservesTheGradientSum) {
  for (const char* method : {"topk:0.05", "randomk:0.05", "onebit"}) {
    const int64_t n = 1000;
    std::vector<float> residual(n, 0.0f), sent(n, 0.0f), total(n, 0.0f);
    Compressor compressor(*CompressionSpec::Parse(method), 7);
    for (int step = 0; step < 20; ++step) {
      std::vector<float> g = RandomFloats(n, 100 + step);
      for (int64_t i = 0; i < n; ++i) total[i] += g[i];
      EncodedBucket encoded;
      ASSERT_TRUE(
          compressor.Encode(g, absl::MakeSpan(residual), step, 3, &encoded).ok());
      ASSERT_TRUE(AddDecoded(encoded, absl::MakeSpan(sent)).ok());
    }
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(sent[i] + residual[i], total[i], 1e-3) << method << " " << i;
    }
  }
}

TEST(CompressorTest, RandomKIsSharedAcrossWorkersWithOneSeed) {
  std::vector<uint32_t> a = RandomKIndices(100000, 1000, 42, 5, 2);
  EXPECT_EQ(a, RandomKIndices(100000, 1000, 42, 5, 2));
  EXPECT_NE(a, RandomKIndices(100000, 1000, 42, 6, 2));
  EXPECT_NE(a, RandomKIndices(100000, 1000, 42, 5, 3));
  EXPECT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), 1000u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_LT(a.back(), 100000u);
  std::vector<uint32_t> dense = RandomKIndices(10, 8, 1, 0, 0);
  EXPECT_EQ(std::set<uint32_t>(dense.begin(), dense.end()).size(), 8u);
}

TEST(CompressorTest, OneBitDecodesToEachSignsMeanMagnitude) {
  std::vector<float> g = {1.0f, 3.0f, -2.0f, -4.0f, 0.0f};
  std::vector<float> residual(g.size(), 0.0f);
  Compressor compressor(*CompressionSpec::Parse("onebit"), 0);
  EncodedBucket encoded;
  ASSERT_TRUE(compressor.Encode(g, absl::MakeSpan(residual), 0, 0, &encoded).ok());
  EXPECT_FLOAT_EQ(encoded.positive_scale, 4.0f / 3.0f);
  EXPECT_FLOAT_EQ(encoded.negative_scale, 3.0f);
  EXPECT_THAT(Decoded(encoded),
              ElementsAre(4.0f / 3, 4.0f / 3, -3.0f, -3.0f, 4.0f / 3));
}

// TopKOf keeps what ordering by (magnitude descending, index ascending)
// keeps, ties included: checked against that ordering on data with many
// ties (few distinct magnitudes, both signs, zeros).
TEST(CompressorTest, TopKMatchesTheOrderingWithTies) {
  std::mt19937 random(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(random() % 300);
    std::vector<float> dense(n);
    for (float& value : dense) {
      value = static_cast<float>(static_cast<int>(random() % 7) - 3) * 0.5f;
    }
    const int64_t k = static_cast<int64_t>(random() % (n + 1));
    std::vector<uint32_t> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const float ma = std::fabs(dense[a]), mb = std::fabs(dense[b]);
      return ma > mb || (ma == mb && a < b);
    });
    order.resize(k);
    std::sort(order.begin(), order.end());
    const EncodedBucket top = TopKOf(dense, k);
    EXPECT_EQ(top.index, order) << "trial " << trial;
    for (size_t j = 0; j < top.index.size(); ++j) {
      EXPECT_EQ(top.values[j], dense[top.index[j]]);
    }
  }
}

TEST(CompressorTest, ResidualOfTheWrongSizeIsAnError) {
  Compressor compressor(*CompressionSpec::Parse("topk:0.5"), 0);
  std::vector<float> g(10, 1.0f), residual(9, 0.0f);
  EncodedBucket encoded;
  EXPECT_FALSE(compressor.Encode(g, absl::MakeSpan(residual), 0, 4, &encoded).ok());
}

// TopKOf against the definition: sort by (magnitude descending, index
// ascending), keep k, return ascending; with many ties, for every k.
TEST(TopKTest, MatchesTheDefinitionWithTies) {
  std::vector<float> dense(300);
  for (size_t i = 0; i < dense.size(); ++i) {
    dense[i] = static_cast<float>(static_cast<int>((i * 37) % 11) - 5);
  }
  std::vector<uint32_t> order(dense.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const float ma = std::fabs(dense[a]), mb = std::fabs(dense[b]);
    return ma > mb || (ma == mb && a < b);
  });
  for (int64_t k : {1, 2, 27, 28, 150, 299, 300}) {
    std::vector<uint32_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());
    const EncodedBucket got = TopKOf(dense, k);
    EXPECT_EQ(got.index, want) << "k = " << k;
    for (size_t j = 0; j < got.index.size(); ++j) {
      EXPECT_EQ(got.values[j], dense[got.index[j]]);
    }
  }
}

TEST(SparseRowsTest, KeepsExactlyTheTouchedRows) {
  std::vector<float> table = {0, 0, 1, 2, 0, 0, 0, 3};  // 4 rows of 2
  EncodedBucket rows = SparseRowsOf(table, 2);
  EXPECT_THAT(rows.index, ElementsAre(1, 3));
  EXPECT_THAT(rows.values, ElementsAre(1, 2, 0, 3));
  EXPECT_EQ(Decoded(rows), table);
  EXPECT_THAT(TopKOf(table, 2).index, ElementsAre(3, 7));
}

TEST(SerializationTest, EveryEncodingRoundTripsAndCountsItsBytes) {
  std::vector<float> g = RandomFloats(300, 3);
  for (const char* method :
       {"none", "fp16", "bf16", "topk:0.1", "randomk:0.1", "onebit"}) {
    std::vector<float> residual(g.size(), 0.0f);
    Compressor compressor(*CompressionSpec::Parse(method), 1);
    EncodedBucket encoded;
    ASSERT_TRUE(compressor.Encode(g, absl::MakeSpan(residual), 0, 0, &encoded).ok());
    std::string bytes;
    AppendSerialized(encoded, &bytes);
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), SerializedBytes(encoded));
    absl::StatusOr<EncodedBucket> parsed = ParseEncodedBucket(bytes);
    ASSERT_TRUE(parsed.ok()) << method << ": " << parsed.status();
    EXPECT_EQ(Decoded(*parsed), Decoded(encoded)) << method;
  }
  std::string bytes;
  AppendSerialized(SparseRowsOf(std::vector<float>{0, 0, 1, 2}, 2), &bytes);
  EXPECT_EQ(Decoded(*ParseEncodedBucket(bytes)),
            (std::vector<float>{0, 0, 1, 2}));
}

TEST(SerializationTest, RefusesWhatAPeerCouldGetWrong) {
  EncodedBucket sparse = TopKOf(RandomFloats(50, 4), 5);
  std::string bytes;
  AppendSerialized(sparse, &bytes);
  // Truncated anywhere, or with a byte too many.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(ParseEncodedBucket(bytes.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(ParseEncodedBucket(bytes + "x").ok());
  // Indices out of order.
  EncodedBucket swapped = sparse;
  std::swap(swapped.index[0], swapped.index[1]);
  std::string swapped_bytes;
  AppendSerialized(swapped, &swapped_bytes);
  absl::StatusOr<EncodedBucket> parsed = ParseEncodedBucket(swapped_bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("out of order or range"));
  // An unknown encoding.
  std::string unknown = bytes;
  unknown[0] = 9;
  EXPECT_THAT(ParseEncodedBucket(unknown).status().message(),
              HasSubstr("unknown encoding 9"));
  // Decoding into a buffer of another length.
  std::vector<float> wrong(49);
  EXPECT_FALSE(AddDecoded(sparse, absl::MakeSpan(wrong)).ok());
}

}  // namespace
}  // namespace gradsync
