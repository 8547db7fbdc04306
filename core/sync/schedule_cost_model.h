// The α–β timeline of one training step under a send order (schedule.h):
// when each bucket's synchronization ends, and how long the next step's
// forward waits for it. The per-bucket (or per-partition) transfer time is a
// strategy's own formula (allreduce/algorithms/cost_model.h,
// ps/cost_model.h), handed in as a function, so this file knows no strategy;
// `gradsync predict`'s "step" query (tools/predict_command.cc) and through it
// bench/cost_model.py and `gradsync compare` answer with it.
//
// Time runs from the start of backward. Buckets are numbered in forward
// order (bucket 0 holds the first layers); backward computes them from the
// last, so bucket i is ready once the backward of buckets i..m−1 is done:
//
//   backward   |  b[m−1]  | ... |  b[1]  |  b[0]  |
//   link           fifo:  m−1, ..., 1, 0     (ready order, whole buckets)
//              priority:  partitions, the lowest offset first among the ready
//   forward                                       |  f[0]  |  f[1]  | ...
//                                                 ^ waits for bucket 0 only
//
// The link is one queue: a transfer starts once the link is free and takes
// T(bytes), the strategy's time for one synchronization of that many bytes
// (so a partition pays the strategy's latency terms once, as a separate
// collective or a separate key would). Under fifo every bucket is handed
// over the moment it is ready (no credit). Under priority each bucket is cut
// into partitions of `partition_bytes`; whenever the link could take more,
// the ready partition with the lowest offset (read soonest by the next
// forward) is handed over, as long as the bytes handed over and not yet
// finished stay within the credit; a partition handed over is never taken
// back (a started partition finishes), so a late high-priority partition
// waits behind at most a credit's worth of bytes.
//
// The next forward starts when backward ends and computes bucket i once
// both bucket i−1's forward is done and bucket i is synchronized
// (--overlap_next_forward); without that overlap it waits for every bucket.
// Its waits are the exposed communication: what the trainer records as the
// step's sync wait. A step then takes forward + backward + exposed, since by
// the end of the next forward every transfer of this one has ended.
//
// What it leaves out: the optimizer's time, transfers that share the link
// (partitions in flight overlap their latencies in a real strategy, here
// they queue), and compute slowed by communication on shared cores.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/schedule.h"

namespace gradsync {

// One bucket of the step, in forward order.
struct ModelBucket {
  double bytes = 0;       // gradient bytes synchronized
  double backward_s = 0;  // backward compute of its layers
  double forward_s = 0;   // the next forward's compute of its layers
};

struct ScheduleModelOptions {
  ScheduleKind kind = ScheduleKind::kFifo;
  // priority: a partition's bytes at most; <= 0: whole buckets. fifo sends
  // whole buckets whatever it is.
  double partition_bytes = 0;
  // priority: bytes handed over and not yet finished, at most (one partition
  // is always allowed); <= 0: one partition at a time.
  double credit_bytes = 0;
  bool overlap_next_forward = true;
  // Added once, after the step's last transfer: what finishes the step
  // besides the queue (the PS's last key leaving its server once per worker,
  // ps/cost_model.h's tail).
  double tail_s = 0;
};

struct ScheduledStep {
  double backward_s = 0;
  double forward_s = 0;
  double comm_s = 0;      // the link busy: every transfer's time, summed
  double comm_end_s = 0;  // the last transfer's end, the tail included
  double exposed_s = 0;   // the next forward's waits
  double step_s = 0;      // forward + backward + exposed
  int transfers = 0;      // buckets (fifo) or partitions (priority) sent
  // Per bucket in forward order: when its last byte is synchronized.
  std::vector<double> bucket_done_s;
};

// Seconds to synchronize `bytes` as one transfer.
using TransferSeconds = std::function<double(double bytes)>;

// The timeline of one step. InvalidArgument for no buckets, a negative or
// non-finite size or time, or a transfer time that is negative.
absl::StatusOr<ScheduledStep> PredictScheduledStep(
    const std::vector<ModelBucket>& buckets,
    const ScheduleModelOptions& options, const TransferSeconds& transfer);

// Each bucket's backward time from the moments the buckets became ready
// (forward order, from the start of backward, as a trace records them):
// bucket m−1 is the first, and bucket i's backward is what passed between
// bucket i+1's ready time and its own. InvalidArgument where a bucket is
// ready before a later layer's bucket (backward runs from the last layer)
// or a time is negative.
absl::StatusOr<std::vector<double>> BackwardFromReadyTimes(
    const std::vector<double>& ready_s);

// `total_s` spread over `bytes` (in any order) in proportion to each: how
// the synthetic models spend their compute (core/model/synthetic_model.h),
// and the model's guess where a profile gives only a total. All zero when
// the bytes are.
std::vector<double> SpreadByBytes(const std::vector<double>& bytes,
                                  double total_s);

}  // namespace gradsync
