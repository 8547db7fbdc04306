// The --trace timeline of one training step, recorded by the trainer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sync/param_layout.h"
#include "core/telemetry/trace.h"
#include "core/train/step_timing.h"

namespace gradsync {

// The --trace timeline of one step (core/telemetry/trace.h), in wall-clock
// microseconds: data loading, each tensor's backward, compute, the exposed
// wait in Finish, each bucket from hand-off to the step's synchronization,
// and the optimizer. The calls below take their times from the host's clock
// as they are made; UseTimes then replaces the compute times by the device's
// (step_timing.h), which on a GPU are when the work ran rather than when it
// was queued. Spans are written at StepDone. Every call does nothing when the
// step is not traced.
class StepTimeline {
 public:
  StepTimeline(TraceRecorder* trace, int num_buckets) : trace_(trace) {
    if (trace_ == nullptr) return;
    step_start_ = TraceRecorder::NowMicros();
    bucket_ready_.assign(num_buckets, 0);
  }

  // Whether this step is traced.
  bool active() const { return trace_ != nullptr; }

  void DataLoaded() {
    if (trace_ == nullptr) return;
    compute_start_ = TraceRecorder::NowMicros();
  }

  // `tensor`'s gradient is final; `completes_bucket`: it was the last one of
  // `bucket`.
  void GradientFinal(const std::string& tensor, int bucket,
                     bool completes_bucket) {
    if (trace_ == nullptr) return;
    const int64_t now = TraceRecorder::NowMicros();
    tensor_final_.push_back({tensor, now});
    if (completes_bucket) bucket_ready_[bucket] = now;
  }

  void ComputeDone() {
    if (trace_ != nullptr) compute_end_ = TraceRecorder::NowMicros();
  }
  void SyncDone() {
    if (trace_ != nullptr) finish_end_ = TraceRecorder::NowMicros();
  }

  // The step's times on the device's clock put on the host's, in ms since
  // this timeline was made (the step's start): forward's start, each
  // tensor's and each bucket's gradient final, the end of compute and of
  // synchronization. Tensors and buckets are replaced only where `times`
  // has one for each (a step that recorded no per-tensor marks keeps the
  // host's).
  void UseTimes(const StepTimes& times) {
    if (trace_ == nullptr) return;
    auto at = [this](double ms) {
      return step_start_ + static_cast<int64_t>(std::llround(ms * 1000));
    };
    compute_start_ = at(times.compute_start_ms);
    compute_end_ = at(times.compute_end_ms);
    finish_end_ = at(times.sync_end_ms);
    if (times.tensor_final_ms.size() == tensor_final_.size()) {
      for (size_t i = 0; i < tensor_final_.size(); ++i)
        tensor_final_[i].at_us = at(times.tensor_final_ms[i]);
    }
    if (times.bucket_ready_ms.size() == bucket_ready_.size()) {
      for (size_t b = 0; b < bucket_ready_.size(); ++b)
        bucket_ready_[b] = at(times.bucket_ready_ms[b]);
    }
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
    trace_->Complete("data", "data", kTrackStep, step_start_,
                     compute_start_ - step_start_);
    // The time since the previous gradient became final is this tensor's
    // backward (the first one also holds the forward pass).
    int64_t last_ready = compute_start_;
    for (const TensorFinal& tensor : tensor_final_) {
      trace_->Complete(tensor.name, "backward", kTrackCompute, last_ready,
                       tensor.at_us - last_ready);
      last_ready = tensor.at_us;
    }
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
    // On a GPU the optimizer's span also holds the wait for the GPU at the
    // step's end (the loss copied to the host).
    const int64_t optimizer_start = std::min(finish_end_, now);
    trace_->Complete(after_sync, "optimizer", kTrackStep, optimizer_start,
                     now - optimizer_start);
    trace_->Complete(absl::StrCat("step ", step), "step", kTrackStep,
                     step_start_, now - step_start_);
  }

 private:
  struct TensorFinal {
    std::string name;
    int64_t at_us;
  };

  TraceRecorder* const trace_;  // null: the step is not traced
  int64_t step_start_ = 0;
  int64_t compute_start_ = 0;
  int64_t compute_end_ = 0;
  int64_t finish_end_ = 0;
  std::vector<TensorFinal> tensor_final_;  // in hand-off order
  std::vector<int64_t> bucket_ready_;      // when each bucket was handed off
};

}  // namespace gradsync
