// The --trace timeline of one training step, recorded by the trainer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sync/param_layout.h"
#include "core/telemetry/trace.h"

namespace gradsync {

// The --trace timeline of one step (core/telemetry/trace.h), in wall-clock
// microseconds: data loading, each tensor's backward, compute, the exposed
// wait in Finish, each bucket from hand-off to the step's synchronization,
// and the optimizer. Every call does nothing when the step is not traced.
class StepTimeline {
 public:
  StepTimeline(TraceRecorder* trace, int num_buckets) : trace_(trace) {
    if (trace_ == nullptr) return;
    step_start_ = TraceRecorder::NowMicros();
    bucket_ready_.assign(num_buckets, 0);
  }

  void DataLoaded() {
    if (trace_ == nullptr) return;
    compute_start_ = last_ready_ = TraceRecorder::NowMicros();
    trace_->Complete("data", "data", kTrackStep, step_start_,
                     compute_start_ - step_start_);
  }

  // `tensor`'s gradient is final; `completes_bucket`: it was the last one of
  // `bucket`.
  void GradientFinal(const std::string& tensor, int bucket,
                     bool completes_bucket) {
    if (trace_ == nullptr) return;
    // The time since the previous gradient became final is this tensor's
    // backward (the first one also holds the forward pass).
    const int64_t now = TraceRecorder::NowMicros();
    trace_->Complete(tensor, "backward", kTrackCompute, last_ready_,
                     now - last_ready_);
    last_ready_ = now;
    if (completes_bucket) bucket_ready_[bucket] = now;
  }

  void ComputeDone() {
    if (trace_ != nullptr) compute_end_ = TraceRecorder::NowMicros();
  }
  void SyncDone() {
    if (trace_ != nullptr) finish_end_ = TraceRecorder::NowMicros();
  }

  void StepDone(int64_t step, const ParamLayout& layout, bool updated_by_sync) {
    StepDone(
        step, layout,
        std::string(updated_by_sync ? "parameters from servers" : "optimizer"));
  }

  // `after_sync` names what the step does after Finish (a PyTorch worker's
  // hook copies the averages back to DDP; its optimizer runs in the next
  // step's first span).
  void StepDone(int64_t step, const ParamLayout& layout,
                const std::string& after_sync) {
    if (trace_ == nullptr) return;
    const int64_t now = TraceRecorder::NowMicros();
    trace_->Complete("forward+backward", "compute", kTrackCompute,
                     compute_start_, compute_end_ - compute_start_);
    trace_->Complete("Finish (exposed communication)", "wait",
                     kTrackCommunication, compute_end_,
                     finish_end_ - compute_end_);
    // The trainer sees when a bucket is handed off and when the whole step
    // is synchronized; a strategy that records its own spans (trace.h) shows
    // when each bucket really finished.
    for (size_t b = 0; b < bucket_ready_.size(); ++b) {
      const Bucket& bucket = layout.buckets()[b];
      trace_->AsyncSpan(
          absl::StrFormat(
              "bucket %d (%.2f MiB): handed off -> step synchronized", b,
              bucket.numel * 4 / 1048576.0),
          "bucket", step * 100000 + static_cast<int64_t>(b), bucket_ready_[b],
          finish_end_);
    }
    trace_->Complete(after_sync, "optimizer", kTrackStep, finish_end_,
                     now - finish_end_);
    trace_->Complete(absl::StrCat("step ", step), "step", kTrackStep,
                     step_start_, now - step_start_);
  }

 private:
  TraceRecorder* const trace_;  // null: the step is not traced
  int64_t step_start_ = 0;
  int64_t compute_start_ = 0;
  int64_t last_ready_ = 0;
  int64_t compute_end_ = 0;
  int64_t finish_end_ = 0;
  std::vector<int64_t> bucket_ready_;  // when each bucket was handed off
};

}  // namespace gradsync
