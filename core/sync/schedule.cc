#include "core/sync/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  if (name == "fifo") return ScheduleKind::kFifo;
  if (name == "priority") return ScheduleKind::kPriority;
  return absl::InvalidArgumentError(absl::StrCat(
      "--schedule=", name,
      " is not a schedule; use fifo (buckets in the order backward makes "
      "them) or priority (the partitions the next forward reads first)"));
}

const char* ScheduleKindName(ScheduleKind kind) {
  return kind == ScheduleKind::kPriority ? "priority" : "fifo";
}

absl::Status ValidateScheduleOptions(const ScheduleOptions& options) {
  const struct {
    const char* flag;
    int64_t bytes;
  } sizes[] = {{"--partition_kb", options.partition_bytes},
               {"--credit_kb", options.credit_bytes}};
  for (const auto& size : sizes) {
    if (size.bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(size.flag, "=", size.bytes / 1024,
                       " must be >= 0 (0: derived by the strategy)"));
    }
  }
  if (options.credit_bytes > 0 && options.partition_bytes > 0 &&
      options.credit_bytes < options.partition_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--credit_kb=", options.credit_bytes / 1024,
        " is smaller than --partition_kb=", options.partition_bytes / 1024,
        ": a credit must hold at least one partition; raise --credit_kb or "
        "leave it 0 (derived)"));
  }
  return absl::OkStatus();
}

std::vector<BucketPartition> CutPartitions(const Bucket& bucket,
                                     int64_t partition_bytes) {
  const int64_t per = partition_bytes / 4;
  if (per <= 0 || bucket.sparse_row_width > 0 || bucket.numel <= per) {
    return {BucketPartition{bucket.index, 0, bucket.offset, bucket.numel}};
  }
  std::vector<BucketPartition> partitions;
  for (int64_t done = 0; done < bucket.numel; done += per) {
    partitions.push_back(BucketPartition{bucket.index,
                                   static_cast<int>(partitions.size()),
                                   bucket.offset + done,
                                   std::min(per, bucket.numel - done)});
  }
  return partitions;
}

}  // namespace gradsync
