// Worker 0's progress line (progress_line.h).
#include "core/train/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace gradsync {

std::string ProgressLine(int64_t step, int64_t total_steps, int64_t epoch,
                         int64_t epochs, double loss,
                         double global_samples_per_s, double eta_seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, eta_seconds));
  return absl::StrFormat(
      "step %d/%d  epoch %d/%d  loss %.4f  %.0f samples/s  ETA %d:%02d:%02d",
      step, total_steps, epoch, epochs, loss, global_samples_per_s, s / 3600,
      (s / 60) % 60, s % 60);
}

void PrintProgressLine(const std::string& line, bool final_line) {
  if (isatty(STDERR_FILENO)) {
    fprintf(stderr, "\r%s%s", line.c_str(), final_line ? "\n" : "");
  } else {
    fprintf(stderr, "%s\n", line.c_str());
  }
  fflush(stderr);
}

}  // namespace gradsync
