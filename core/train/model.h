// A model: parameters described by ParamSpecs (forward order) and a
// forward/backward pass over device buffers. Models know nothing about
// communication; they report each parameter's gradient as final through a
// callback, and the trainer turns that into GradientSync::BucketReady.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"

namespace gradsync {

// Called with a parameter index (into ParamLayout::params()) once its gradient
// is final for this step.
using GradReadyCallback = std::function<void(int param)>;

class Model {
 public:
  virtual ~Model() = default;

  virtual std::string name() const = 0;
  // The parameters in forward order.
  virtual std::vector<ParamSpec> ParamSpecs() const = 0;
  virtual int input_dim() const = 0;
  virtual int num_classes() const = 0;

  // Binds the model to its flat parameter and gradient buffers (device memory
  // laid out by `layout`) and allocates activations for up to `max_batch` rows.
  virtual absl::Status Bind(Device& device, const ParamLayout& layout,
                            float* params, float* grads, int max_batch) = 0;

  // Writes the initial parameters for `seed` into `host_params` (host memory,
  // layout.total_numel() floats). Identical on every rank for the same seed.
  virtual void InitParams(uint64_t seed, const ParamLayout& layout,
                          float* host_params) const = 0;

  // Forward and backward on `batch` rows: inputs [batch × input_dim] and labels
  // on the device. Overwrites the gradient buffer; writes the mean loss to
  // *device_loss (one device float). Calls `ready` for each parameter as soon
  // as its gradient is final, last layer first.
  virtual absl::Status ForwardBackward(const float* inputs,
                                       const int32_t* labels, int batch,
                                       float* device_loss,
                                       const GradReadyCallback& ready) = 0;

  // Forward only; leaves logits [batch × num_classes] in *logits (device
  // memory owned by the model, valid until the next call).
  virtual absl::Status Forward(const float* inputs, int batch,
                               const float** logits) = 0;
};

struct MlpOptions {
  std::vector<int> widths = {784, 512, 256, 10};  // input, hidden..., classes
};

// Fully connected layers with ReLU between them and softmax cross-entropy on
// the logits. Parameters: fc{i}.weight [out × in], fc{i}.bias [out].
absl::StatusOr<std::unique_ptr<Model>> CreateMlp(const MlpOptions& options);

// Parses "784,512,256,10"; every width must be >= 1 and there must be at
// least two (input and classes).
absl::StatusOr<std::vector<int>> ParseLayerWidths(const std::string& text);

}  // namespace gradsync
