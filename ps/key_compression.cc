// A parameter-server key's encodings: push checks, results, the cut of a
// bucket into keys (see key_compression.h).
#include "ps/key_compression.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradsync {
namespace {

const char* EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kFloat32:
      return "float32";
    case Encoding::kFp16:
      return "fp16";
    case Encoding::kBf16:
      return "bf16";
    case Encoding::kSparse:
      return "sparse";
    case Encoding::kOneBit:
      return "onebit";
  }
  return "unknown";
}

std::string Serialized(const EncodedBucket& encoded) {
  std::string out;
  AppendSerialized(encoded, &out);
  return out;
}

}  // namespace

absl::StatusOr<PsPull> ParsePsPull(absl::string_view name) {
  if (name == "auto") return PsPull::kAuto;
  if (name == "dense" || name.empty()) return PsPull::kDense;
  if (name == "union") return PsPull::kUnion;
  if (name == "topk") return PsPull::kTopK;
  if (name == "same") return PsPull::kSame;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --ps_pull=", name,
      "; choose auto (the default), union or topk (with "
      "--compression=topk:R or randomk:R) or dense"));
}

const char* PsPullName(PsPull pull) {
  switch (pull) {
    case PsPull::kAuto:
      return "auto";
    case PsPull::kDense:
      return "dense";
    case PsPull::kUnion:
      return "union";
    case PsPull::kTopK:
      return "topk";
    case PsPull::kSame:
      return "same";
  }
  return "dense";
}

absl::StatusOr<PsPull> ResolvePsPull(PsPull pull,
                                     const CompressionSpec& compression,
                                     ps::UpdateMode update_mode) {
  const bool sparse = compression.method == CompressionMethod::kTopK ||
                      compression.method == CompressionMethod::kRandomK;
  const bool half = compression.method == CompressionMethod::kFp16 ||
                    compression.method == CompressionMethod::kBf16;
  const bool server_mode = update_mode == ps::UPDATE_SERVER;
  if (pull == PsPull::kAuto) {
    if (server_mode) return PsPull::kDense;
    return sparse ? PsPull::kUnion : half ? PsPull::kSame : PsPull::kDense;
  }
  if (pull == PsPull::kDense) return pull;
  const std::string asked =
      absl::StrCat("--ps_pull=", PsPullName(pull), " with --compression=",
                   compression.ToString());
  if (server_mode) {
    return absl::InvalidArgumentError(absl::StrCat(
        asked,
        " and --ps_update=server: the servers run the optimizer and workers "
        "pull parameters, which travel as float32; drop --ps_pull or use "
        "--ps_update=worker"));
  }
  if ((pull == PsPull::kUnion || pull == PsPull::kTopK) && !sparse) {
    return absl::InvalidArgumentError(absl::StrCat(
        asked,
        ": union and topk pulls sum (index, value) pairs, so they need "
        "--compression=topk:RATIO or randomk:RATIO; use --ps_pull=dense"));
  }
  if (pull == PsPull::kSame && !half) {
    return absl::InvalidArgumentError(
        absl::StrCat(asked, ": 'same' pulls need --compression=fp16 or bf16"));
  }
  return pull;
}

KeyEncoding KeyEncodingOf(const CompressionSpec& compression, PsPull pull,
                          ps::UpdateMode update_mode, int32_t row_width,
                          int64_t numel) {
  KeyEncoding encoding;
  const bool worker_mode = update_mode == ps::UPDATE_WORKER;
  if (row_width > 0) {
    encoding.encoded_push = true;
    encoding.push = Encoding::kSparse;
    encoding.row_width = row_width;
    if (worker_mode) encoding.result = PsPull::kUnion;
    return encoding;
  }
  switch (compression.method) {
    case CompressionMethod::kNone:
      return encoding;
    case CompressionMethod::kFp16:
    case CompressionMethod::kBf16:
      encoding.encoded_push = true;
      encoding.push = compression.method == CompressionMethod::kFp16
                          ? Encoding::kFp16
                          : Encoding::kBf16;
      break;
    case CompressionMethod::kTopK:
    case CompressionMethod::kRandomK:
      encoding.encoded_push = true;
      encoding.push = Encoding::kSparse;
      break;
    case CompressionMethod::kOneBit:
      encoding.encoded_push = true;
      encoding.push = Encoding::kOneBit;
      break;
  }
  if (worker_mode) {
    absl::StatusOr<PsPull> resolved =
        ResolvePsPull(pull, compression, update_mode);
    encoding.result = resolved.ok() ? *resolved : PsPull::kDense;
  }
  if (encoding.result == PsPull::kTopK) {
    encoding.topk = compression.KeptElements(numel);
  }
  return encoding;
}

std::string DescribePush(const KeyEncoding& encoding) {
  if (!encoding.encoded_push) return "float32";
  if (encoding.push == Encoding::kSparse) {
    return encoding.row_width > 1
               ? absl::StrCat("rows of ", encoding.row_width, " (row-sparse)")
               : std::string("(index, value) pairs");
  }
  return EncodingName(encoding.push);
}

int64_t MaxEncodedBytes(int64_t numel) {
  // kSparse with every element a row of its own: header 9 + 12, then an
  // index and a value per float.
  return 9 + 12 + 8 * numel;
}

absl::StatusOr<EncodedBucket> ParseKeyPush(absl::string_view bytes,
                                           const KeyEncoding& encoding,
                                           int64_t numel) {
  absl::StatusOr<EncodedBucket> parsed = ParseEncodedBucket(bytes);
  if (!parsed.ok()) return parsed.status();
  if (parsed->numel != numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the encoding is of ", parsed->numel, " floats but the key has ",
        numel));
  }
  if (parsed->encoding != encoding.push) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the push is encoded as ", EncodingName(parsed->encoding),
        " but this key takes ", DescribePush(encoding),
        " (every worker must run with the same --compression)"));
  }
  if (parsed->encoding == Encoding::kSparse &&
      parsed->row_width != encoding.row_width) {
    return absl::InvalidArgumentError(
        absl::StrCat("the push's rows are ", parsed->row_width,
                     " floats wide but this key's are ", encoding.row_width));
  }
  return parsed;
}

std::string EncodeKeyResult(absl::Span<const float> average,
                            const KeyEncoding& encoding) {
  EncodedBucket out;
  out.numel = static_cast<int64_t>(average.size());
  switch (encoding.result) {
    case PsPull::kUnion: {
      // Zero where no worker pushed, so the non-zero rows are (within) the
      // union of the pushed indices; a row that summed to exactly zero
      // decodes the same whether it is sent or not.
      EncodedBucket sparse = SparseRowsOf(average, encoding.row_width);
      EncodedBucket dense;
      dense.encoding = Encoding::kFloat32;
      dense.numel = out.numel;
      if (SerializedBytes(sparse) < 9 + 4 * out.numel) return Serialized(sparse);
      dense.values.assign(average.begin(), average.end());
      return Serialized(dense);
    }
    case PsPull::kTopK:
      return Serialized(TopKOf(average, encoding.topk));
    case PsPull::kSame: {
      out.encoding = encoding.push;
      out.halves.resize(average.size());
      const bool fp16 = encoding.push == Encoding::kFp16;
      for (size_t i = 0; i < average.size(); ++i) {
        out.halves[i] =
            fp16 ? FloatToHalf(average[i]) : FloatToBfloat16(average[i]);
      }
      return Serialized(out);
    }
    case PsPull::kAuto:
    case PsPull::kDense:
      break;
  }
  out.encoding = Encoding::kFloat32;
  out.values.assign(average.begin(), average.end());
  return Serialized(out);
}

absl::Status DecodeKeyResult(absl::string_view bytes, absl::Span<float> dst) {
  absl::StatusOr<EncodedBucket> parsed = ParseEncodedBucket(bytes);
  if (!parsed.ok()) return parsed.status();
  std::fill(dst.begin(), dst.end(), 0.0f);
  return AddDecoded(*parsed, dst);
}

absl::StatusOr<std::vector<std::string>> SplitIntoKeys(
    const EncodedBucket& bucket, const std::vector<KeyRange>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const KeyRange& key : keys) {
    if (key.offset < 0 || key.numel < 1 ||
        key.offset + key.numel > bucket.numel) {
      return absl::InternalError(absl::StrCat(
          "key [", key.offset, ", ", key.offset + key.numel,
          ") is not within its bucket of ", bucket.numel, " floats"));
    }
    EncodedBucket part;
    part.encoding = bucket.encoding;
    part.numel = key.numel;
    switch (bucket.encoding) {
      case Encoding::kFloat32:
        part.values.assign(bucket.values.begin() + key.offset,
                           bucket.values.begin() + key.offset + key.numel);
        break;
      case Encoding::kFp16:
      case Encoding::kBf16:
        part.halves.assign(bucket.halves.begin() + key.offset,
                           bucket.halves.begin() + key.offset + key.numel);
        break;
      case Encoding::kSparse: {
        const int64_t width = bucket.row_width;
        if (key.offset % width != 0 || key.numel % width != 0) {
          return absl::InternalError(absl::StrCat(
              "key [", key.offset, ", ", key.offset + key.numel,
              ") does not hold whole rows of ", width));
        }
        part.row_width = bucket.row_width;
        const uint32_t first_row = static_cast<uint32_t>(key.offset / width);
        const uint32_t end_row =
            static_cast<uint32_t>((key.offset + key.numel) / width);
        const auto begin = std::lower_bound(bucket.index.begin(),
                                            bucket.index.end(), first_row);
        const auto end = std::lower_bound(begin, bucket.index.end(), end_row);
        const int64_t first = begin - bucket.index.begin();
        part.index.reserve(end - begin);
        for (auto it = begin; it != end; ++it) {
          part.index.push_back(*it - first_row);
        }
        part.values.assign(
            bucket.values.begin() + first * width,
            bucket.values.begin() + (end - bucket.index.begin()) * width);
        break;
      }
      case Encoding::kOneBit: {
        part.positive_scale = bucket.positive_scale;
        part.negative_scale = bucket.negative_scale;
        part.signs.assign((key.numel + 63) / 64, 0);
        for (int64_t i = 0; i < key.numel; ++i) {
          const int64_t j = key.offset + i;
          if ((bucket.signs[j / 64] >> (j % 64)) & 1u) {
            part.signs[i / 64] |= uint64_t{1} << (i % 64);
          }
        }
        break;
      }
    }
    out.push_back(Serialized(part));
  }
  return out;
}

}  // namespace gradsync
