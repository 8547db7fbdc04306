// SGD with momentum and Adam over the flat parameter buffer, with PyTorch's
// update rules, running on the device's update kernels; option validation and
// learning-rate scaling for data-parallel runs.
#include "core/optim/optimizer.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

absl::Status CheckCount(const std::string& name, int64_t count) {
  if (count < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": Bind with ", count, " parameters; need at least one"));
  }
  return absl::OkStatus();
}

class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(const OptimizerOptions& options)
      : momentum_(options.momentum), weight_decay_(options.weight_decay) {}

  absl::Status Bind(Device& device, int64_t count) override {
    RETURN_IF_ERROR(CheckCount(name(), count));
    // Plain SGD keeps no state; the velocity is zero-filled, which makes the
    // first step's v = momentum·0 + g = g, PyTorch's initialisation.
    if (momentum_ > 0.0f) {
      ASSIGN_OR_RETURN(velocity_, device.Allocate<float>(count));
    }
    device_ = &device;
    count_ = count;
    return absl::OkStatus();
  }

  void Step(float* params, const float* grads, float lr) override {
    BeginStep();
    UpdateRange(params, grads, lr, 0, count_);
  }
  void BeginStep() override {
    GS_CHECK(device_ != nullptr) << name() << ": Step before Bind";
    ++step_;
  }
  void UpdateRange(float* params, const float* grads, float lr, int64_t offset,
                   int64_t count) override {
    GS_CHECK(device_ != nullptr) << name() << ": Step before Bind";
    GS_CHECK(offset >= 0 && count >= 0 && offset + count <= count_)
        << name() << ": range [" << offset << ", " << offset + count
        << ") outside " << count_ << " parameters";
    if (count == 0) return;
    device_->SgdUpdate(params + offset, grads + offset,
                       velocity_ == nullptr ? nullptr : velocity_ + offset,
                       count, lr, momentum_, weight_decay_);
  }

  std::string name() const override { return "sgd"; }
  std::vector<float*> StateBuffers() override {
    if (velocity_ == nullptr) return {};
    return {velocity_};
  }
  int64_t step() const override { return step_; }
  void set_step(int64_t step) override { step_ = step; }

 private:
  const float momentum_;
  const float weight_decay_;
  Device* device_ = nullptr;
  int64_t count_ = 0;
  float* velocity_ = nullptr;
  int64_t step_ = 0;
};

class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(const OptimizerOptions& options)
      : weight_decay_(options.weight_decay) {
    state_.beta1 = options.beta1;
    state_.beta2 = options.beta2;
    state_.epsilon = options.epsilon;
  }

  absl::Status Bind(Device& device, int64_t count) override {
    RETURN_IF_ERROR(CheckCount(name(), count));
    ASSIGN_OR_RETURN(m_, device.Allocate<float>(count));
    ASSIGN_OR_RETURN(v_, device.Allocate<float>(count));
    device_ = &device;
    count_ = count;
    return absl::OkStatus();
  }

  void Step(float* params, const float* grads, float lr) override {
    BeginStep();
    UpdateRange(params, grads, lr, 0, count_);
  }
  void BeginStep() override {
    GS_CHECK(device_ != nullptr) << name() << ": Step before Bind";
    // Bias correction counts this step, starting at 1.
    ++state_.step;
  }
  void UpdateRange(float* params, const float* grads, float lr, int64_t offset,
                   int64_t count) override {
    GS_CHECK(device_ != nullptr) << name() << ": Step before Bind";
    GS_CHECK(offset >= 0 && count >= 0 && offset + count <= count_)
        << name() << ": range [" << offset << ", " << offset + count
        << ") outside " << count_ << " parameters";
    if (count == 0) return;
    device_->AdamUpdate(params + offset, grads + offset, m_ + offset,
                        v_ + offset, count, lr, state_, weight_decay_);
  }

  std::string name() const override { return "adam"; }
  std::vector<float*> StateBuffers() override { return {m_, v_}; }
  int64_t step() const override { return state_.step; }
  void set_step(int64_t step) override { state_.step = step; }

 private:
  const float weight_decay_;
  AdamState state_;
  Device* device_ = nullptr;
  int64_t count_ = 0;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

// NaN compares false with everything, so each check is written to fail on it.
bool InHalfOpenUnit(float x) { return x >= 0.0f && x < 1.0f; }

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& options) {
  if (options.kind != "sgd" && options.kind != "adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --optimizer=", options.kind, "; choose sgd or adam"));
  }
  if (!(options.lr > 0.0f) || !std::isfinite(options.lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr=", options.lr, " must be a finite number > 0"));
  }
  if (!(options.weight_decay >= 0.0f) || !std::isfinite(options.weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_decay=", options.weight_decay,
                     " must be a finite number >= 0"));
  }
  if (options.kind == "sgd") {
    if (!InHalfOpenUnit(options.momentum)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--momentum=", options.momentum, " must be in [0, 1)"));
    }
    return std::unique_ptr<Optimizer>(std::make_unique<SgdOptimizer>(options));
  }
  if (!InHalfOpenUnit(options.beta1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adam beta1=", options.beta1, " must be in [0, 1)"));
  }
  if (!InHalfOpenUnit(options.beta2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adam beta2=", options.beta2, " must be in [0, 1)"));
  }
  if (!(options.epsilon > 0.0f) || !std::isfinite(options.epsilon)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adam epsilon=", options.epsilon, " must be a finite number > 0"));
  }
  return std::unique_ptr<Optimizer>(std::make_unique<AdamOptimizer>(options));
}

absl::StatusOr<float> ScaleLearningRate(float lr, const std::string& scaling,
                                        int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning-rate scaling: world size ", world_size, " must be >= 1"));
  }
  if (scaling == "linear") return lr * static_cast<float>(world_size);
  if (scaling == "none") return lr;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --lr_scaling=", scaling, "; choose linear or none"));
}

}  // namespace gradsync
