// --autotune's candidates, verdict and log lines (see autotune.h).
#include "core/train/autotune.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/sync/bucket_size_rule.h"
#include "nlohmann/json.hpp"

namespace gradsync {

std::vector<int64_t> BucketCandidates(int64_t derived_bytes) {
  std::vector<int64_t> candidates;
  for (double factor : {1.0, 0.25, 0.5, 2.0, 4.0}) {
    int64_t bytes = static_cast<int64_t>(std::llround(derived_bytes * factor));
    bytes = std::clamp(bytes, kMinAutotuneBucketBytes, kMaxBucketBytes);
    bytes = std::max<int64_t>(1024, bytes / 1024 * 1024);
    if (std::find(candidates.begin(), candidates.end(), bytes) ==
        candidates.end()) {
      candidates.push_back(bytes);
    }
  }
  return candidates;
}

double AutotuneTrial::step_ms() const {
  return rank_step_ms.empty()
             ? 0
             : *std::max_element(rank_step_ms.begin(), rank_step_ms.end());
}

int FastestTrial(const std::vector<AutotuneTrial>& trials) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(trials.size()); ++i) {
    if (best < 0 || trials[i].step_ms() < trials[best].step_ms()) best = i;
  }
  return best;
}

std::string TrialJsonLine(const AutotuneTrial& trial, int index, bool chosen) {
  const double step_ms = trial.step_ms();
  nlohmann::ordered_json line = {
      {"trial", index},
      {"bucket_mb", trial.bucket_bytes / 1048576.0},
      {"buckets", trial.num_buckets},
      {"steps", trial.steps},
      {"step_ms", step_ms},
      {"rank_step_ms", trial.rank_step_ms},
      {"samples_per_s", step_ms > 0 ? trial.samples / (step_ms / 1000.0) : 0.0},
      {"chosen", chosen},
  };
  return line.dump();
}

std::string AutotuneSource(const std::vector<AutotuneTrial>& trials,
                           int chosen) {
  std::vector<std::string> parts;
  for (const AutotuneTrial& trial : trials) {
    parts.push_back(absl::StrFormat(
        "%.3g MiB %.1f ms", trial.bucket_bytes / 1048576.0, trial.step_ms()));
  }
  return absl::StrCat("autotune: fastest of ", trials.size(),
                      " trials by the slowest rank's step (",
                      absl::StrJoin(parts, ", "), "); trial ", chosen);
}

std::string EncodeTrialMillis(const std::vector<double>& millis) {
  std::vector<std::string> parts;
  for (double ms : millis) parts.push_back(absl::StrFormat("%.6f", ms));
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::vector<double>> DecodeTrialMillis(const std::string& text,
                                                      int rank,
                                                      size_t expected) {
  std::vector<double> millis;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double ms = 0;
    if (!absl::SimpleAtod(part, &ms) || !(ms >= 0)) {
      return absl::InternalError(
          absl::StrCat("--autotune: worker ", rank, " sent step time \"", part,
                       "\", not a number of milliseconds"));
    }
    millis.push_back(ms);
  }
  if (millis.size() != expected) {
    return absl::InternalError(
        absl::StrCat("--autotune: worker ", rank, " timed ", millis.size(),
                     " trials, worker 0 ", expected,
                     "; every worker must run the same binary and flags"));
  }
  return millis;
}

}  // namespace gradsync
