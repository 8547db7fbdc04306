// Test-only: a model bound on the CPU to its own flat buffers, initialised
// from a seed, with random images and labels of its input shape; and the
// check every model test makes, each parameter's gradient against central
// differences. Shared by the CNN and ResNet tests.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device/cpu_device.h"
#include "core/sync/param_layout.h"
#include "core/model/gradient_check.h"
#include "core/model/model.h"

namespace gradsync {

struct BoundModel {
  // Binds `created` for batches up to `batch` (a failure is a test failure)
  // and fills inputs uniformly in [-1, 1] and labels 0, 1, ... round the
  // classes. `reference`: the device's reference paths instead of oneDNN
  // (im2col + GEMM for convolutions, kernel_math.h's loops for batch norm).
  BoundModel(std::unique_ptr<Model> created, int batch, uint64_t seed,
             bool reference = false);

  // ForwardBackward on the first `batch` rows: the loss, gradients in grads.
  double Loss(int batch);

  CpuDevice device;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamLayout> layout;
  float* params = nullptr;
  float* grads = nullptr;
  std::vector<float> inputs;
  std::vector<int32_t> labels;
};

// Runs one ForwardBackward on `batch` rows and checks every parameter's
// gradient against central differences of the loss, each reported under the
// parameter's name.
void ExpectModelGradientsMatch(BoundModel& bound, int batch,
                               const GradientCheckOptions& options);

}  // namespace gradsync
