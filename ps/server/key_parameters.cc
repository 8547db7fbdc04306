// A key's parameters and per-block optimizers (see key_parameters.h).
#include "ps/server/key_parameters.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {

KeyParameters::KeyParameters(int64_t numel, int64_t block_floats,
                             Device& device)
    : block_floats_(block_floats), device_(device), params_(numel, 0.0f) {}

absl::StatusOr<std::unique_ptr<KeyParameters>> KeyParameters::Create(
    int64_t key, int64_t numel, int64_t block_floats, Device& device,
    const OptimizerOptions& optimizer, const std::string& context) {
  std::unique_ptr<KeyParameters> parameters(
      new KeyParameters(numel, block_floats, device));
  for (int64_t begin = 0; begin < numel; begin += block_floats) {
    absl::StatusOr<std::unique_ptr<Optimizer>> block_optimizer =
        CreateOptimizer(optimizer);
    if (!block_optimizer.ok()) {
      return Annotate(block_optimizer.status(), context);
    }
    RETURN_IF_ERROR(Annotate(
        (*block_optimizer)->Bind(device, std::min(block_floats, numel - begin)),
        absl::StrCat(context, ", key ", key)));
    parameters->optimizers_.push_back(std::move(*block_optimizer));
  }
  return parameters;
}

absl::Status KeyParameters::AddInitial(int64_t offset, const std::string& data,
                                       const std::string& context) {
  const int64_t n = static_cast<int64_t>(data.size() / 4);
  if (offset != initial_received_ || offset + n > numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": part [", offset, ", ", offset + n,
                     ") does not continue the ", initial_received_, " of ",
                     numel(), " floats received"));
  }
  std::memcpy(params_.data() + offset, data.data(), data.size());
  initial_received_ += n;
  return absl::OkStatus();
}

void KeyParameters::StepBlock(int64_t begin, const float* gradient, float lr) {
  optimizers_[begin / block_floats_]->Step(params_.data() + begin, gradient,
                                           lr);
}

size_t KeyParameters::state_buffers() const {
  return optimizers_.empty() ? 0 : optimizers_.front()->StateBuffers().size();
}

absl::Status KeyParameters::SaveTo(int64_t shard_offset,
                                   Checkpoint& snapshot) const {
  absl::Status status;
  std::copy(params_.begin(), params_.end(),
            snapshot.params.begin() + shard_offset);
  for (size_t b = 0; b < optimizers_.size(); ++b) {
    const int64_t begin = static_cast<int64_t>(b) * block_floats_;
    const int64_t count = std::min(block_floats_, numel() - begin);
    const std::vector<float*> state = optimizers_[b]->StateBuffers();
    for (size_t i = 0; i < state.size(); ++i) {
      // The optimizer's device is the CPU: a plain copy.
      absl::Status copied = device_.CopyToHost(
          snapshot.optimizer_state[i].data() + shard_offset + begin, state[i],
          static_cast<size_t>(count) * sizeof(float));
      if (!copied.ok() && status.ok()) status = copied;
    }
    // Every block steps once per step, so all counts are equal.
    snapshot.optimizer_step = optimizers_[b]->step();
  }
  return status;
}

absl::Status KeyParameters::LoadFrom(const Checkpoint& checkpoint,
                                     int64_t shard_offset) {
  std::copy_n(checkpoint.params.begin() + shard_offset, numel(),
              params_.begin());
  initial_received_ = numel();
  for (size_t b = 0; b < optimizers_.size(); ++b) {
    const int64_t begin = static_cast<int64_t>(b) * block_floats_;
    const int64_t count = std::min(block_floats_, numel() - begin);
    const std::vector<float*> state = optimizers_[b]->StateBuffers();
    for (size_t i = 0; i < state.size(); ++i) {
      RETURN_IF_ERROR(device_.CopyToDevice(
          state[i], checkpoint.optimizer_state[i].data() + shard_offset + begin,
          static_cast<size_t>(count) * sizeof(float)));
    }
    optimizers_[b]->set_step(checkpoint.optimizer_step);
  }
  return absl::OkStatus();
}

}  // namespace gradsync
