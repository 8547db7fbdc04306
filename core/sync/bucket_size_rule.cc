// The bucket-cap rule (see bucket_size_rule.h).
#include "core/sync/bucket_size_rule.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace gradsync {

BucketSizeChoice ChooseBucketBytes(int64_t model_bytes) {
  BucketSizeChoice choice;
  // Whole KiB, so the cap prints and parses back exactly.
  const int64_t quarter = (model_bytes / kTargetBuckets) / 1024 * 1024;
  choice.bucket_bytes = std::clamp(quarter, kMinBucketBytes, kMaxBucketBytes);
  choice.reason = absl::StrFormat(
      "auto: the %.2f MB model / %d (so backward overlaps communication), "
      "within [%d, %d] MiB -> %.3f MiB",
      model_bytes / 1e6, kTargetBuckets, kMinBucketBytes >> 20,
      kMaxBucketBytes >> 20, choice.bucket_bytes / double(1 << 20));
  return choice;
}

std::optional<std::string> SingleBucketWarning(const ParamLayout& layout,
                                               double bucket_mb) {
  if (layout.buckets().size() != 1 || layout.params().size() < 2) {
    return std::nullopt;
  }
  const BucketSizeChoice automatic = ChooseBucketBytes(layout.total_bytes());
  return absl::StrFormat(
      "--bucket_mb=%g holds the whole %.2f MB model in one bucket, so no "
      "communication overlaps backward; leave --bucket_mb unset (auto: "
      "%.3f MiB here) or set it below the model's size",
      bucket_mb, layout.total_bytes() / 1e6,
      automatic.bucket_bytes / double(1 << 20));
}

}  // namespace gradsync
