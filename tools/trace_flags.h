// --trace and --trace_steps: a Chrome-trace/Perfetto timeline of the first
// steps, read by every process of a job, workers (`gradsync train`) and
// parameter servers (`gradsync server`) alike. A target of its own so that
// the server command and the test mains that run it link these two flags
// without the training command's.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(std::string, trace);
ABSL_DECLARE_FLAG(int64_t, trace_steps);

namespace gradsync {

struct TraceSettings {
  // Empty: no timeline. Workers write <path>.worker<r>.json (worker 0 merges
  // them into <path>), servers <path>.server<k>.json.
  std::string path;
  int64_t steps = 0;  // steps recorded
};

// --trace and --trace_steps, checked (--trace_steps >= 0).
absl::StatusOr<TraceSettings> TraceSettingsFromFlags();

}  // namespace gradsync
