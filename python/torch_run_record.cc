// A PyTorch worker's metrics, layout, summary and timeline
// (torch_run_record.h).
#include "python/torch_run_record.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/files.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/telemetry/manifest.h"
#include "core/train/layout_json.h"
#include "core/train/progress_line.h"
#include "core/train/worker_trace.h"
#include "tools/output_paths.h"

namespace gradsync {

TorchRunRecord::TorchRunRecord(const TorchRunOptions& options,
                               JobConnection& job)
    : options_(options), job_(job) {}

TorchRunRecord::~TorchRunRecord() {
  if (trace_ != nullptr && CurrentTrace() == trace_.get())
    SetCurrentTrace(nullptr);
}

absl::StatusOr<std::unique_ptr<TorchRunRecord>> TorchRunRecord::Start(
    const TorchRunOptions& options, JobConnection& job) {
  if (options.trace_steps < 0 || options.warmup_steps < 0 ||
      options.batch_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradsync: trace_steps (", options.trace_steps, "), warmup_steps (",
        options.warmup_steps, ") and batch_size (", options.batch_size,
        ") must be >= 0"));
  }
  std::unique_ptr<TorchRunRecord> record(new TorchRunRecord(options, job));
  const int rank = job.env().rank;
  // The timeline and the summary are written when the program closes
  // gradsync: a path that cannot take them is said now, not after training.
  RETURN_IF_ERROR(Annotate(
      PrepareWorkerOutputs(rank, {options.metrics_dir, "", options.trace_path}),
      absl::StrCat("worker ", rank)));
  ASSIGN_OR_RETURN(record->metrics_,
                   MetricsWriter::Open(options.metrics_dir, rank));
  if (!options.trace_path.empty()) record->trace_ = StartWorkerTrace(rank);
  record->start_us_ = absl::ToUnixMicros(absl::Now());
  return record;
}

absl::Status TorchRunRecord::RecordStep(const DdpStepStats& step,
                                        const ParamLayout& layout) {
  const int rank = job_.env().rank;
  if (!layout_written_) {
    layout_written_ = true;
    // As a native worker: worker 0 writes it, for the cost model and plots.
    if (rank == 0 && !options_.metrics_dir.empty()) {
      RETURN_IF_ERROR(
          Annotate(WriteFileAtomically(
                       absl::StrCat(options_.metrics_dir, "/layout.json"),
                       LayoutJson(layout, options_.model, /*bucket_mb=*/0)),
                   "worker 0 writing layout.json"));
    }
  }
  StepRecord record;
  record.rank = rank;
  record.step = step.step;
  record.loss = loss_;
  record.step_ms = step.step_ms;
  // On a GPU the device's own time (the hook's CUDA events); on the host,
  // everything but the wait, the optimizer and data loading included.
  record.compute_ms =
      device_compute_ms_ >= 0 ? device_compute_ms_
      : step.step_ms > step.sync_wait_ms ? step.step_ms - step.sync_wait_ms
                                         : 0;
  record.sync_wait_ms = step.sync_wait_ms;
  record.bytes_sent = step.strategy.bytes_sent;
  record.bytes_recv = step.strategy.bytes_recv;
  record.samples_per_s = options_.batch_size > 0 && step.step_ms > 0
                             ? options_.batch_size / (step.step_ms / 1000.0)
                             : 0;
  record.extra = step.strategy.extra;
  metrics_->WriteStep(record);
  // The first step has no step time (it starts when DDP first calls the
  // hook) and sets the strategy up: never measured.
  const bool measured =
      step.step >= std::max<int64_t>(1, options_.warmup_steps);
  totals_.Add(record, options_.batch_size, measured);
  ShowProgress(step.step, loss_);
  loss_ = 0;
  device_compute_ms_ = -1;
  return absl::OkStatus();
}

void TorchRunRecord::ShowProgress(int64_t step, double loss) {
  if (options_.total_steps <= 0 || job_.env().rank != 0) return;
  const int64_t now = absl::ToUnixMicros(absl::Now());
  if (step == 0) {
    first_step_end_us_ = last_progress_us_ = now;
    return;
  }
  const int64_t done = step + 1;
  const bool final_line = done >= options_.total_steps;
  if (!final_line && now - last_progress_us_ < 2'000'000) return;
  last_progress_us_ = now;
  // The rate of the steps after the first (which set the strategy up).
  const double seconds_per_step = (now - first_step_end_us_) / 1e6 / step;
  const double samples_per_s =
      seconds_per_step > 0
          ? options_.batch_size * job_.env().world_size / seconds_per_step
          : 0;
  PrintProgressLine(
      ProgressLine(done, options_.total_steps, /*epoch=*/1, /*epochs=*/1, loss,
                   samples_per_s,
                   seconds_per_step * (options_.total_steps - done)),
      final_line);
}

absl::StatusOr<std::vector<std::string>> TorchRunRecord::GatherOnWorker0(
    const std::string& prefix, const std::string& value) {
  const ClusterEnv& env = job_.env();
  Rendezvous* rendezvous = job_.rendezvous();
  if (rendezvous == nullptr) return std::vector<std::string>{value};
  return rendezvous->Gather(prefix, env.rank, env.world_size, /*root=*/0, value,
                            job_.options().timeout);
}

absl::Status TorchRunRecord::Finish(
    const std::string& sync_summary_json,
    const std::vector<std::string>& strategy_trace_files) {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  const ClusterEnv& env = job_.env();
  if (trace_ != nullptr) {
    ASSIGN_OR_RETURN(const std::string mine,
                     WriteWorkerTrace(*trace_, options_.trace_path, env.rank));
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     GatherOnWorker0("gradsync-torch/trace", mine));
    if (env.rank == 0) {
      for (const std::string& file : strategy_trace_files)
        files.push_back(file);
      MergeJobTrace(files, options_.trace_path);
    }
  }
  const std::string mine =
      RankSummaryJson(env.rank, totals_, sync_summary_json);
  ASSIGN_OR_RETURN(const std::vector<std::string> all,
                   GatherOnWorker0("gradsync-torch/summary", mine));
  if (env.rank != 0 || options_.metrics_dir.empty()) return absl::OkStatus();
  const double wall_seconds =
      (absl::ToUnixMicros(absl::Now()) - start_us_) / 1e6;
  const std::string summary = RunSummaryJson(
      ManifestJson(), all, job_.options().sync, env.world_size, env.num_servers,
      options_.model, /*final_accuracy=*/-1, wall_seconds);
  return Annotate(
      WriteFileAtomically(absl::StrCat(options_.metrics_dir, "/summary.json"),
                          summary),
      "worker 0 writing summary.json");
}

}  // namespace gradsync
