// A model's step as the simulator replays it: forward, the buckets of
// backward with the time each becomes ready, the optimizer. Read from a
// profile file (sim/profiles/: per-tensor gradient-ready times measured with
// CUDA events) and cut into buckets as DDP and gradsync's trainer cut them:
// tensors in reverse registration order (backward's order), a bucket closed
// once it holds at least the cap, ready when its last tensor is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {
namespace sim {

struct Bucket {
  int64_t bytes = 0;
  double ready_ms = 0;  // from the start of backward
  // Its tensors, [first_tensor, end_tensor) in registration (forward)
  // order: what the PS's keys are cut from (sim/ps_plan.h).
  int first_tensor = 0;
  int end_tensor = 0;
};

struct StepProfile {
  std::string name;  // "resnet50-b128-fp32"
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;
  int64_t gradient_bytes = 0;
  std::vector<int64_t> tensor_bytes;  // in registration (forward) order
  std::vector<Bucket> buckets;  // in the order backward makes them ready
};

// Parses a profile's JSON text (sim/profiles/README.md: forward_ms,
// backward_ms, optimizer_ms, params[{name, numel, ready_ms}]) into buckets
// of float32 gradients capped at `bucket_bytes`. `source` names the file in
// errors.
absl::StatusOr<StepProfile> ParseProfile(const std::string& json_text,
                                         int64_t bucket_bytes,
                                         const std::string& source);

// A model of `gradient_bytes` in `tensors` equal tensors and no compute: a
// step is its communication (gradsync's --model=custom).
StepProfile CustomProfile(int64_t gradient_bytes, int tensors,
                          int64_t bucket_bytes);

}  // namespace sim
}  // namespace gradsync
