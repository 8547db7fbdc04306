// One key's parameters and optimizer on a parameter server that runs the
// optimizer (--ps_update=server): the floats, how many of worker 0's initial
// ones have arrived, and one optimizer per block of the key. The update is
// element-wise, so stepping block by block is the same arithmetic as over the
// whole key; each block's step count (Adam's) advances once per step, so all
// blocks' counts stay equal. Not thread-safe: the key that owns it
// (ps/server/shard_key.h) guards it with its lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/optim/checkpoint.h"
#include "core/optim/optimizer.h"

namespace gradsync {

class KeyParameters {
 public:
  // `device`: the optimizer's (CPU) device, which outlives this. Errors are
  // annotated with `context` ("server 0: registration from worker 1") and
  // the key.
  static absl::StatusOr<std::unique_ptr<KeyParameters>> Create(
      int64_t key, int64_t numel, int64_t block_floats, Device& device,
      const OptimizerOptions& optimizer, const std::string& context);

  int64_t numel() const { return static_cast<int64_t>(params_.size()); }
  // Floats of worker 0's initial parameters received so far.
  int64_t initial_received() const { return initial_received_; }
  bool initialized() const { return initial_received_ == numel(); }
  // Worker 0's next part of the initial parameters: `data` (whole floats)
  // at `offset`, which must continue what arrived. Errors start with
  // `context`.
  absl::Status AddInitial(int64_t offset, const std::string& data,
                          const std::string& context);

  const float* data() const { return params_.data(); }
  // One optimizer step of the block that starts at float `begin` (a
  // multiple of the block size) with `gradient` (that block's floats).
  void StepBlock(int64_t begin, const float* gradient, float lr);

  // How many state buffers each block's optimizer keeps (momentum: 1, Adam:
  // 2).
  size_t state_buffers() const;
  // Copies the parameters and optimizer state into `snapshot` at
  // `shard_offset` (its buffers already sized) and sets its optimizer step.
  // Copies everything it can; returns the first failure.
  absl::Status SaveTo(int64_t shard_offset, Checkpoint& snapshot) const;
  // The reverse, from a checkpoint already checked to fit; all initial
  // parameters count as received.
  absl::Status LoadFrom(const Checkpoint& checkpoint, int64_t shard_offset);

 private:
  KeyParameters(int64_t numel, int64_t block_floats, Device& device);

  const int64_t block_floats_;
  Device& device_;
  std::vector<float> params_;
  int64_t initial_received_ = 0;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;  // one per block
};

}  // namespace gradsync
