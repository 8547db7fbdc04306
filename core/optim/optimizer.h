// Optimizers over the flat parameter buffer, running on the device.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/optim/optimizer_options.h"

namespace gradsync {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Allocates state (velocity, moments) for `count` parameters on `device`.
  virtual absl::Status Bind(Device& device, int64_t count) = 0;
  // params -= update(grads); `lr` is the learning rate for this step.
  virtual void Step(float* params, const float* grads, float lr) = 0;
  // The same step applied in pieces, as each bucket's gradient becomes final
  // (the trainer's layer-wise start of the next step): BeginStep once, then
  // UpdateRange over disjoint ranges that together cover every parameter.
  // The update is elementwise, so the pieces give exactly Step's result.
  virtual void BeginStep() = 0;
  // The floats [offset, offset + count) of `params` (and of the state)
  // updated from the same range of `grads`.
  virtual void UpdateRange(float* params, const float* grads, float lr,
                           int64_t offset, int64_t count) = 0;
  virtual std::string name() const = 0;
  // The optimizer's state (for checkpoints): pointers to device buffers of
  // `count` floats each, and the step counter.
  virtual std::vector<float*> StateBuffers() = 0;
  virtual int64_t step() const = 0;
  virtual void set_step(int64_t step) = 0;
};

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& options);

// The learning rate for `world_size` workers: "linear" multiplies by the world
// size (Goyal et al., 2017), "none" keeps it.
absl::StatusOr<float> ScaleLearningRate(float lr, const std::string& scaling,
                                        int world_size);

}  // namespace gradsync
