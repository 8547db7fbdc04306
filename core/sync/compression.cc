// Per-bucket gradient compression: the codecs, error feedback and the byte
// format (compression.h).
#include "core/sync/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace gradsync {
namespace {

constexpr char kAcceptedForms[] =
    "none, fp16, bf16, topk:RATIO, randomk:RATIO or onebit, with RATIO in "
    "(0, 1], e.g. topk:0.01";

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

int64_t OneBitWords(int64_t numel) { return (numel + 63) / 64; }

// A little-endian reader that checks every length against what is left.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool Read(T* value) {
    if (bytes_.size() < sizeof(T)) return false;
    std::memcpy(value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return true;
  }
  template <typename T>
  bool ReadArray(int64_t count, std::vector<T>* values) {
    if (count < 0 ||
        static_cast<uint64_t>(count) > bytes_.size() / sizeof(T)) {
      return false;
    }
    values->resize(count);
    // memcpy's pointers must not be null even for 0 bytes, and an empty
    // vector's data() may be.
    if (count > 0) {
      std::memcpy(values->data(), bytes_.data(), count * sizeof(T));
    }
    bytes_.remove_prefix(count * sizeof(T));
    return true;
  }
  size_t left() const { return bytes_.size(); }

 private:
  absl::string_view bytes_;
};

template <typename T>
void Append(const T& value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
void AppendArray(const std::vector<T>& values, std::string* out) {
  if (values.empty()) return;
  out->append(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(T));
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("compressed bucket: ", what,
                   "; the peer that sent it runs another build or is "
                   "corrupting its messages"));
}

// The k largest magnitudes, ties to the lower index, returned ascending.
// The k-th largest magnitude t is found among the magnitudes themselves (a
// selection over contiguous floats, cheaper than one over indices that
// compare through the data); then one ascending scan keeps
// every element above t and, of those equal to t, the lowest indices until
// there are k: exactly the set an ordering by (magnitude descending, index
// ascending) would keep. NaN magnitudes order above everything, as the
// ordering would have them never compare.
std::vector<uint32_t> TopKIndices(absl::Span<const float> dense, int64_t k) {
  const int64_t n = static_cast<int64_t>(dense.size());
  std::vector<uint32_t> index;
  if (k >= n) {
    index.resize(n);
    std::iota(index.begin(), index.end(), 0u);
    return index;
  }
  if (k <= 0) return index;
  bool any_nan = false;
  std::vector<float> magnitudes(n);
  for (int64_t i = 0; i < n; ++i) {
    magnitudes[i] = std::fabs(dense[i]);
    any_nan |= std::isnan(magnitudes[i]);
  }
  if (any_nan) {
    // A diverged gradient: keep the general ordering rather than reason
    // about NaN in a selection.
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    auto larger = [&dense](uint32_t a, uint32_t b) {
      const float ma = std::fabs(dense[a]), mb = std::fabs(dense[b]);
      return ma > mb || (ma == mb && a < b);
    };
    std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
    order.resize(k);
    std::sort(order.begin(), order.end());
    return order;
  }
  std::nth_element(magnitudes.begin(), magnitudes.begin() + (k - 1),
                   magnitudes.end(), std::greater<float>());
  const float threshold = magnitudes[k - 1];
  int64_t above = 0;
  for (int64_t i = 0; i < n; ++i) above += std::fabs(dense[i]) > threshold;
  int64_t ties = k - above;  // elements equal to the threshold to keep
  index.reserve(k);
  for (int64_t i = 0; i < n; ++i) {
    const float magnitude = std::fabs(dense[i]);
    if (magnitude > threshold) {
      index.push_back(static_cast<uint32_t>(i));
    } else if (magnitude == threshold && ties > 0) {
      index.push_back(static_cast<uint32_t>(i));
      --ties;
    }
  }
  return index;
}

EncodedBucket GatherSparse(absl::Span<const float> dense,
                           std::vector<uint32_t> index) {
  EncodedBucket out;
  out.encoding = Encoding::kSparse;
  out.numel = static_cast<int64_t>(dense.size());
  out.row_width = 1;
  out.values.reserve(index.size());
  for (uint32_t i : index) out.values.push_back(dense[i]);
  out.index = std::move(index);
  return out;
}

EncodedBucket EncodeOneBit(absl::Span<const float> dense) {
  EncodedBucket out;
  out.encoding = Encoding::kOneBit;
  out.numel = static_cast<int64_t>(dense.size());
  out.signs.assign(OneBitWords(out.numel), 0);
  double positive_sum = 0, negative_sum = 0;
  int64_t positives = 0;
  // A word of 64 signs at a time, without a branch per element.
  for (int64_t word = 0; word < static_cast<int64_t>(out.signs.size());
       ++word) {
    const int64_t first = word * 64;
    const int64_t count = std::min<int64_t>(64, out.numel - first);
    uint64_t bits = 0;
    for (int64_t j = 0; j < count; ++j) {
      const float value = dense[first + j];
      const bool positive = value >= 0.0f;
      bits |= uint64_t{positive} << j;
      // Adding 0.0 leaves a sum unchanged: the same sums as one branch
      // per element, in the same order.
      positive_sum += positive ? value : 0.0;
      negative_sum -= positive ? 0.0 : value;
    }
    out.signs[word] = bits;
    positives += __builtin_popcountll(bits);
  }
  const int64_t negatives = out.numel - positives;
  out.positive_scale =
      positives > 0 ? static_cast<float>(positive_sum / positives) : 0.0f;
  out.negative_scale =
      negatives > 0 ? static_cast<float>(negative_sum / negatives) : 0.0f;
  return out;
}

}  // namespace

absl::StatusOr<CompressionSpec> CompressionSpec::Parse(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  const absl::string_view name = parts[0];
  CompressionSpec spec;
  auto invalid = [&text](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compression=", text, ": ", why, "; use ",
                     kAcceptedForms));
  };
  const bool has_ratio = name == "topk" || name == "randomk";
  if (name == "none") {
    spec.method = CompressionMethod::kNone;
  } else if (name == "fp16") {
    spec.method = CompressionMethod::kFp16;
  } else if (name == "bf16") {
    spec.method = CompressionMethod::kBf16;
  } else if (name == "topk") {
    spec.method = CompressionMethod::kTopK;
  } else if (name == "randomk") {
    spec.method = CompressionMethod::kRandomK;
  } else if (name == "onebit") {
    spec.method = CompressionMethod::kOneBit;
  } else {
    return invalid(absl::StrCat("unknown method '", name, "'"));
  }
  if (!has_ratio) {
    if (parts.size() != 1) return invalid("this method takes no ratio");
    return spec;
  }
  if (parts.size() != 2) return invalid("give the kept fraction as :RATIO");
  double ratio = 0;
  if (!absl::SimpleAtod(parts[1], &ratio) || !(ratio > 0.0 && ratio <= 1.0)) {
    return invalid(absl::StrCat("the ratio '", parts[1],
                                "' is not a number in (0, 1]"));
  }
  // Keeping every float is no compression: the float32 path, bit-identical
  // to --compression=none (the sparse path would sum in another order).
  if (ratio == 1.0) return CompressionSpec();
  spec.ratio = ratio;
  return spec;
}

namespace {

// The shortest decimal that parses back to `ratio` exactly: "0.01", not
// "0.01000000000000000021" (what users typed, in logs and manifests).
std::string ShortestRatio(double ratio) {
  for (int digits = 1; digits < 17; ++digits) {
    const std::string text = absl::StrFormat("%.*g", digits, ratio);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == ratio) return text;
  }
  return absl::StrFormat("%.17g", ratio);
}

}  // namespace

std::string CompressionSpec::ToString() const {
  switch (method) {
    case CompressionMethod::kNone:
      return "none";
    case CompressionMethod::kFp16:
      return "fp16";
    case CompressionMethod::kBf16:
      return "bf16";
    case CompressionMethod::kTopK:
      return absl::StrCat("topk:", ShortestRatio(ratio));
    case CompressionMethod::kRandomK:
      return absl::StrCat("randomk:", ShortestRatio(ratio));
    case CompressionMethod::kOneBit:
      return "onebit";
  }
  return "none";
}

bool CompressionSpec::UsesErrorFeedback() const {
  return method == CompressionMethod::kTopK ||
         method == CompressionMethod::kRandomK ||
         method == CompressionMethod::kOneBit;
}

int64_t CompressionSpec::KeptElements(int64_t numel) const {
  if (method != CompressionMethod::kTopK &&
      method != CompressionMethod::kRandomK) {
    return numel;
  }
  const int64_t k = std::llround(ratio * static_cast<double>(numel));
  return std::clamp<int64_t>(k, 1, numel);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xffu) {  // infinity or NaN (keep NaN a quiet NaN)
    return sign | 0x7c00u | (mantissa != 0 ? 0x200u : 0u);
  }
  // The value's exponent in binary16's bias (15).
  const int32_t half_exponent = static_cast<int32_t>(exponent) - 127 + 15;
  if (half_exponent >= 0x1f) return sign | 0x7c00u;  // overflow: infinity
  if (half_exponent <= 0) {
    // Subnormal in binary16 (or zero): shift the full mantissa (with its
    // implicit 1) right, rounding to nearest even.
    if (half_exponent < -10) return sign;  // below half the smallest subnormal
    mantissa |= 0x800000u;
    const int shift = 14 - half_exponent;  // 14..24
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t result = kept;
    if (rest > halfway || (rest == halfway && (kept & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t result = (static_cast<uint32_t>(half_exponent) << 10) |
                    (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  // A carry out of the mantissa moves into the exponent, and from the
  // largest finite value into infinity, as it should.
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) {
    return BitsFloat(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal: normalize.
  int32_t e = -1;
  do {
    ++e;
    mantissa <<= 1;
  } while ((mantissa & 0x400u) == 0);
  mantissa &= 0x3ffu;
  return BitsFloat(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) |
                   (mantissa << 13));
}

uint16_t FloatToBfloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bfloat16ToFloat(uint16_t bits) {
  return BitsFloat(static_cast<uint32_t>(bits) << 16);
}

std::vector<uint32_t> RandomKIndices(int64_t numel, int64_t k, uint64_t seed,
                                     int64_t step, int bucket) {
  k = std::clamp<int64_t>(k, 0, numel);
  // One generator per (seed, step, bucket); SplitMix-style mixing so nearby
  // steps and buckets draw unrelated sets.
  uint64_t state = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(step + 1)) ^
                   (0xbf58476d1ce4e5b9ull * static_cast<uint64_t>(bucket + 1));
  state = (state ^ (state >> 30)) * 0xbf58476d1ce4e5b9ull;
  state = (state ^ (state >> 27)) * 0x94d049bb133111ebull;
  std::mt19937_64 generator(state ^ (state >> 31));
  std::vector<uint32_t> index;
  index.reserve(k);
  if (k * 4 >= numel) {
    // Dense draw: a partial Fisher-Yates over all indices.
    std::vector<uint32_t> all(numel);
    std::iota(all.begin(), all.end(), 0u);
    for (int64_t i = 0; i < k; ++i) {
      std::uniform_int_distribution<int64_t> pick(i, numel - 1);
      std::swap(all[i], all[pick(generator)]);
    }
    index.assign(all.begin(), all.begin() + k);
  } else {
    // Sparse draw: Floyd's algorithm, k distinct values in O(k) memory.
    absl::flat_hash_set<uint32_t> taken;
    taken.reserve(k);
    for (int64_t j = numel - k; j < numel; ++j) {
      std::uniform_int_distribution<int64_t> pick(0, j);
      const uint32_t drawn = static_cast<uint32_t>(pick(generator));
      const uint32_t t = taken.contains(drawn) ? static_cast<uint32_t>(j) : drawn;
      taken.insert(t);
      index.push_back(t);
    }
  }
  std::sort(index.begin(), index.end());
  return index;
}

absl::Status Compressor::Encode(absl::Span<const float> gradient,
                                absl::Span<float> residual, int64_t step,
                                int bucket, EncodedBucket* out) const {
  const int64_t numel = static_cast<int64_t>(gradient.size());
  if (numel > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compression: bucket ", bucket, " holds ", numel,
        " floats, more than 32-bit indices address; lower --bucket_mb"));
  }
  if (spec_.UsesErrorFeedback() &&
      static_cast<int64_t>(residual.size()) != numel) {
    return absl::InternalError(absl::StrCat(
        "compression: bucket ", bucket, " has ", numel,
        " floats but its error-feedback residual ", residual.size()));
  }
  if (spec_.method == CompressionMethod::kTopK ||
      spec_.method == CompressionMethod::kRandomK) {
    // Error feedback in place: the residual becomes e = gradient + residual,
    // the kept elements are gathered from it, and e - D(C(e)) is e with each
    // kept element minus itself (0): the same floats as the general path
    // below, without its three dense temporaries (a large part of the time
    // of encoding a sparse bucket, which the step waits for).
    for (int64_t i = 0; i < numel; ++i) residual[i] += gradient[i];
    const absl::Span<const float> corrected(residual.data(), residual.size());
    const int64_t k = spec_.KeptElements(numel);
    *out = GatherSparse(corrected,
                        spec_.method == CompressionMethod::kTopK
                            ? TopKIndices(corrected, k)
                            : RandomKIndices(numel, k, seed_, step, bucket));
    for (size_t j = 0; j < out->index.size(); ++j) {
      residual[out->index[j]] -= out->values[j];
    }
    return absl::OkStatus();
  }
  // Error feedback: compress gradient + residual, keep what was dropped.
  std::vector<float> corrected;
  absl::Span<const float> input = gradient;
  if (spec_.UsesErrorFeedback()) {
    corrected.resize(numel);
    for (int64_t i = 0; i < numel; ++i) corrected[i] = gradient[i] + residual[i];
    input = corrected;
  }
  *out = EncodedBucket();
  out->numel = numel;
  switch (spec_.method) {
    case CompressionMethod::kNone:
      out->encoding = Encoding::kFloat32;
      out->values.assign(gradient.begin(), gradient.end());
      return absl::OkStatus();
    case CompressionMethod::kFp16:
      out->encoding = Encoding::kFp16;
      out->halves.resize(numel);
      for (int64_t i = 0; i < numel; ++i) out->halves[i] = FloatToHalf(input[i]);
      return absl::OkStatus();
    case CompressionMethod::kBf16:
      out->encoding = Encoding::kBf16;
      out->halves.resize(numel);
      for (int64_t i = 0; i < numel; ++i) {
        out->halves[i] = FloatToBfloat16(input[i]);
      }
      return absl::OkStatus();
    case CompressionMethod::kTopK:
    case CompressionMethod::kRandomK:
      return absl::InternalError("compression: top-k and random-k are encoded above");
    case CompressionMethod::kOneBit:
      *out = EncodeOneBit(input);
      break;
  }
  // residual = e - D(C(e)).
  std::copy(input.begin(), input.end(), residual.begin());
  std::vector<float> negated(numel, 0.0f);
  absl::Status decoded = AddDecoded(*out, absl::MakeSpan(negated));
  if (!decoded.ok()) return decoded;
  for (int64_t i = 0; i < numel; ++i) residual[i] -= negated[i];
  return absl::OkStatus();
}

absl::Status AddDecoded(const EncodedBucket& encoded, absl::Span<float> dst) {
  const int64_t numel = encoded.numel;
  if (static_cast<int64_t>(dst.size()) != numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("compressed bucket of ", numel,
                     " floats decoded into a buffer of ", dst.size()));
  }
  switch (encoded.encoding) {
    case Encoding::kFloat32:
      if (static_cast<int64_t>(encoded.values.size()) != numel) {
        return Malformed("float32 values disagree with its length");
      }
      for (int64_t i = 0; i < numel; ++i) dst[i] += encoded.values[i];
      return absl::OkStatus();
    case Encoding::kFp16:
    case Encoding::kBf16: {
      if (static_cast<int64_t>(encoded.halves.size()) != numel) {
        return Malformed("16-bit values disagree with its length");
      }
      const bool fp16 = encoded.encoding == Encoding::kFp16;
      for (int64_t i = 0; i < numel; ++i) {
        dst[i] += fp16 ? HalfToFloat(encoded.halves[i])
                       : Bfloat16ToFloat(encoded.halves[i]);
      }
      return absl::OkStatus();
    }
    case Encoding::kSparse: {
      const int64_t width = encoded.row_width;
      if (width < 1 || numel % width != 0) {
        return Malformed(absl::StrCat("row width ", width,
                                      " does not divide its length ", numel));
      }
      const int64_t rows = static_cast<int64_t>(encoded.index.size());
      if (static_cast<int64_t>(encoded.values.size()) != rows * width) {
        return Malformed("sparse values disagree with its indices");
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = encoded.index[r];
        if (row * width >= numel || (r > 0 && row <= encoded.index[r - 1])) {
          return Malformed(absl::StrCat("sparse index ", row, " at position ",
                                        r, " is out of order or range"));
        }
        const float* values = encoded.values.data() + r * width;
        float* out = dst.data() + row * width;
        for (int64_t j = 0; j < width; ++j) out[j] += values[j];
      }
      return absl::OkStatus();
    }
    case Encoding::kOneBit: {
      if (static_cast<int64_t>(encoded.signs.size()) != OneBitWords(numel)) {
        return Malformed("sign words disagree with its length");
      }
      const float up = encoded.positive_scale;
      const float down = -encoded.negative_scale;
      for (int64_t first = 0; first < numel; first += 64) {
        const uint64_t bits = encoded.signs[first / 64];
        const int64_t count = std::min<int64_t>(64, numel - first);
        float* out = dst.data() + first;
        for (int64_t j = 0; j < count; ++j) {
          out[j] += ((bits >> j) & 1u) ? up : down;
        }
      }
      return absl::OkStatus();
    }
  }
  return Malformed(absl::StrCat("unknown encoding ",
                                static_cast<int>(encoded.encoding)));
}

EncodedBucket SparseRowsOf(absl::Span<const float> dense, int32_t row_width) {
  EncodedBucket out;
  out.encoding = Encoding::kSparse;
  out.numel = static_cast<int64_t>(dense.size());
  out.row_width = row_width;
  const int64_t rows = out.numel / row_width;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dense.data() + r * row_width;
    if (std::any_of(row, row + row_width, [](float v) { return v != 0.0f; })) {
      out.index.push_back(static_cast<uint32_t>(r));
      out.values.insert(out.values.end(), row, row + row_width);
    }
  }
  return out;
}

EncodedBucket TopKOf(absl::Span<const float> dense, int64_t k) {
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(dense.size()));
  return GatherSparse(dense, TopKIndices(dense, k));
}

void AppendSerialized(const EncodedBucket& encoded, std::string* out) {
  out->reserve(out->size() + SerializedBytes(encoded));
  Append(static_cast<uint8_t>(encoded.encoding), out);
  Append(encoded.numel, out);
  switch (encoded.encoding) {
    case Encoding::kFloat32:
      AppendArray(encoded.values, out);
      break;
    case Encoding::kFp16:
    case Encoding::kBf16:
      AppendArray(encoded.halves, out);
      break;
    case Encoding::kSparse:
      Append(encoded.row_width, out);
      Append(static_cast<int64_t>(encoded.index.size()), out);
      AppendArray(encoded.index, out);
      AppendArray(encoded.values, out);
      break;
    case Encoding::kOneBit:
      Append(encoded.positive_scale, out);
      Append(encoded.negative_scale, out);
      AppendArray(encoded.signs, out);
      break;
  }
}

int64_t SerializedBytes(const EncodedBucket& encoded) {
  const int64_t header = 1 + 8;
  switch (encoded.encoding) {
    case Encoding::kFloat32:
      return header + 4 * static_cast<int64_t>(encoded.values.size());
    case Encoding::kFp16:
    case Encoding::kBf16:
      return header + 2 * static_cast<int64_t>(encoded.halves.size());
    case Encoding::kSparse:
      return header + 4 + 8 + 4 * static_cast<int64_t>(encoded.index.size()) +
             4 * static_cast<int64_t>(encoded.values.size());
    case Encoding::kOneBit:
      return header + 8 + 8 * static_cast<int64_t>(encoded.signs.size());
  }
  return header;
}

absl::StatusOr<EncodedBucket> ParseEncodedBucket(absl::string_view bytes) {
  ByteReader reader(bytes);
  EncodedBucket out;
  uint8_t encoding = 0;
  if (!reader.Read(&encoding) || !reader.Read(&out.numel)) {
    return Malformed("truncated header");
  }
  if (out.numel < 0 || out.numel > std::numeric_limits<uint32_t>::max()) {
    return Malformed(absl::StrCat("length ", out.numel, " out of range"));
  }
  switch (encoding) {
    case static_cast<uint8_t>(Encoding::kFloat32):
      out.encoding = Encoding::kFloat32;
      if (!reader.ReadArray(out.numel, &out.values)) {
        return Malformed("truncated float32 values");
      }
      break;
    case static_cast<uint8_t>(Encoding::kFp16):
    case static_cast<uint8_t>(Encoding::kBf16):
      out.encoding = static_cast<Encoding>(encoding);
      if (!reader.ReadArray(out.numel, &out.halves)) {
        return Malformed("truncated 16-bit values");
      }
      break;
    case static_cast<uint8_t>(Encoding::kSparse): {
      out.encoding = Encoding::kSparse;
      int64_t rows = 0;
      if (!reader.Read(&out.row_width) || !reader.Read(&rows)) {
        return Malformed("truncated sparse header");
      }
      if (out.row_width < 1 || out.numel % out.row_width != 0) {
        return Malformed(absl::StrCat("row width ", out.row_width,
                                      " does not divide its length ",
                                      out.numel));
      }
      if (rows < 0 || rows > out.numel / out.row_width) {
        return Malformed(absl::StrCat(rows, " sparse rows in a bucket of ",
                                      out.numel / out.row_width));
      }
      if (!reader.ReadArray(rows, &out.index) ||
          !reader.ReadArray(rows * out.row_width, &out.values)) {
        return Malformed("truncated sparse rows");
      }
      for (int64_t r = 0; r < rows; ++r) {
        if (int64_t{out.index[r]} >= out.numel / out.row_width ||
            (r > 0 && out.index[r] <= out.index[r - 1])) {
          return Malformed(absl::StrCat("sparse index ", out.index[r],
                                        " at position ", r,
                                        " is out of order or range"));
        }
      }
      break;
    }
    case static_cast<uint8_t>(Encoding::kOneBit):
      out.encoding = Encoding::kOneBit;
      if (!reader.Read(&out.positive_scale) ||
          !reader.Read(&out.negative_scale) ||
          !reader.ReadArray(OneBitWords(out.numel), &out.signs)) {
        return Malformed("truncated sign words");
      }
      break;
    default:
      return Malformed(absl::StrCat("unknown encoding ", int{encoding}));
  }
  if (reader.left() != 0) {
    return Malformed(absl::StrCat(reader.left(), " bytes left over"));
  }
  return out;
}

}  // namespace gradsync
