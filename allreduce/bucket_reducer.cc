#include "allreduce/bucket_reducer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "allreduce/algorithms/float_sum.h"
#include "core/base/status_macros.h"

namespace gradsync {

BucketReducer::BucketReducer(std::string name, int world_size,
                             AllReduceAlgorithm* algorithm,
                             PeerTransport* transport,
                             const Compressor& compressor,
                             ErrorFeedback& error_feedback,
                             RowSparseRoute route)
    : name_(std::move(name)),
      world_size_(world_size),
      algorithm_(algorithm),
      plain_ring_(dynamic_cast<RingAllReduce*>(algorithm)),
      gather_(std::make_unique<RingAllGather>(transport)),
      compressor_(compressor),
      error_feedback_(error_feedback),
      route_(route) {}

absl::Status BucketReducer::Reduce(int bucket, uint32_t tag, int64_t step,
                                   const BucketSpan& span, float* data,
                                   float scale) {
  codec_ms_ = 0;
  row_sparse_ = 0;
  const CompressionSpec& spec = compressor_.spec();
  switch (spec.method) {
    case CompressionMethod::kNone:
      if (span.sparse_row_width > 0 && world_size_ > 1) {
        return ReduceRowSparse(bucket, span, data, scale);
      }
      return algorithm_->Run(data, span.numel, scale, tag);
    case CompressionMethod::kFp16:
    case CompressionMethod::kBf16:
      if (plain_ring_ == nullptr) {
        return absl::InternalError(absl::StrCat(
            "--compression=", spec.ToString(), " reached --sync=", name_,
            ", which its factory should have refused"));
      }
      return plain_ring_->RunHalfPrecision(
          data, span.numel, scale, tag,
          spec.method == CompressionMethod::kFp16 ? Encoding::kFp16
                                                  : Encoding::kBf16);
    default:
      break;
  }
  absl::Time start = absl::Now();
  EncodedBucket encoded;
  RETURN_IF_ERROR(compressor_.Encode(
      absl::MakeConstSpan(data, span.numel),
      error_feedback_.Of(span.offset, span.numel), step, bucket, &encoded));
  codec_ms_ += absl::ToDoubleMilliseconds(absl::Now() - start);
  if (spec.method == CompressionMethod::kRandomK) {
    // The same indices on every rank (one seed): sum the k values with the
    // algorithm itself, as a dense all-reduce of k floats.
    RETURN_IF_ERROR(algorithm_->Run(encoded.values.data(),
                                    static_cast<int64_t>(encoded.values.size()),
                                    scale, tag));
    start = absl::Now();
    std::fill(data, data + span.numel, 0.0f);
    for (size_t i = 0; i < encoded.index.size(); ++i) {
      data[encoded.index[i]] = encoded.values[i];
    }
    codec_ms_ += absl::ToDoubleMilliseconds(absl::Now() - start);
    return absl::OkStatus();
  }
  return GatherAndSum(encoded,
                      spec.method == CompressionMethod::kTopK
                          ? Encoding::kSparse
                          : Encoding::kOneBit,
                      bucket, span, data, scale);
}

absl::Status BucketReducer::GatherAndSum(const EncodedBucket& own,
                                         Encoding expected, int bucket,
                                         const BucketSpan& span, float* data,
                                         float scale) {
  std::string blob;
  AppendSerialized(own, &blob);
  // No honest encoding of this bucket is larger: every row as (index, row).
  const int64_t max_blob_bytes = 64 + 8 * span.numel;
  ASSIGN_OR_RETURN(std::vector<std::string> blobs,
                   gather_->Run(std::move(blob), static_cast<uint32_t>(bucket),
                                max_blob_bytes));
  const absl::Time start = absl::Now();
  absl::Span<float> sum = absl::MakeSpan(data, span.numel);
  std::fill(sum.begin(), sum.end(), 0.0f);
  // Rank order on every rank: the same additions in the same order, so the
  // same sum bit for bit.
  for (size_t r = 0; r < blobs.size(); ++r) {
    absl::StatusOr<EncodedBucket> decoded = ParseEncodedBucket(blobs[r]);
    if (!decoded.ok()) {
      return Annotate(
          decoded.status(),
          absl::StrCat("rank ", r, "'s encoding of bucket ", bucket));
    }
    if (decoded->encoding != expected || decoded->numel != span.numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " sent bucket ", bucket, " as encoding ",
          static_cast<int>(decoded->encoding), " of ", decoded->numel,
          " floats; this rank expects encoding ", static_cast<int>(expected),
          " of ", span.numel,
          " (every worker must run with the same --compression and model)"));
    }
    RETURN_IF_ERROR(AddDecoded(*decoded, sum));
  }
  if (scale != 1.0f) ScaleInPlace(data, span.numel, scale);
  codec_ms_ += absl::ToDoubleMilliseconds(absl::Now() - start);
  return absl::OkStatus();
}

absl::Status BucketReducer::ReduceRowSparse(int bucket, const BucketSpan& span,
                                            float* data, float scale) {
  const int n = world_size_;
  const absl::Time start = absl::Now();
  const EncodedBucket rows =
      SparseRowsOf(absl::MakeConstSpan(data, span.numel),
                   static_cast<int32_t>(span.sparse_row_width));
  codec_ms_ += absl::ToDoubleMilliseconds(absl::Now() - start);
  // Nobody knows the others' row counts: exchange the encodings' sizes
  // first (8 bytes per rank, N-1 latencies), so every rank takes the same
  // decision from the same numbers.
  const uint64_t own_bytes = static_cast<uint64_t>(SerializedBytes(rows));
  std::string size_blob(sizeof(own_bytes), '\0');
  std::memcpy(&size_blob[0], &own_bytes, sizeof(own_bytes));
  ASSIGN_OR_RETURN(
      std::vector<std::string> sizes,
      gather_->Run(std::move(size_blob), static_cast<uint32_t>(bucket),
                   sizeof(own_bytes)));
  uint64_t total = 0;
  uint64_t smallest = UINT64_MAX;
  for (size_t r = 0; r < sizes.size(); ++r) {
    uint64_t bytes = 0;
    if (sizes[r].size() != sizeof(bytes)) {
      return absl::DataLossError(
          absl::StrCat("rank ", r, " sent a size of ", sizes[r].size(),
                       " bytes for row-sparse bucket ", bucket, " (want 8)"));
    }
    std::memcpy(&bytes, sizes[r].data(), sizeof(bytes));
    total += bytes;
    smallest = std::min(smallest, bytes);
  }
  // A link of the all-gather carries every encoding but one; a link of the
  // dense ring 2(N-1)/N of the bucket's float32 bytes.
  const double gather_link_bytes = static_cast<double>(total - smallest);
  const double dense_link_bytes = 2.0 * (n - 1) / n * 4.0 * span.numel;
  using Route = RowSparseRoute;
  const bool gather =
      route_ == Route::kGather ||
      (route_ == Route::kAuto && gather_link_bytes < dense_link_bytes);
  if (gather) {
    row_sparse_ = 1;
    return GatherAndSum(rows, Encoding::kSparse, bucket, span, data, scale);
  }
  row_sparse_ = -1;
  return algorithm_->Run(data, span.numel, scale,
                         static_cast<uint32_t>(bucket));
}
}  // namespace gradsync
