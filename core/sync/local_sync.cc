// --sync=local: a single worker has nothing to synchronize. It is the reference
// every other strategy is compared with (same model, same data order, N x
// batch). With --compression it still encodes and decodes every bucket (with
// error feedback, saved in checkpoints: error_feedback.h), so one worker is
// also the reference for compressed training.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/sync/compression.h"
#include "core/sync/error_feedback.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {
namespace {

class LocalSync : public GradientSync {
 public:
  explicit LocalSync(const SyncContext& context)
      : compressor_(context.compression, context.compression_seed),
        error_feedback_(context.compression, context.identity.rank,
                        context.identity.world_size) {}

  void SetTrainingSchedule(const TrainingSchedule& schedule) override {
    schedule_ = schedule;
    step_ = schedule.start_step;
  }
  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override {
    device_ = &device;
    grads_ = buffers.grads;
    buckets_ = layout.buckets();
    return error_feedback_.Setup(layout.total_numel(), schedule_);
  }
  void BucketReady(int) override {}
  absl::Status Finish(StepStats&) override {
    if (compressor_.spec().method == CompressionMethod::kNone) {
      ++step_;
      return absl::OkStatus();
    }
    // Whole-buffer copies: one worker has no communication to overlap.
    int64_t total = 0;
    for (const Bucket& bucket : buckets_) {
      total = std::max(total, bucket.offset + bucket.numel);
    }
    host_.resize(total);
    absl::Status status =
        device_->CopyToHost(host_.data(), grads_, total * sizeof(float));
    if (!status.ok()) return status;
    EncodedBucket encoded;
    for (const Bucket& bucket : buckets_) {
      absl::Span<float> gradient =
          absl::MakeSpan(host_).subspan(bucket.offset, bucket.numel);
      status = compressor_.Encode(
          gradient, error_feedback_.Of(bucket.offset, bucket.numel), step_,
          bucket.index, &encoded);
      if (!status.ok()) return status;
      std::fill(gradient.begin(), gradient.end(), 0.0f);
      status = AddDecoded(encoded, gradient);
      if (!status.ok()) return status;
    }
    status = device_->CopyToDevice(grads_, host_.data(), total * sizeof(float));
    if (!status.ok()) return status;
    ++step_;
    return error_feedback_.AfterStep(step_);
  }
  // Nothing depends on the buckets but the codec's, regrouped here; the
  // residual is per element (error_feedback.h).
  absl::Status Rebucket(const ParamLayout& layout) override {
    buckets_ = layout.buckets();
    return absl::OkStatus();
  }
  std::string SummaryJson() const override {
    return absl::StrCat("{\"compression\":\"", compressor_.spec().ToString(),
                        "\"}");
  }

 private:
  Compressor compressor_;
  ErrorFeedback error_feedback_;
  TrainingSchedule schedule_;
  int64_t step_ = 0;
  Device* device_ = nullptr;
  float* grads_ = nullptr;
  std::vector<Bucket> buckets_;
  std::vector<float> host_;
};

absl::Status CheckLocalSync(const SyncContext& context) {
  if (context.identity.world_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync=local runs one worker, but the job has ",
                     context.identity.world_size,
                     "; choose --sync=ps or --sync=ring for several workers"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateLocalSync(
    const SyncContext& context) {
  RETURN_IF_ERROR(CheckLocalSync(context));
  return std::unique_ptr<GradientSync>(new LocalSync(context));
}

}  // namespace

GRADSYNC_REGISTER_SYNC(local, CreateLocalSync);
[[maybe_unused]] static const bool local_check_registered =
    GradientSyncRegistry::RegisterCheck("local", CheckLocalSync);

}  // namespace gradsync
