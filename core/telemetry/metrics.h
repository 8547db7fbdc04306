// Per-step and per-epoch measurements as JSON lines, one file per rank
// (<metrics_dir>/worker<r>.jsonl), and the aggregation of every rank's figures
// into one run summary (<metrics_dir>/summary.json) on worker 0.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct StepRecord {
  int rank = 0;
  int64_t step = 0;  // global step, from 0
  int64_t epoch = 0;
  double loss = 0;
  double step_ms = 0;     // whole step, data loading to optimizer
  // Forward + backward (bucket hand-offs included), on the device's clock
  // where the trainer runs it (docs/metrics.md).
  double compute_ms = 0;
  // Exposed communication: the wait for synchronization beyond compute.
  double sync_wait_ms = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_recv = 0;
  double samples_per_s = 0;  // this rank's samples / step_ms
  std::vector<std::pair<std::string, double>> extra;  // strategy's own figures
};

struct EpochRecord {
  int rank = 0;
  int64_t epoch = 0;
  int64_t steps = 0;
  double mean_loss = 0;
  double seconds = 0;
  double samples_per_s = 0;   // this rank
  double test_accuracy = -1;  // worker 0 only; -1 when not evaluated
};

// Running totals of a rank's steps, for the summary. The first steps are
// warm-up (connection set-up, page faults) and are left out of the means.
// Worker 0's evaluation every --eval_every steps.
struct EvalRecord {
  int64_t step = 0;         // steps done
  double seconds = 0;       // since the run's first step
  double eval_seconds = 0;  // of which spent evaluating, these included
  double test_accuracy = 0;
};

struct RankTotals {
  int64_t steps = 0;
  int64_t measured_steps = 0;
  double step_ms = 0, compute_ms = 0, sync_wait_ms = 0;
  int64_t bytes_sent = 0, bytes_recv = 0;
  int64_t samples = 0;
  double seconds = 0;
  void Add(const StepRecord& record, int64_t samples_in_step, bool measured);
};

class MetricsWriter {
 public:
  // An empty `dir` disables writing (totals are still kept by the caller).
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(
      const std::string& dir, int rank);
  ~MetricsWriter();

  void WriteStep(const StepRecord& record);
  void WriteEpoch(const EpochRecord& record);
  void WriteEval(const EvalRecord& record);
  const std::string& path() const { return path_; }

 private:
  MetricsWriter() = default;
  void WriteLine(const std::string& line);
  FILE* file_ = nullptr;
  std::string path_;
};

// This rank's figures as a JSON object (text), for gathering on worker 0.
std::string RankSummaryJson(int rank, const RankTotals& totals,
                            const std::string& sync_json);

// Combines the ranks' summaries with the manifest and the run's results into
// one JSON document, and prints nothing. `rank_jsons` are RankSummaryJson()s.
std::string RunSummaryJson(const std::string& manifest_json,
                           const std::vector<std::string>& rank_jsons,
                           const std::string& strategy, int world_size,
                           int num_servers, const std::string& model,
                           double final_accuracy, double wall_seconds);

}  // namespace gradsync
