// A copy of what a training step changes on a worker — parameters, optimizer
// state and step, the model's buffers — taken before steps that must leave
// no trace (--autotune's trials) and put back after them.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"

namespace gradsync {

struct TrainingSnapshot {
  std::vector<float> params;
  std::vector<std::vector<float>> optimizer_state;
  int64_t optimizer_step = 0;
  std::vector<float> model_buffers;  // batch-norm running statistics
};

// Copies `num_params` parameters at `params` (on `device`), `optimizer`'s
// state buffers and step, and `model`'s buffers to the host.
absl::StatusOr<TrainingSnapshot> TakeSnapshot(Device& device,
                                              const float* params,
                                              int64_t num_params,
                                              Optimizer& optimizer,
                                              Model& model);

// Puts `snapshot` back where TakeSnapshot found it.
absl::Status RestoreSnapshot(const TrainingSnapshot& snapshot, Device& device,
                             float* params, Optimizer& optimizer,
                             Model& model);

}  // namespace gradsync
