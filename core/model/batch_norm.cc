#include "core/model/batch_norm.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gradsync {

BatchNorm::BatchNorm(std::string name, int channels)
    : name_(std::move(name)), channels_(channels) {}

std::vector<ParamSpec> BatchNorm::ParamSpecs() const {
  return {{absl::StrCat(name_, ".weight"), {channels_}},
          {absl::StrCat(name_, ".bias"), {channels_}}};
}

void BatchNorm::Bind(Device& device, const float* gamma, const float* beta,
                     float* gamma_grad, float* beta_grad, float* buffers,
                     float* saved) {
  device_ = &device;
  gamma_ = gamma;
  beta_ = beta;
  gamma_grad_ = gamma_grad;
  beta_grad_ = beta_grad;
  running_mean_ = buffers;
  running_var_ = buffers + channels_;
  saved_mean_ = saved;
  saved_inv_std_ = saved + channels_;
  device.Fill(running_mean_, channels_, 0.0f);
  device.Fill(running_var_, channels_, 1.0f);
}

void BatchNorm::ForwardTraining(const InputTensor& x, int64_t rows, float* y,
                                const BatchNormEpilogue& epilogue,
                                int64_t plane) {
  device_->BatchNormForwardTraining(
      x, rows, channels_, plane, gamma_, beta_, kMomentum, kEpsilon, y,
      saved_mean_, saved_inv_std_, running_mean_, running_var_, epilogue);
}

void BatchNorm::ForwardInference(const InputTensor& x, int64_t rows, float* y,
                                 const BatchNormEpilogue& epilogue,
                                 int64_t plane) {
  device_->BatchNormForwardInference(x, rows, channels_, plane, gamma_, beta_,
                                     running_mean_, running_var_, kEpsilon, y,
                                     epilogue);
}

void BatchNorm::Backward(const InputTensor& x, const InputTensor& dy,
                         int64_t rows, float* dx, const float* relu_output,
                         uint16_t* dx_bf16, int64_t plane) {
  device_->BatchNormBackward(x, dy, rows, channels_, plane, gamma_, saved_mean_,
                             saved_inv_std_, dx, gamma_grad_, beta_grad_,
                             relu_output, dx_bf16);
}

}  // namespace gradsync
