// --schedule, --partition_kb, --credit_kb: the order in which a strategy
// sends what backward hands it, shared by every strategy that schedules.
//
// fifo sends buckets in the order they became ready, which is backward's
// order: the last layers first. The next step's forward reads the first
// layers first, so under fifo it waits for the bytes sent last. priority
// (ByteScheduler, SOSP'19; P3, SysML'19) cuts each bucket into partitions and
// always sends the ready partition the next forward needs soonest; a credit
// bounds the bytes in flight, so a partition that becomes ready late (the
// first layers, at the end of backward) overtakes partitions still queued
// rather than waiting behind everything already handed to the network.
//
// Priority is a position in the flat parameter buffer: parameters are stored
// in forward order (param_layout.h), so the lower a partition's offset, the
// sooner the next forward reads it. Every rank derives it from the same
// layout, so every rank agrees on it without a message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/sync/param_layout.h"

namespace gradsync {

enum class ScheduleKind { kFifo, kPriority };

// "fifo" or "priority"; anything else is InvalidArgument naming the flag.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
const char* ScheduleKindName(ScheduleKind kind);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kFifo;
  // A partition's size in bytes; 0: the strategy derives it (the PS from its
  // key size, the all-reduces from the link and the bucket).
  int64_t partition_bytes = 0;
  // Bytes a rank keeps in flight before it waits for one to complete; 0: the
  // strategy derives it.
  int64_t credit_bytes = 0;
};

// Checks partition_bytes and credit_bytes (>= 0, a multiple of 4 bytes: a
// whole number of floats); the error names the flag.
absl::Status ValidateScheduleOptions(const ScheduleOptions& options);

// One contiguous span of a bucket: floats [offset, offset + numel) of the
// flat buffer.
struct BucketPartition {
  int bucket = 0;
  int index = 0;       // within the bucket, from the lowest offset
  int64_t offset = 0;  // in floats, within the flat buffer
  int64_t numel = 0;
};

// `bucket` cut into partitions of at most `partition_bytes` (the last one
// shorter), lowest offset first. partition_bytes <= 0, and a row-sparse
// bucket (whose touched rows are found per step), give one partition: the
// whole bucket.
std::vector<BucketPartition> CutPartitions(const Bucket& bucket,
                                     int64_t partition_bytes);

// True when `a` should be sent before `b` under priority: the lower offset
// (read sooner by the next forward) first.
inline bool SoonerNeeded(const BucketPartition& a, const BucketPartition& b) {
  return a.offset < b.offset;
}

}  // namespace gradsync
