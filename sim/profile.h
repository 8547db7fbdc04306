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
  // From a run folder (ParseRunTrace): how many traced steps the figures
  // are the median of; 0 for the other profiles.
  int traced_steps = 0;
};

// Parses a profile's JSON text (sim/profiles/README.md: forward_ms,
// backward_ms, optimizer_ms, params[{name, numel, ready_ms}]) into buckets
// of float32 gradients capped at `bucket_bytes`. `source` names the file in
// errors.
absl::StatusOr<StepProfile> ParseProfile(const std::string& json_text,
                                         int64_t bucket_bytes,
                                         const std::string& source);

// A step of a run folder's timeline (`--trace=RUN/trace.json` of gradsync
// train or launch, or of a PyTorch job behind gradsync's DDP hook: the same
// events, core/train/step_timeline.h), from worker 0's traced steps: the
// buckets as the run cut them, each ready when its span begins ("bucket B
// (M MiB): handed off -> ..."), from the start of its "forward+backward"
// span, which is the profile's backward (the trace does not split forward
// from backward: forward_ms is 0); the "optimizer" span's length. Each
// figure is the median over the steps that hold the last step's buckets and
// a forward+backward span (traced_steps says how many), so one step slowed
// by the machine does not become the profile. A bucket's bytes come from
// `layout_json` (the folder's layout.json) where given, else from its span's
// MiB in the last step (to 0.01 MiB). `source` names the folder in errors.
absl::StatusOr<StepProfile> ParseRunTrace(const std::string& trace_json,
                                          const std::string& layout_json,
                                          const std::string& source);

// A run folder: its trace.json (or worker 0's trace.worker0.json) and its
// layout.json if there is one, through ParseRunTrace. NotFound naming the
// folder when it has no trace.
absl::StatusOr<StepProfile> ReadRunProfile(const std::string& folder);

// A model of `gradient_bytes` in `tensors` equal tensors and no compute: a
// step is its communication (gradsync's --model=custom).
StepProfile CustomProfile(int64_t gradient_bytes, int tensors,
                          int64_t bucket_bytes);

}  // namespace sim
}  // namespace gradsync
