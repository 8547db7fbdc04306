// The per-key encoding rules: --ps_pull's resolution and refusals, the cut
// of a bucket's encoding into keys, results and their decoding.
#include "ps/key_compression.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

CompressionSpec Spec(const char* text) { return *CompressionSpec::Parse(text); }

TEST(KeyEncodingTest, AutoPullFollowsTheMethod) {
  EXPECT_EQ(*ResolvePsPull(PsPull::kAuto, Spec("topk:0.01"), ps::UPDATE_WORKER),
            PsPull::kUnion);
  EXPECT_EQ(*ResolvePsPull(PsPull::kAuto, Spec("randomk:0.1"), ps::UPDATE_WORKER),
            PsPull::kUnion);
  EXPECT_EQ(*ResolvePsPull(PsPull::kAuto, Spec("fp16"), ps::UPDATE_WORKER),
            PsPull::kSame);
  EXPECT_EQ(*ResolvePsPull(PsPull::kAuto, Spec("onebit"), ps::UPDATE_WORKER),
            PsPull::kDense);
  EXPECT_EQ(*ResolvePsPull(PsPull::kAuto, Spec("none"), ps::UPDATE_WORKER),
            PsPull::kDense);
  EXPECT_EQ(*ResolvePsPull(PsPull::kAuto, Spec("topk:0.01"), ps::UPDATE_SERVER),
            PsPull::kDense);
}

TEST(KeyEncodingTest, RefusesPullsThatCannotWork) {
  absl::StatusOr<PsPull> none =
      ResolvePsPull(PsPull::kTopK, Spec("none"), ps::UPDATE_WORKER);
  EXPECT_THAT(none.status().message(), HasSubstr("--ps_pull=topk"));
  EXPECT_THAT(none.status().message(), HasSubstr("--compression=topk:RATIO"));
  absl::StatusOr<PsPull> server =
      ResolvePsPull(PsPull::kTopK, Spec("topk:0.01"), ps::UPDATE_SERVER);
  EXPECT_THAT(server.status().message(), HasSubstr("--ps_update=server"));
  EXPECT_FALSE(
      ResolvePsPull(PsPull::kUnion, Spec("fp16"), ps::UPDATE_WORKER).ok());
  EXPECT_FALSE(ParsePsPull("sparse").ok());
}

// Cutting a bucket's encoding at its keys and decoding each key gives the
// bucket's decoding, for every method.
TEST(KeyEncodingTest, SplitKeysDecodeToTheBucket) {
  std::vector<float> gradient(300);
  for (size_t i = 0; i < gradient.size(); ++i) {
    gradient[i] = ((i * 37) % 11 == 0 ? 0.0f : 1.0f) *
                  (static_cast<float>((i * 7919) % 101) - 50.0f) / 8.0f;
  }
  const std::vector<KeyRange> keys = {{0, 120}, {120, 60}, {180, 120}};
  for (const char* method : {"none", "fp16", "bf16", "topk:0.05",
                             "randomk:0.1", "onebit"}) {
    SCOPED_TRACE(method);
    Compressor compressor(Spec(method), 7);
    std::vector<float> residual(gradient.size(), 0.0f);
    EncodedBucket encoded;
    ASSERT_TRUE(compressor.Encode(gradient, absl::MakeSpan(residual), 3, 1,
                                  &encoded).ok());
    std::vector<float> expected(gradient.size(), 0.0f);
    ASSERT_TRUE(AddDecoded(encoded, absl::MakeSpan(expected)).ok());
    absl::StatusOr<std::vector<std::string>> pieces =
        SplitIntoKeys(encoded, keys);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    std::vector<float> decoded(gradient.size(), -1.0f);
    for (size_t k = 0; k < keys.size(); ++k) {
      ASSERT_TRUE(DecodeKeyResult((*pieces)[k],
                                  absl::MakeSpan(decoded.data() + keys[k].offset,
                                                 keys[k].numel))
                      .ok());
    }
    EXPECT_EQ(decoded, expected);
  }
}

TEST(KeyEncodingTest, RowSparseKeysSplitOnRows) {
  std::vector<float> table(4 * 10, 0.0f);
  for (int j = 0; j < 4; ++j) {
    table[3 * 4 + j] = 1.0f + j;
    table[8 * 4 + j] = -2.0f;
  }
  const EncodedBucket rows = SparseRowsOf(table, 4);
  absl::StatusOr<std::vector<std::string>> pieces =
      SplitIntoKeys(rows, {{0, 20}, {20, 20}});
  ASSERT_TRUE(pieces.ok());
  absl::StatusOr<EncodedBucket> second = ParseEncodedBucket((*pieces)[1]);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->index, std::vector<uint32_t>({3}));  // row 8 of the table
  EXPECT_FALSE(SplitIntoKeys(rows, {{0, 18}, {18, 22}}).ok());
}

TEST(KeyEncodingTest, UnionIsExactAndDenseWhenSmaller) {
  KeyEncoding encoding = KeyEncodingOf(Spec("topk:0.1"), PsPull::kUnion,
                                       ps::UPDATE_WORKER, 0, 100);
  ASSERT_TRUE(encoding.encoded_push);
  std::vector<float> sparse(100, 0.0f);
  sparse[5] = 0.1f;
  sparse[77] = -3.0f;
  const std::string few = EncodeKeyResult(sparse, encoding);
  EXPECT_LT(few.size(), 100u);
  std::vector<float> decoded(100, 9.0f);
  ASSERT_TRUE(DecodeKeyResult(few, absl::MakeSpan(decoded)).ok());
  EXPECT_EQ(decoded, sparse);
  std::vector<float> full(100, 0.5f);
  const std::string dense = EncodeKeyResult(full, encoding);
  EXPECT_EQ(dense.size(), 9u + 4 * 100);  // float32: smaller than 100 pairs
  ASSERT_TRUE(DecodeKeyResult(dense, absl::MakeSpan(decoded)).ok());
  EXPECT_EQ(decoded, full);
}

TEST(KeyEncodingTest, PushChecksNameWhatIsWrong) {
  const KeyEncoding topk = KeyEncodingOf(Spec("topk:0.1"), PsPull::kUnion,
                                         ps::UPDATE_WORKER, 0, 10);
  EncodedBucket half;
  half.encoding = Encoding::kFp16;
  half.numel = 10;
  half.halves.assign(10, 0);
  std::string bytes;
  AppendSerialized(half, &bytes);
  EXPECT_THAT(ParseKeyPush(bytes, topk, 10).status().message(),
              HasSubstr("encoded as fp16"));
  EncodedBucket pairs = TopKOf(std::vector<float>(10, 1.0f), 2);
  bytes.clear();
  AppendSerialized(pairs, &bytes);
  EXPECT_TRUE(ParseKeyPush(bytes, topk, 10).ok());
  EXPECT_THAT(ParseKeyPush(bytes, topk, 12).status().message(),
              HasSubstr("of 10 floats but the key has 12"));
}

}  // namespace
}  // namespace gradsync
