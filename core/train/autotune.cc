// --autotune's candidates, verdict and log lines (see autotune.h).
#include "core/train/autotune.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/status_macros.h"
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

std::string TrialLog(const std::vector<AutotuneTrial>& trials, int chosen) {
  std::string lines;
  for (size_t t = 0; t < trials.size(); ++t) {
    absl::StrAppend(&lines,
                    TrialJsonLine(trials[t], static_cast<int>(t),
                                  static_cast<int>(t) == chosen),
                    "\n");
  }
  return lines;
}

absl::StatusOr<int> AgreeOnFastestTrial(std::vector<AutotuneTrial>& trials,
                                        const std::vector<double>& my_millis,
                                        Rendezvous* rendezvous,
                                        const ProcessIdentity& identity,
                                        absl::Duration timeout) {
  const bool alone = rendezvous == nullptr || identity.world_size == 1;
  std::vector<std::string> gathered = {EncodeTrialMillis(my_millis)};
  if (!alone) {
    ASSIGN_OR_RETURN(gathered,
                     rendezvous->Gather("autotune/step_ms", identity.rank,
                                        identity.world_size, /*root=*/0,
                                        gathered.front(), timeout));
  }
  std::string decision;
  if (identity.rank == 0) {
    for (int rank = 0; rank < static_cast<int>(gathered.size()); ++rank) {
      ASSIGN_OR_RETURN(std::vector<double> millis,
                       DecodeTrialMillis(gathered[rank], rank, trials.size()));
      for (size_t t = 0; t < trials.size(); ++t)
        trials[t].rank_step_ms.push_back(millis[t]);
    }
    decision = absl::StrCat(FastestTrial(trials));
  }
  if (!alone) {
    ASSIGN_OR_RETURN(decision,
                     rendezvous->Broadcast("autotune/choice", identity.rank,
                                           /*root=*/0, decision, timeout));
  }
  int chosen = -1;
  if (!absl::SimpleAtoi(decision, &chosen) || chosen < 0 ||
      chosen >= static_cast<int>(trials.size())) {
    return absl::InternalError(absl::StrCat(
        "--autotune: worker ", identity.rank, " got choice \"", decision,
        "\" from worker 0 for ", trials.size(), " trials"));
  }
  return chosen;
}

}  // namespace gradsync
