// The timeline flags (see trace_flags.h).
#include "tools/trace_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, trace, "",
          "write a Chrome-trace/Perfetto timeline (compute per tensor, bucket "
          "hand-offs, Finish waits) of the first --trace_steps steps: "
          "<path>.worker<r>.json per rank, merged into <path> by worker 0; "
          "parameter servers write <path>.server<k>.json");
ABSL_FLAG(int64_t, trace_steps, 20, "steps recorded by --trace");

namespace gradsync {

absl::StatusOr<TraceSettings> TraceSettingsFromFlags() {
  TraceSettings settings;
  settings.path = absl::GetFlag(FLAGS_trace);
  settings.steps = absl::GetFlag(FLAGS_trace_steps);
  if (settings.steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_steps=", settings.steps, " must be >= 0"));
  }
  return settings;
}

}  // namespace gradsync
