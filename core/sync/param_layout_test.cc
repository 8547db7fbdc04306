// Tests of the flat parameter layout and its reverse-order buckets.
#include "core/sync/param_layout.h"

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

// GoogleTest only (no gmock library in //third_party): a vector literal
// stands in for ElementsAre and a find for HasSubstr.
using Indices = std::vector<int>;

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// a [10×4] = 160 B, b [10] = 40 B, c [5×10] = 200 B, d [5] = 20 B.
std::vector<ParamSpec> FourParams() {
  return {{"a", {10, 4}}, {"b", {10}}, {"c", {5, 10}}, {"d", {5}}};
}

ParamLayout MustCreate(std::vector<ParamSpec> specs, int64_t bucket_bytes) {
  auto layout = ParamLayout::Create(std::move(specs), bucket_bytes);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

TEST(ParamLayoutTest, OffsetsFollowForwardOrder) {
  const ParamLayout layout = MustCreate(FourParams(), 0);
  ASSERT_EQ(layout.params().size(), 4u);
  EXPECT_EQ(layout.params()[0].offset, 0);
  EXPECT_EQ(layout.params()[1].offset, 40);
  EXPECT_EQ(layout.params()[2].offset, 50);
  EXPECT_EQ(layout.params()[3].offset, 100);
  EXPECT_EQ(layout.params()[2].numel, 50);
  EXPECT_EQ(layout.params()[2].spec.name, "c");
  EXPECT_EQ(layout.total_numel(), 105);
  EXPECT_EQ(layout.total_bytes(), 420);
}

TEST(ParamLayoutTest, NonPositiveCapGivesOneBucketInReverseOrder) {
  for (int64_t cap : {0, -1}) {
    const ParamLayout layout = MustCreate(FourParams(), cap);
    ASSERT_EQ(layout.buckets().size(), 1u);
    const Bucket& bucket = layout.buckets()[0];
    EXPECT_EQ(bucket.offset, 0);
    EXPECT_EQ(bucket.numel, 105);
    EXPECT_EQ(bucket.params, Indices({3, 2, 1, 0}));
    for (const ParamInfo& info : layout.params()) EXPECT_EQ(info.bucket, 0);
  }
}

TEST(ParamLayoutTest, BucketsFillFromTheLastParameterUpToTheCap) {
  // d + c = 220 B fits in 240; adding b would make 260, so b starts bucket 1.
  const ParamLayout layout = MustCreate(FourParams(), 240);
  ASSERT_EQ(layout.buckets().size(), 2u);
  EXPECT_EQ(layout.buckets()[0].params, Indices({3, 2}));
  EXPECT_EQ(layout.buckets()[0].offset, 50);
  EXPECT_EQ(layout.buckets()[0].numel, 55);
  EXPECT_EQ(layout.buckets()[1].params, Indices({1, 0}));
  EXPECT_EQ(layout.buckets()[1].offset, 0);
  EXPECT_EQ(layout.buckets()[1].numel, 50);
  EXPECT_EQ(layout.params()[0].bucket, 1);
  EXPECT_EQ(layout.params()[3].bucket, 0);
}

TEST(ParamLayoutTest, CapIsInclusive) {
  // d + c is exactly 220 B: still one bucket.
  const ParamLayout layout = MustCreate(FourParams(), 220);
  EXPECT_EQ(layout.buckets()[0].params, Indices({3, 2}));
}

TEST(ParamLayoutTest, OversizeParametersGetBucketsOfTheirOwn) {
  // 100 B cap: c (200 B) and a (160 B) exceed it and stand alone.
  const ParamLayout layout = MustCreate(FourParams(), 100);
  ASSERT_EQ(layout.buckets().size(), 4u);
  EXPECT_EQ(layout.buckets()[0].params, Indices({3}));
  EXPECT_EQ(layout.buckets()[1].params, Indices({2}));
  EXPECT_EQ(layout.buckets()[2].params, Indices({1}));
  EXPECT_EQ(layout.buckets()[3].params, Indices({0}));
  EXPECT_EQ(layout.buckets()[1].numel, 50);
  // A cap smaller than any parameter (even under one float) still splits.
  EXPECT_EQ(MustCreate(FourParams(), 1).buckets().size(), 4u);
}

TEST(ParamLayoutTest, RowSparseParametersGetBucketsOfTheirOwn) {
  // An embedding table [100x8] between dense tensors, one bucket for all.
  std::vector<ParamSpec> specs = {
      {"embedding", {100, 8}, 8}, {"fc.weight", {4, 8}}, {"fc.bias", {4}}};
  specs.insert(specs.begin(), ParamSpec{"first", {3}});
  const ParamLayout layout = MustCreate(specs, 0);
  ASSERT_EQ(layout.buckets().size(), 3u);
  EXPECT_EQ(layout.buckets()[0].params, Indices({3, 2}));
  EXPECT_EQ(layout.buckets()[0].sparse_row_width, 0);
  EXPECT_EQ(layout.buckets()[1].params, Indices({1}));
  EXPECT_EQ(layout.buckets()[1].sparse_row_width, 8);
  EXPECT_EQ(layout.buckets()[2].params, Indices({0}));
  EXPECT_EQ(layout.buckets()[2].sparse_row_width, 0);
  EXPECT_TRUE(Contains(layout.Describe(), "row-sparse (rows of 8)"));
  // The table first in forward order (last to become final) is closed by
  // the loop's end.
  EXPECT_EQ(MustCreate({{"embedding", {10, 2}, 2}, {"w", {2}}}, 0)
                .buckets()
                .back()
                .sparse_row_width,
            2);
  // A row length that does not divide the tensor is refused.
  EXPECT_FALSE(ParamLayout::Create({{"bad", {10, 3}, 4}}, 0).ok());
}

TEST(ParamLayoutTest, SliceKeepsWholeBucketsWithOffsetsFromItsStart) {
  // The embedding table first, as --sync=hybrid splits it off.
  const ParamLayout layout = MustCreate(
      {{"embedding", {100, 8}, 8}, {"fc.weight", {4, 8}}, {"fc.bias", {4}}}, 0);
  ASSERT_EQ(layout.buckets().size(), 2u);
  const absl::StatusOr<ParamLayout> table = layout.Slice(0, 1);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->total_numel(), 800);
  ASSERT_EQ(table->buckets().size(), 1u);
  EXPECT_EQ(table->buckets()[0].index, 0);
  EXPECT_EQ(table->buckets()[0].sparse_row_width, 8);
  EXPECT_EQ(table->params()[0].bucket, 0);
  const absl::StatusOr<ParamLayout> head = layout.Slice(1, 3);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->total_numel(), 36);
  EXPECT_EQ(head->params()[0].offset, 0);
  EXPECT_EQ(head->params()[1].offset, 32);
  ASSERT_EQ(head->buckets().size(), 1u);
  EXPECT_EQ(head->buckets()[0].offset, 0);
  EXPECT_EQ(head->buckets()[0].params, Indices({1, 0}));
  // A bucket cut in two, and empty or outside ranges, are refused.
  EXPECT_FALSE(layout.Slice(1, 2).ok());
  EXPECT_FALSE(layout.Slice(1, 1).ok());
  EXPECT_FALSE(layout.Slice(0, 4).ok());
}

// The invariants every strategy relies on, over a range of caps.
TEST(ParamLayoutTest, BucketsTileTheBufferContiguouslyFromTheEnd) {
  std::vector<ParamSpec> specs;
  for (int i = 0; i < 9; ++i) {
    specs.push_back({"p" + std::to_string(i), {1 + (i * 37) % 23, 1 + i % 4}});
  }
  for (int64_t cap = 4; cap <= 600; cap += 12) {
    SCOPED_TRACE(cap);
    const ParamLayout layout = MustCreate(specs, cap);
    int64_t end = layout.total_numel();
    int next_param = static_cast<int>(layout.params().size()) - 1;
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const Bucket& bucket = layout.buckets()[b];
      EXPECT_EQ(bucket.index, static_cast<int>(b));
      EXPECT_EQ(bucket.offset + bucket.numel,
                end);  // ends where the last began
      ASSERT_FALSE(bucket.params.empty());
      if (bucket.params.size() > 1) {
        EXPECT_LE(bucket.numel * 4, cap);
      }
      int64_t span_end = end;
      for (int p : bucket.params) {
        EXPECT_EQ(p, next_param--);  // consecutive, in reverse
        const ParamInfo& info = layout.params()[p];
        EXPECT_EQ(info.bucket, static_cast<int>(b));
        EXPECT_EQ(info.offset + info.numel, span_end);
        span_end = info.offset;
      }
      EXPECT_EQ(span_end, bucket.offset);
      end = bucket.offset;
    }
    EXPECT_EQ(end, 0);
    EXPECT_EQ(next_param, -1);
  }
}

TEST(ParamLayoutTest, ScalarShapeHasOneElement) {
  const ParamLayout layout = MustCreate({{"w", {3, 2}}, {"scale", {}}}, 0);
  EXPECT_EQ(layout.params()[1].numel, 1);
  EXPECT_EQ(layout.total_numel(), 7);
}

TEST(ParamLayoutTest, DescribeListsBucketsWithSizesAndNames) {
  const ParamLayout small = MustCreate(FourParams(), 240);
  EXPECT_EQ(small.Describe(),
            "bucket 0: 2 params, 220 B [d c]\n"
            "bucket 1: 2 params, 200 B [b a]");
  const ParamLayout mlp =
      MustCreate({{"fc3.weight", {10, 256}}, {"fc3.bias", {10}}}, 0);
  EXPECT_EQ(mlp.Describe(),
            "bucket 0: 2 params, 10.0 KiB [fc3.bias fc3.weight]");
  const ParamLayout big = MustCreate({{"w", {512, 1024}}}, 0);
  EXPECT_EQ(big.Describe(), "bucket 0: 1 param, 2.0 MiB [w]");
}

TEST(ParamLayoutTest, Errors) {
  auto empty = ParamLayout::Create({}, 0);
  EXPECT_FALSE(empty.ok());

  auto unnamed = ParamLayout::Create({{"a", {2}}, {"", {3}}}, 0);
  ASSERT_FALSE(unnamed.ok());
  EXPECT_TRUE(Contains(unnamed.status().message(), "parameter 1"))
      << unnamed.status().message();

  auto duplicate = ParamLayout::Create({{"a", {2}}, {"a", {3}}}, 0);
  ASSERT_FALSE(duplicate.ok());
  EXPECT_TRUE(Contains(duplicate.status().message(), "duplicate"))
      << duplicate.status().message();

  auto zero = ParamLayout::Create({{"a", {2}}, {"fc2.weight", {4, 0}}}, 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Contains(zero.status().message(), "'fc2.weight'"))
      << zero.status().message();
  EXPECT_TRUE(Contains(zero.status().message(), "[4x0]"))
      << zero.status().message();

  EXPECT_FALSE(ParamLayout::Create({{"a", {-3}}}, 0).ok());
  EXPECT_FALSE(
      ParamLayout::Create({{"huge", {int64_t{1} << 30, int64_t{1} << 30}}}, 0)
          .ok());
}

}  // namespace
}  // namespace gradsync
