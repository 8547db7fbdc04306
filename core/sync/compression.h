// Gradient compression per bucket (--compression=none|fp16|bf16|topk:R|
// randomk:R|onebit), shared by every strategy: the worker encodes a bucket
// after it is ready, the strategy moves the encoding (ring frames, PS
// messages), and whoever sums decodes into float32.
//
// The biased methods (top-k, random-k, onebit) keep an error-feedback
// residual per bucket and per worker (EF-SGD, Karimireddy et al. 2019): the
// worker compresses e = gradient + residual and keeps residual = e - D(C(e)),
// so what one step drops is sent in a later one. fp16/bf16 round to nearest
// even and keep no residual (their error is the rounding). `none` is the
// identity: a strategy that sees it moves float32 exactly as before.
//
// Encodings are plain structs so the ring's frames and the PS's protobuf
// messages can each carry them; Serialize/ParseEncodedBucket give the one
// byte format the ring and the fuzzers use. Parsing validates everything a
// peer could get wrong (sizes, index order and range) and never trusts a
// length before checking it against the bytes that are there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gradsync {

enum class CompressionMethod { kNone, kFp16, kBf16, kTopK, kRandomK, kOneBit };

struct CompressionSpec {
  CompressionMethod method = CompressionMethod::kNone;
  // top-k / random-k: the fraction of a bucket's floats kept, in (0, 1];
  // k = max(1, round(ratio * numel)). 1.0 for the other methods.
  double ratio = 1.0;

  // "none", "fp16", "bf16", "topk:0.01", "randomk:0.01", "onebit"; a ratio
  // of 1 keeps everything and is "none" (float32, bit-identical to it).
  // InvalidArgument naming the text and listing the accepted forms for an
  // unknown method, a ratio outside (0, 1], or a ratio on a method without
  // one.
  static absl::StatusOr<CompressionSpec> Parse(absl::string_view text);
  std::string ToString() const;  // Parse(ToString()) == *this

  // Top-k, random-k and onebit: error feedback keeps a residual.
  bool UsesErrorFeedback() const;
  // The floats kept of a bucket of `numel` (top-k, random-k); numel otherwise.
  int64_t KeptElements(int64_t numel) const;
  bool operator==(const CompressionSpec& other) const {
    return method == other.method && ratio == other.ratio;
  }
};

// How a bucket travels. kFloat32 is the uncompressed bucket.
enum class Encoding : uint8_t {
  kFloat32 = 0,
  kFp16 = 1,
  kBf16 = 2,
  // (index, values) pairs: `index` holds ascending row numbers below
  // numel / row_width, `values` row_width floats per index. Top-k and
  // random-k use row_width 1; an embedding table's touched rows use its
  // row length.
  kSparse = 3,
  // Scaled sign: bit i of `signs` is set when element i is >= 0, which
  // decodes to +positive_scale, otherwise to -negative_scale (the means of
  // the magnitudes of each sign's elements, 1-bit SGD's two levels).
  kOneBit = 4,
};

struct EncodedBucket {
  Encoding encoding = Encoding::kFloat32;
  int64_t numel = 0;               // the dense bucket's length in floats
  int32_t row_width = 1;           // kSparse only
  std::vector<float> values;       // kFloat32: numel; kSparse: rows * width
  std::vector<uint16_t> halves;    // kFp16 / kBf16: numel
  std::vector<uint32_t> index;     // kSparse: ascending rows
  std::vector<uint64_t> signs;     // kOneBit: ceil(numel / 64) words
  float positive_scale = 0.0f;     // kOneBit
  float negative_scale = 0.0f;     // kOneBit
};

// IEEE binary16 and bfloat16, round to nearest even; NaN stays NaN,
// overflow becomes infinity.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);
uint16_t FloatToBfloat16(float value);
float Bfloat16ToFloat(uint16_t bits);

// Encodes one bucket. `residual` is this worker's error-feedback state for
// the bucket (numel floats, zero at the start of training); it is read and
// updated only when spec.UsesErrorFeedback(), and may be empty otherwise.
// Random-k draws its indices from (seed, step, bucket) alone, so workers that
// share a seed pick the same indices: a strategy may then sum the values
// with a dense all-reduce of k floats instead of gathering pairs.
class Compressor {
 public:
  Compressor(CompressionSpec spec, uint64_t seed) : spec_(spec), seed_(seed) {}
  const CompressionSpec& spec() const { return spec_; }

  absl::Status Encode(absl::Span<const float> gradient,
                      absl::Span<float> residual, int64_t step, int bucket,
                      EncodedBucket* out) const;

 private:
  CompressionSpec spec_;
  uint64_t seed_;
};

// The random-k indices Compressor::Encode uses: k distinct ascending indices
// below numel, a function of its arguments only.
std::vector<uint32_t> RandomKIndices(int64_t numel, int64_t k, uint64_t seed,
                                     int64_t step, int bucket);

// dst[i] += decoded[i] for every element of the encoding. InvalidArgument
// when dst.size() != encoded.numel or the encoding is inconsistent.
absl::Status AddDecoded(const EncodedBucket& encoded, absl::Span<float> dst);

// The exact sparse form of `dense` at row granularity: every row of
// `row_width` floats with a non-zero element (lossless; an embedding table's
// gradient touches few rows). dense.size() must be a multiple of row_width.
EncodedBucket SparseRowsOf(absl::Span<const float> dense, int32_t row_width);

// The k largest-magnitude elements of `dense` as a kSparse encoding
// (row_width 1, ties broken by lower index), e.g. gTop-k of a summed bucket.
EncodedBucket TopKOf(absl::Span<const float> dense, int64_t k);

// The one byte format of an encoding (little-endian): encoding (u8),
// numel (i64), then per encoding: kFloat32 numel floats; kFp16/kBf16 numel
// u16; kSparse row_width (i32), rows (i64), rows u32 indices, rows*width
// floats; kOneBit the two scales (f32) and ceil(numel/64) u64 words.
void AppendSerialized(const EncodedBucket& encoded, std::string* out);
// Bytes AppendSerialized writes: what the wire carries for this bucket.
int64_t SerializedBytes(const EncodedBucket& encoded);
// Parses exactly `bytes` (nothing left over). InvalidArgument saying what is
// wrong (unknown encoding, truncated, indices out of order or range, a
// length that disagrees with numel) for anything AppendSerialized would not
// have written.
absl::StatusOr<EncodedBucket> ParseEncodedBucket(absl::string_view bytes);

}  // namespace gradsync
