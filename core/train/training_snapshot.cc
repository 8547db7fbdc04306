// A worker's training state copied to the host and back (training_snapshot.h).
#include "core/train/training_snapshot.h"

#include <utility>

#include "core/base/status_macros.h"

namespace gradsync {

absl::StatusOr<TrainingSnapshot> TakeSnapshot(Device& device,
                                              const float* params,
                                              int64_t num_params,
                                              Optimizer& optimizer,
                                              Model& model) {
  const int64_t bytes = num_params * static_cast<int64_t>(sizeof(float));
  TrainingSnapshot snapshot;
  snapshot.params.resize(num_params);
  RETURN_IF_ERROR(device.CopyToHost(snapshot.params.data(), params, bytes));
  for (float* state : optimizer.StateBuffers()) {
    std::vector<float> host(num_params);
    RETURN_IF_ERROR(device.CopyToHost(host.data(), state, bytes));
    snapshot.optimizer_state.push_back(std::move(host));
  }
  snapshot.optimizer_step = optimizer.step();
  snapshot.model_buffers.resize(model.buffer_count());
  if (!snapshot.model_buffers.empty()) {
    RETURN_IF_ERROR(
        device.CopyToHost(snapshot.model_buffers.data(), model.buffers(),
                          snapshot.model_buffers.size() * sizeof(float)));
  }
  return snapshot;
}

absl::Status RestoreSnapshot(const TrainingSnapshot& snapshot, Device& device,
                             float* params, Optimizer& optimizer,
                             Model& model) {
  const int64_t bytes = snapshot.params.size() * sizeof(float);
  RETURN_IF_ERROR(device.CopyToDevice(params, snapshot.params.data(), bytes));
  const std::vector<float*> state = optimizer.StateBuffers();
  for (size_t i = 0; i < state.size(); ++i) {
    RETURN_IF_ERROR(device.CopyToDevice(
        state[i], snapshot.optimizer_state[i].data(), bytes));
  }
  optimizer.set_step(snapshot.optimizer_step);
  if (!snapshot.model_buffers.empty()) {
    RETURN_IF_ERROR(
        device.CopyToDevice(model.buffers(), snapshot.model_buffers.data(),
                            snapshot.model_buffers.size() * sizeof(float)));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
