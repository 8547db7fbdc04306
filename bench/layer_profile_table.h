// The tables bench/layer_profile prints and writes: a model step's profiled
// operations (core/device/profiling_device.h), repeated over several steps,
// reduced to medians per operation, per label (same kind and shape) and per
// category, each with its share of the profiled step.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/profiling_device.h"
#include "nlohmann/json.hpp"

namespace gradsync {

// One row: a label's or a category's operations.
struct ProfileRow {
  std::string name;
  int calls = 0;       // operations a step under this name
  double ms = 0;       // the median over steps of their summed time
  double share = 0;    // ms / the profiled step's median total
  double host_ms = 0;  // the same median of their host time (ProfiledOp)
};

struct ProfileTable {
  int steps = 0;
  double total_ms = 0;          // the median over steps of all operations' time
  double host_total_ms = 0;     // the same of their host time
  std::vector<ProfiledOp> ops;  // in queue order, each its median
  std::vector<ProfileRow> labels;      // by ms, largest first
  std::vector<ProfileRow> categories;  // by ms, largest first
};

// The median of `values` (the mean of the middle two for an even count; 0
// for none).
double MedianOf(std::vector<double> values);

// From every profiled step's operations. The steps must queue the same
// operations in the same order (a model's step does); an error names the
// first step and position that differ.
absl::StatusOr<ProfileTable> SummarizeProfile(
    const std::vector<std::vector<ProfiledOp>>& steps);

// The categories, then the `top` largest labels, as aligned text: calls a
// step, host ms, ms/step and share (the last two the device's, the columns
// tools/gpu_check.sh and tools/gpu_results.py read from the right).
std::string FormatProfile(const ProfileTable& table, int top);

// Everything, for --out.
nlohmann::json ProfileJson(const ProfileTable& table);

}  // namespace gradsync
