// What a PyTorch worker leaves in its run folder: the same files a native
// worker's trainer writes, made by the same code (core/telemetry,
// core/train), so that bench/scaling.py, `gradsync compare` and the plots
// read a Python job like a native one:
//   <metrics_dir>/worker<r>.jsonl  one "step" line per step (MetricsWriter)
//   <metrics_dir>/layout.json      the strategy's buckets (DDP's), worker 0
//   <metrics_dir>/summary.json     every worker's figures and the manifest
//                                  (flags, derived settings, commit), worker 0
//   <trace>, <trace>.worker<r>.json  the --trace timeline, merged on worker 0
// and, given the run's length, worker 0's progress line on the console
// (core/train/progress_line.h).
//
// What differs from a native worker, because PyTorch owns the loop: a step
// runs from the end of one step's synchronization to the end of the next
// one's, so compute_ms (step_ms - sync_wait_ms) also holds the previous
// step's optimizer and the data loading, unless the hook hands over the
// device's time (CUDA events, SetDeviceComputeMs); the loss is the one the
// program gives (GradsyncState.record_loss), else 0; samples_per_s needs the
// batch size (connect(batch_size=...)), else 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sync/param_layout.h"
#include "core/telemetry/metrics.h"
#include "core/telemetry/trace.h"
#include "python/ddp_bucket_sync.h"
#include "python/job_connection.h"

namespace gradsync {

struct TorchRunOptions {
  std::string metrics_dir;  // empty: no files (the figures are still kept)
  std::string trace_path;   // empty: no timeline
  int64_t trace_steps = 20;
  int64_t warmup_steps = 0;  // left out of the summary's means
  int64_t batch_size = 0;    // per worker; 0: unknown (no samples_per_s)
  std::string model;         // the summary's "model": the program's name
  // Steps the program will run; > 0: worker 0 prints the progress line
  // every 2 s and at the last step, as a native worker 0 does.
  int64_t total_steps = 0;
};

class TorchRunRecord {
 public:
  // Before the strategy's Setup, so that it records its own spans
  // (core/telemetry/trace.h's CurrentTrace()).
  static absl::StatusOr<std::unique_ptr<TorchRunRecord>> Start(
      const TorchRunOptions& options, JobConnection& job);
  ~TorchRunRecord();

  // Null unless --trace: the recorder DdpBucketSync's step timelines use.
  TraceRecorder* trace() const { return trace_.get(); }
  int64_t trace_steps() const { return options_.trace_steps; }

  // The loss of the step in progress, for its line.
  void SetLoss(double loss) { loss_ = loss; }
  // The device's forward + backward of the step in progress (CUDA events,
  // gradsync/device_timing.py): its compute_ms instead of the host's
  // step_ms - sync_wait_ms.
  void SetDeviceComputeMs(double ms) { device_compute_ms_ = ms; }
  // After every step; after the first one also writes layout.json.
  absl::Status RecordStep(const DdpStepStats& step, const ParamLayout& layout);
  // After the strategy's Shutdown, before the job's Close (worker 0 gathers
  // through the coordinator): this worker's trace, then the summary.
  absl::Status Finish(const std::string& sync_summary_json,
                      const std::vector<std::string>& strategy_trace_files);

 private:
  TorchRunRecord(const TorchRunOptions& options, JobConnection& job);
  absl::StatusOr<std::vector<std::string>> GatherOnWorker0(
      const std::string& prefix, const std::string& value);
  void ShowProgress(int64_t step, double loss);

  const TorchRunOptions options_;
  JobConnection& job_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TraceRecorder> trace_;
  RankTotals totals_;
  double loss_ = 0;
  double device_compute_ms_ = -1;  // < 0: not given for this step
  bool layout_written_ = false;
  bool finished_ = false;
  int64_t start_us_ = 0;
  int64_t first_step_end_us_ = 0;  // progress: the rate from step 1 on
  int64_t last_progress_us_ = 0;
};

}  // namespace gradsync
