// The per-step bookkeeping every strategy needs between the trainer's
// BucketReady calls and its Finish: which buckets of the current step were
// handed over, that each comes exactly once, that none is missing when the
// step is finished, and the step number. Shared by the ring (allreduce/) and
// the parameter server (ps/), which used to keep copies of it.
//
// Not thread-safe: a strategy calls it from the trainer's thread, or under
// its own lock when another thread looks too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

class StepBuckets {
 public:
  // `owner` starts every error message ("ring", "worker 3").
  explicit StepBuckets(std::string owner) : owner_(std::move(owner)) {}

  // Before the first step: `num_buckets` buckets, steps counted from
  // `first_step` (a resumed run's global step).
  void Reset(int num_buckets, int64_t first_step = 0);

  // Marks `bucket` handed over in this step. A bucket out of range or handed
  // over twice is a trainer bug: FailedPrecondition naming the step and the
  // bucket, and nothing is marked.
  absl::Status MarkReady(int bucket);
  bool ready(int bucket) const { return ready_[bucket]; }
  int num_ready() const { return num_ready_; }
  int num_buckets() const { return static_cast<int>(ready_.size()); }
  bool all_ready() const { return num_ready_ == num_buckets(); }

  // OK when every bucket of the step was handed over; otherwise
  // FailedPrecondition listing the missing ones.
  absl::Status CheckAllReady() const;

  // Clears the marks for the next step and counts the step done.
  void NextStep();
  // Clears the marks of an abandoned step without counting it.
  void ClearStep();
  int64_t step() const { return step_; }

 private:
  std::string owner_;
  std::vector<bool> ready_;
  int num_ready_ = 0;
  int64_t step_ = 0;
};

// How long a failed step waits for the rendezvous to name a lost member. The
// report comes within milliseconds of the loss (the coordinator hears of it
// when the member's watch breaks); a failure with no lost member behind it
// (a peer that exited with an error) pays this wait once.
inline constexpr absl::Duration kLossReportWait = absl::Seconds(2);

// A peer that closed its connection is often only the messenger: `error`
// with the lost member in front when the rendezvous names one within
// kLossReportWait; `error` itself without a rendezvous.
absl::Status ExplainStepFailure(const Rendezvous* rendezvous,
                                const absl::Status& error);

}  // namespace gradsync
