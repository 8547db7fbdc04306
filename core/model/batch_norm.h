// Batch normalisation over the channels of NHWC activations ([rows ×
// channels], core/device/layer_geometry.h) or NCHW ones ([rows/plane ×
// channels × plane], `plane` = height·width), as PyTorch's BatchNorm2d:
// training mode normalises with the batch's statistics and moves the running
// statistics (momentum 0.1, eps 1e-5); inference mode (evaluation) uses the
// running statistics.
//
// The batch statistics are this worker's: with data parallelism each worker
// normalises over its own share of the global batch, as DDP does without
// SyncBatchNorm. The running statistics are buffers, not parameters: they get
// no gradient, are not synchronized by the strategies, and differ between
// workers during training (core/train/README.md says how evaluation and
// checkpoints treat them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/sync/param_layout.h"

namespace gradsync {

class BatchNorm {
 public:
  static constexpr float kMomentum = 0.1f;
  static constexpr float kEpsilon = 1e-5f;

  BatchNorm(std::string name, int channels);

  const std::string& name() const { return name_; }
  int channels() const { return channels_; }
  // <name>.weight (γ) [channels], <name>.bias (β) [channels].
  std::vector<ParamSpec> ParamSpecs() const;
  // Floats of buffer this layer keeps: running mean and running variance.
  int64_t buffer_count() const { return 2 * int64_t{channels_}; }

  // `buffers` holds buffer_count() floats of device memory (running mean,
  // then running variance); Bind sets them to PyTorch's initial 0 and 1.
  // `saved` is scratch of 2·channels floats for the batch statistics the
  // backward needs.
  void Bind(Device& device, const float* gamma, const float* beta,
            float* gamma_grad, float* beta_grad, float* buffers, float* saved);

  // x (and the backward's dy): float32, or a convolution's bf16 output (input
  // gradient), device.h's InputTensor.
  // `epilogue` (device.h): a residual added and/or a ReLU applied to y in
  // the same pass.
  // `plane`: 1 for NHWC x (and y), height·width for NCHW (Device's
  // batch-norm comment); rows counts one channel's values either way.
  void ForwardTraining(const InputTensor& x, int64_t rows, float* y,
                       const BatchNormEpilogue& epilogue = {},
                       int64_t plane = 1);
  void ForwardInference(const InputTensor& x, int64_t rows, float* y,
                        const BatchNormEpilogue& epilogue = {},
                        int64_t plane = 1);
  // After ForwardTraining on the same x: overwrites the γ and β gradients and
  // dx (which must not alias x or dy). With `relu_output`, the forward's
  // epilogue ended in a ReLU with that output, and dy is the ReLU's output
  // gradient (masked on reading; dy is not written). With `dx_bf16`, dx is
  // also (dx null: only) written there rounded to bfloat16, for a
  // convolution that takes bf16 operands (Device::BatchNormBackward).
  void Backward(const InputTensor& x, const InputTensor& dy, int64_t rows,
                float* dx, const float* relu_output = nullptr,
                uint16_t* dx_bf16 = nullptr, int64_t plane = 1);

 private:
  const std::string name_;
  const int channels_;
  Device* device_ = nullptr;
  const float* gamma_ = nullptr;
  const float* beta_ = nullptr;
  float* gamma_grad_ = nullptr;
  float* beta_grad_ = nullptr;
  float* running_mean_ = nullptr;
  float* running_var_ = nullptr;
  float* saved_mean_ = nullptr;
  float* saved_inv_std_ = nullptr;
};

}  // namespace gradsync
