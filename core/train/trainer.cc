#include "core/train/trainer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/files.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/optim/checkpoint.h"
#include "core/sync/bucket_size_rule.h"
#include "core/sync/param_layout.h"
#include "core/telemetry/derived_settings.h"
#include "core/telemetry/manifest.h"
#include "core/telemetry/metrics.h"
#include "core/telemetry/trace.h"
#include "core/train/autotune.h"
#include "core/train/checkpoint_fit.h"
#include "core/train/evaluator.h"
#include "core/train/layout_json.h"
#include "core/train/model_data_fit.h"
#include "core/train/progress_line.h"
#include "core/train/replica_agreement.h"
#include "core/train/sampler.h"
#include "core/train/step_timeline.h"
#include "core/train/step_timing.h"
#include "core/train/training_snapshot.h"
#include "core/train/worker_trace.h"
#include "nlohmann/json.hpp"
#include "zlib.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}


class Trainer {
 public:
  Trainer(const TrainerOptions& options, const ProcessIdentity& identity,
          Model& model, const DatasetPair& data, Device& device,
          GradientSync& sync, Rendezvous* rendezvous)
      : options_(options),
        id_(identity),
        model_(model),
        data_(data),
        device_(device),
        sync_(sync),
        rendezvous_(rendezvous) {}
  ~Trainer() {
    // On an error path the recorder dies here; nobody may reach it after.
    if (trace_ != nullptr && CurrentTrace() == trace_.get())
      SetCurrentTrace(nullptr);
  }

  absl::StatusOr<TrainResult> Run();

 private:
  absl::Status Setup();
  absl::Status Resume();
  absl::Status CheckResumeAgrees();
  absl::Status CheckLayoutAgrees();
  absl::Status CheckParamsAgree(const std::string& when);
  absl::Status TrainStep(const std::vector<int64_t>& indices, int64_t first,
                         int rows, int64_t epoch);
  // What StepCore read back.
  struct StepCoreResult {
    StepStats stats;
    float loss = 0;
    // The step's synchronization was left to the next forward (pending_).
    bool deferred = false;
  };
  // The part of a step that a training step and an --autotune trial share:
  // the batch loaded, `straggle_ms` of injected slowness, forward and
  // backward with each bucket handed to the strategy as it completes,
  // Finish (its error prefixed with `what`), the optimizer unless the
  // servers updated the parameters, and the loss read back (which waits for
  // the device). Records the step's marks on both clocks into `marks`
  // (host times since `start`; per-tensor marks only where `timeline` is
  // tracing), and the timeline's spans. With `overlap`, the previous step's
  // pending buckets are completed as forward asks for their parameters, and
  // this step's Finish and optimizer are left to the next step (pending_).
  absl::StatusOr<StepCoreResult> StepCore(const std::vector<int64_t>& indices,
                                          int64_t first, int rows,
                                          int64_t epoch, double straggle_ms,
                                          const std::string& what,
                                          StepTimeline& timeline,
                                          Clock::time_point start,
                                          StepMarks& marks, bool overlap);
  // --overlap_next_forward. Makes `bucket` of the pending step final:
  // synchronized (WaitBucket, or Finish where the strategy has no per-bucket
  // completion) and its optimizer update applied. Its waits count as the
  // pending step's exposed communication.
  absl::Status CompleteBucket(int bucket);
  // Finish of the pending step, its statistics kept for its record.
  absl::Status FinishPending();
  // Every bucket of the pending step final, and its record written (the step
  // ended `end`: the next step's start, or now).
  absl::Status DrainPendingStepAt(Clock::time_point end);
  // The same between two steps, before anything reads every parameter or the
  // optimizer's state: evaluation, checkpoints, replica checks, the epoch's
  // end. The pending step's line ends before these waits; they lie in no
  // step's line and are counted in the next step's (drained_wait_ms_).
  absl::Status DrainPendingStep();
  // Writes the pending step's metrics line; its synchronization is finished.
  void WritePendingRecord(Clock::time_point end);
  // The device's time of every mark the step recorded, since its first.
  absl::Status ReadStepMarks(StepMarks& marks);
  // --autotune (trainer.h): the trials, the verdict from worker 0, and the
  // chosen cap in place; training state as it was before.
  absl::Status Autotune();
  // One trial step on the run's next batch: forward, backward, Finish and
  // the optimizer, then the state saved in `saved` restored. Its duration.
  absl::StatusOr<double> TrialStepMs(const TrainingSnapshot& saved);
  // Regroups the parameters under a cap of `bucket_bytes`, in the strategy
  // too (GradientSync::Rebucket).
  absl::Status UseBucketBytes(int64_t bucket_bytes);
  // Copies the step's samples indices[first, first + rows), augmented for
  // `epoch`, to the device.
  absl::Status LoadBatch(const std::vector<int64_t>& indices, int64_t first,
                         int rows, int64_t epoch);
  // After backward: every bucket was handed to the strategy; re-arms the
  // per-bucket counts for the next step.
  absl::Status CheckEveryBucketHandedOver();
  // --eval_every: worker 0 alone, written as an "eval" line.
  absl::Status EvaluateEvery();
  // `done_in_epoch`: steps of `epoch` completed, its last one included.
  absl::Status WriteCheckpointIfAsked(int64_t epoch, int64_t done_in_epoch);
  absl::Status Finalize(double wall_seconds);
  absl::Status FinishTrace();
  absl::Status WriteLayoutJson() const;
  // Every worker's `value`, in rank order, on worker 0; the other workers
  // get an empty list. Without a rendezvous (one worker), just `value`.
  absl::StatusOr<std::vector<std::string>> GatherOnWorker0(
      const std::string& prefix, const std::string& value);
  void ShowProgress(int64_t epoch, bool final_line);

  const TrainerOptions options_;
  const ProcessIdentity id_;
  Model& model_;
  const DatasetPair& data_;
  Device& device_;
  GradientSync& sync_;
  Rendezvous* rendezvous_;

  std::unique_ptr<ParamLayout> layout_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<MetricsWriter> metrics_;
  float lr_ = 0;
  int max_batch_ = 0;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* inputs_ = nullptr;
  int32_t* labels_ = nullptr;
  float* loss_ = nullptr;
  std::vector<float> host_inputs_;
  std::vector<int32_t> host_labels_;
  std::vector<int> bucket_pending_;  // gradients still to come, per bucket
  // --overlap_next_forward: the step whose buckets were all handed over but
  // whose synchronization the next forward completes bucket by bucket.
  struct PendingStep {
    bool active = false;
    int64_t step = 0;
    std::vector<bool> final;  // per bucket: synchronized and updated
    int num_final = 0;
    bool finished = false;  // its Finish returned
    StepStats stats;
    double wait_ms = 0;  // host time spent waiting for its synchronization
    StepRecord record;   // all but the step time and the strategy's figures
    // Waits a drain made before this step began (drained_wait_ms_), part of
    // its step time as well as of its exposed communication.
    double drained_wait_ms = 0;
    int rows = 0;
    bool measured = false;  // counted in the summary's means
    Clock::time_point start;
  };
  PendingStep pending_;
  // Cleared when the strategy answers WaitBucket with Unimplemented: its
  // steps complete only as a whole, through Finish, so later steps wait in
  // Finish as without overlap (nothing to gain by deferring it, and the
  // device's clock then times the wait, step_timing.h).
  bool per_bucket_waits_ = true;
  // This step's forward waiting for the previous step's buckets.
  double forward_wait_ms_ = 0;
  // Waits a drain (DrainPendingStep) made between two steps' lines, not yet
  // counted: the next step's record holds them, so that every wait for
  // synchronization lies in exactly one step's step_ms and sync_wait_ms
  // (docs/metrics.md). After the run's last step no step follows: they stay
  // out of both.
  double drained_wait_ms_ = 0;
  std::vector<int> bucket_size_;
  int64_t bucket_bytes_ = 0;              // the cap the layout was made with
  bool bucket_from_flag_ = false;         // --bucket_mb given
  std::unique_ptr<TraceRecorder> trace_;  // null unless --trace
  // The device's clock (core/device/device_clock.h): the step's fixed marks,
  // then one per bucket, then one per tensor (buckets never outnumber
  // tensors, whatever --autotune regroups).
  static constexpr int kStartMark = 0;
  static constexpr int kComputeStartMark = 1;
  static constexpr int kComputeEndMark = 2;
  static constexpr int kSyncedMark = 3;
  static constexpr int kFixedMarks = 4;
  std::unique_ptr<DeviceClock> clock_;
  StepMarks step_marks_;  // reused every step
  std::optional<Evaluator> evaluator_;
  std::optional<DistributedSampler> sampler_;
  std::optional<ImageAugmentation> augmentation_;  // of the training set

  int64_t step_ = 0;
  double eval_seconds_ = 0;  // worker 0's --eval_every evaluations
  // Where this run started: step 0 of epoch 0, or a checkpoint's position.
  int64_t start_step_ = 0;
  int64_t start_epoch_ = 0;
  int64_t start_epoch_step_ = 0;
  int64_t last_checkpoint_step_ = -1;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  double epoch_loss_sum_ = 0;
  int64_t epoch_steps_ = 0;
  double last_loss_ = 0;
  RankTotals totals_;
  Clock::time_point run_start_;
  Clock::time_point last_progress_;
  double last_accuracy_ = -1;
  TrainResult result_;
};

absl::Status Trainer::Setup() {
  if (options_.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch_size=", options_.batch_size, " must be at least 1"));
  }
  if (options_.epochs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--epochs=", options_.epochs, " must be at least 1"));
  }
  RETURN_IF_ERROR(CheckModelFitsData(model_, data_.train));
  ASSIGN_OR_RETURN(augmentation_,
                   ImageAugmentation::Create(options_.augmentation, data_.train,
                                             options_.seed));
  ASSIGN_OR_RETURN(sampler_,
                   DistributedSampler::Create(SamplerOptions{
                       data_.train.size, id_.world_size, id_.rank,
                       options_.shuffle, options_.seed, options_.drop_last}));
  steps_per_epoch_ =
      (sampler_->num_samples() + options_.batch_size - 1) / options_.batch_size;
  total_steps_ = steps_per_epoch_ * options_.epochs;
  if (options_.max_steps > 0)
    total_steps_ = std::min(total_steps_, options_.max_steps);
  // --bucket_mb 0 is auto (core/sync/bucket_size_rule.h).
  int64_t model_bytes = 0;
  for (const ParamSpec& spec : model_.ParamSpecs())
    model_bytes += spec.numel() * 4;
  const BucketSizeChoice bucket_rule = ChooseBucketBytes(model_bytes);
  const bool auto_bucket = !(options_.bucket_mb > 0);
  ASSIGN_OR_RETURN(
      ParamLayout layout,
      ParamLayout::Create(
          model_.ParamSpecs(),
          auto_bucket ? bucket_rule.bucket_bytes
                      : static_cast<int64_t>(options_.bucket_mb * (1 << 20))));
  if (id_.rank == 0) {
    RecordSetting("bucket_mb",
                  auto_bucket ? bucket_rule.bucket_bytes / double(1 << 20)
                              : options_.bucket_mb,
                  auto_bucket ? bucket_rule.reason : "flag");
    if (auto_bucket) {
      GS_LOG(INFO) << "bucket cap " << bucket_rule.bucket_bytes / 1024
                   << " KiB (" << bucket_rule.reason
                   << "): " << layout.buckets().size() << " buckets";
    } else if (std::optional<std::string> warning =
                   SingleBucketWarning(layout, options_.bucket_mb)) {
      GS_LOG(WARNING) << *warning;
    }
  }
  layout_ = std::make_unique<ParamLayout>(std::move(layout));
  bucket_from_flag_ = !auto_bucket;
  bucket_bytes_ = auto_bucket
                      ? bucket_rule.bucket_bytes
                      : static_cast<int64_t>(options_.bucket_mb * (1 << 20));
  const int64_t n = layout_->total_numel();

  // Evaluation runs in chunks of at least 1000 rows; training in batch_size.
  max_batch_ = std::max(options_.batch_size, 1000);
  ASSIGN_OR_RETURN(params_, device_.Allocate<float>(n));
  ASSIGN_OR_RETURN(grads_, device_.Allocate<float>(n));
  ASSIGN_OR_RETURN(inputs_, device_.Allocate<float>(int64_t{max_batch_} *
                                                    model_.input_dim()));
  ASSIGN_OR_RETURN(labels_, device_.Allocate<int32_t>(max_batch_));
  ASSIGN_OR_RETURN(loss_, device_.Allocate<float>(1));
  host_inputs_.resize(static_cast<size_t>(max_batch_) * model_.input_dim());
  host_labels_.resize(max_batch_);
  RETURN_IF_ERROR(model_.Bind(device_, *layout_, params_, grads_, max_batch_));
  evaluator_.emplace(model_, device_, data_.test, rendezvous_, id_,
                     options_.timeout, inputs_, max_batch_);

  std::vector<float> initial(n);
  model_.InitParams(options_.seed, *layout_, initial.data());
  RETURN_IF_ERROR(
      device_.CopyToDevice(params_, initial.data(), n * sizeof(float)));

  ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(options_.optimizer));
  RETURN_IF_ERROR(optimizer_->Bind(device_, n));
  ASSIGN_OR_RETURN(lr_, ScaleLearningRate(options_.optimizer.lr,
                                          options_.lr_scaling, id_.world_size));

  for (const Bucket& bucket : layout_->buckets()) {
    bucket_size_.push_back(static_cast<int>(bucket.params.size()));
  }
  bucket_pending_ = bucket_size_;
  ASSIGN_OR_RETURN(clock_,
                   device_.CreateClock(
                       kFixedMarks +
                       2 * static_cast<int>(layout_->params().size())));

  // What this worker built from its flags and data, against worker 0's,
  // before the strategy pairs buckets across workers.
  RETURN_IF_ERROR(CheckLayoutAgrees());
  // Published before the strategy's Setup so it can record its own spans.
  if (!options_.trace_path.empty()) trace_ = StartWorkerTrace(id_.rank);
  if (options_.resume) RETURN_IF_ERROR(Resume());
  RETURN_IF_ERROR(CheckResumeAgrees());
  RETURN_IF_ERROR(CheckSlowness(options_.slowness, id_.world_size));
  TrainingSchedule schedule;
  schedule.start_step = step_;
  schedule.resume = options_.resume;
  schedule.checkpoint_path = options_.checkpoint_path;
  schedule.checkpoint_every = options_.checkpoint_every;
  schedule.steps_per_epoch = steps_per_epoch_;
  schedule.total_steps = total_steps_;
  sync_.SetTrainingSchedule(schedule);
  RETURN_IF_ERROR(sync_.Setup(*layout_, device_, SyncBuffers{grads_, params_}));
  if (options_.check_params_every > 0 && sync_.ReplicasMayDiffer()) {
    return absl::InvalidArgumentError(
        "--check_params_every compares the workers' parameters after steps, "
        "which --ps_consistency=ssp|asp lets differ; leave it out");
  }
  ASSIGN_OR_RETURN(metrics_,
                   MetricsWriter::Open(options_.metrics_dir, id_.rank));
  result_.metrics_path = metrics_->path();
  RETURN_IF_ERROR(WriteLayoutJson());
  if (id_.rank == 0) {
    GS_LOG(INFO) << model_.name() << ": " << layout_->params().size()
                 << " tensors, " << n << " parameters ("
                 << absl::StrFormat("%.2f MiB",
                                    layout_->total_bytes() / 1048576.0)
                 << ") in " << layout_->buckets().size() << " bucket(s); "
                 << "--sync=" << options_.sync << ", " << id_.world_size
                 << " worker(s), " << id_.num_servers << " server(s), batch "
                 << options_.batch_size << " per worker, lr " << lr_;
    GS_LOG(DEBUG) << layout_->Describe();
  }
  return CheckParamsAgree("at start-up");
}

// Every rank reads the same checkpoint (shared storage on a cluster) and
// takes its parameters, optimizer state, step and sampler position. Anything
// that would make the continuation differ from the uninterrupted run (another
// model, seed, batch or world size) is refused rather than silently changed.
// Nothing is written here: a damaged file stays as it is for inspection.
absl::Status Trainer::Resume() {
  const std::string& path = options_.checkpoint_path;
  const std::string context = absl::StrCat("worker ", id_.rank, ": --resume");
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  if (absl::IsNotFound(read.status())) {
    return absl::NotFoundError(
        absl::StrCat(context, ": no checkpoint at --checkpoint=", path,
                     "; run without --resume to start afresh"));
  }
  if (!read.ok()) return Annotate(read.status(), context);
  const Checkpoint& c = *read;
  const int64_t n = layout_->total_numel();
  // With the optimizer on the servers, their shards hold its state.
  const std::vector<float*> state = sync_.UpdatesParameters()
                                        ? std::vector<float*>{}
                                        : optimizer_->StateBuffers();
  const int64_t buffer_count = model_.buffer_count();
  RunShape run;
  run.context = context;
  run.path = path;
  run.model = model_.name();
  run.num_params = n;
  run.seed = options_.seed;
  run.batch_size = options_.batch_size;
  run.world_size = id_.world_size;
  run.optimizer = options_.optimizer.kind;
  run.optimizer_on_servers = sync_.UpdatesParameters();
  run.optimizer_buffers = static_cast<int64_t>(state.size());
  run.model_buffers = buffer_count;
  run.steps_per_epoch = steps_per_epoch_;
  run.compression = options_.compression.ToString();
  RETURN_IF_ERROR(CheckCheckpointFits(c, run));
  RETURN_IF_ERROR(
      device_.CopyToDevice(params_, c.params.data(), n * sizeof(float)));
  for (size_t i = 0; i < state.size(); ++i) {
    RETURN_IF_ERROR(device_.CopyToDevice(state[i], c.optimizer_state[i].data(),
                                         n * sizeof(float)));
  }
  if (buffer_count > 0) {
    RETURN_IF_ERROR(device_.CopyToDevice(model_.buffers(), c.buffers.data(),
                                         buffer_count * sizeof(float)));
  }
  optimizer_->set_step(c.optimizer_step);
  step_ = start_step_ = last_checkpoint_step_ = c.step;
  start_epoch_ = c.epoch;
  start_epoch_step_ = c.epoch_step;
  if (id_.rank == 0) {
    GS_LOG(INFO) << "resuming from " << path << " at step " << c.step
                 << " (epoch " << c.epoch + 1 << ", step " << c.epoch_step
                 << " of " << steps_per_epoch_ << " done)";
  }
  return absl::OkStatus();
}

// Every rank must continue from the same step, or the strategies would pair
// different steps' gradients; the parameter CRC at start-up catches different
// parameters, this catches the rest (a rank that read an older copy of the
// file, or one started without --resume) with a message that says so.
absl::Status Trainer::CheckResumeAgrees() {
  return ReplicaAgreement(rendezvous_, id_, options_.timeout)
      .CheckSameStartStep(step_);
}

// The flags were compared at Join, but the model's shape follows the data
// too (an image model's input, the classes), read on each host from its own
// --data_dir: a worker whose data differs builds another layout, and the
// strategies would reduce buckets that do not match.
absl::Status Trainer::CheckLayoutAgrees() {
  const std::string description = layout_->Describe();
  const uint32_t layout_crc =
      crc32(0L, reinterpret_cast<const Bytef*>(description.data()),
            description.size());
  return ReplicaAgreement(rendezvous_, id_, options_.timeout)
      .CheckSameDerivedSettings(
          {{"model", model_.name()},
           {"parameters", absl::StrCat(layout_->total_numel())},
           {"bucket_kb", absl::StrCat(bucket_bytes_ / 1024.0)},
           {"buckets", absl::StrCat(layout_->buckets().size())},
           {"layout CRC-32", absl::StrCat(layout_crc)}},
          "every worker derives its model and buckets from the training "
          "flags and its data (--data_dir on its host): give every worker "
          "the same data set");
}

// Worker 0 writes <metrics_dir>/layout.json (layout_json.h).
absl::Status Trainer::WriteLayoutJson() const {
  if (id_.rank != 0 || options_.metrics_dir.empty()) return absl::OkStatus();
  return WriteFileAtomically(
      absl::StrCat(options_.metrics_dir, "/layout.json"),
      LayoutJson(*layout_, model_.name(), options_.bucket_mb));
}

// Every rank publishes a CRC of its parameters and compares with worker 0's:
// the cheapest proof that all replicas hold the same model.
absl::Status Trainer::CheckParamsAgree(const std::string& when) {
  if (rendezvous_ == nullptr || id_.world_size == 1) return absl::OkStatus();
  std::vector<float> host(layout_->total_numel());
  RETURN_IF_ERROR(
      device_.CopyToHost(host.data(), params_, host.size() * sizeof(float)));
  return ReplicaAgreement(rendezvous_, id_, options_.timeout)
      .CheckSameParameters(host, when);
}

absl::Status Trainer::TrainStep(const std::vector<int64_t>& indices,
                                int64_t first, int rows, int64_t epoch) {
  if (id_.rank == options_.fault_rank && step_ == options_.fault_step) {
    GS_LOG(ERROR) << "fault injected at step " << step_ << ": "
                  << options_.fault;
    if (options_.fault == "kill") raise(SIGKILL);
    _exit(3);
  }
  const Clock::time_point start = Clock::now();
  StepTimeline timeline(
      trace_ != nullptr && step_ - start_step_ < options_.trace_steps
          ? trace_.get()
          : nullptr,
      static_cast<int>(bucket_pending_.size()));
  // An injected straggler (--straggler): as if its compute were slower.
  const double straggle_ms =
      SlownessDelayMs(options_.slowness, id_.rank, step_);
  StepMarks& marks = step_marks_;
  // Waits made for the previous step after its line ended (its drain at the
  // epoch's end, before evaluation, a checkpoint or a replica check): this
  // step's figures hold them, as they would if its forward had waited.
  const double drained_wait_ms = drained_wait_ms_;
  drained_wait_ms_ = 0;
  ASSIGN_OR_RETURN(
      StepCoreResult core,
      StepCore(indices, first, rows, epoch, straggle_ms,
               absl::StrCat("worker ", id_.rank, " step ", step_), timeline,
               start, marks,
               options_.overlap_next_forward && per_bucket_waits_));
  const double step_ms = MillisSince(start);
  const float loss = core.loss;
  if (!std::isfinite(loss)) {
    return absl::InternalError(
        absl::StrCat("loss is ", loss, " at step ", step_, " (epoch ", epoch,
                     "): training diverged; lower --lr"));
  }
  // Every mark of the step is passed: the loss's copy waited for the device.
  RETURN_IF_ERROR(ReadStepMarks(marks));
  const StepTimes times = StepTimesFromMarks(marks);
  timeline.UseTimes(times);
  timeline.StepDone(step_, *layout_, sync_.UpdatesParameters());

  StepRecord record;
  record.rank = id_.rank;
  record.step = step_;
  record.epoch = epoch;
  record.loss = loss;
  record.step_ms = drained_wait_ms + step_ms;
  // Exposed communication is every wait for synchronization inside the
  // step's time, whichever step's buckets it waited for: forward's waits for
  // the previous step's (left out of compute), the wait in Finish, and a
  // drain's before the step began. A part of step_ms by construction, so
  // their means over the same steps keep the order.
  record.compute_ms = std::max(0.0, times.compute_ms - forward_wait_ms_);
  record.sync_wait_ms =
      drained_wait_ms + forward_wait_ms_ + times.sync_wait_ms;
  record.bytes_sent = core.stats.bytes_sent;
  record.bytes_recv = core.stats.bytes_recv;
  record.samples_per_s = rows / (record.step_ms / 1000.0);
  record.extra = std::move(core.stats.extra);
  if (straggle_ms > 0) record.extra.emplace_back("straggle_ms", straggle_ms);
  const bool measured = step_ - start_step_ >= options_.warmup_steps;
  if (core.deferred) {
    // Written once its synchronization is final (WritePendingRecord).
    pending_.record = std::move(record);
    pending_.drained_wait_ms = drained_wait_ms;
    pending_.rows = rows;
    pending_.measured = measured;
    pending_.start = start;
  } else {
    metrics_->WriteStep(record);
    totals_.Add(record, rows, measured);
  }
  epoch_loss_sum_ += loss;
  ++epoch_steps_;
  last_loss_ = loss;
  ++step_;
  if (options_.check_params_every > 0 &&
      step_ % options_.check_params_every == 0) {
    RETURN_IF_ERROR(DrainPendingStep());
    RETURN_IF_ERROR(CheckParamsAgree(absl::StrCat("after step ", step_)));
  }
  return absl::OkStatus();
}

absl::Status Trainer::FinishPending() {
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(
      Annotate(sync_.Finish(pending_.stats),
               absl::StrCat("worker ", id_.rank, " step ", pending_.step)));
  pending_.wait_ms += MillisSince(start);
  pending_.finished = true;
  return absl::OkStatus();
}

absl::Status Trainer::CompleteBucket(int bucket) {
  if (!pending_.active || pending_.final[bucket]) return absl::OkStatus();
  const int64_t trace_start = TraceRecorder::NowMicros();
  if (per_bucket_waits_ && !pending_.finished) {
    const Clock::time_point start = Clock::now();
    const absl::Status waited = sync_.WaitBucket(bucket);
    if (absl::IsUnimplemented(waited)) {
      per_bucket_waits_ = false;
    } else {
      RETURN_IF_ERROR(Annotate(
          waited, absl::StrCat("worker ", id_.rank, " step ", pending_.step,
                               ", waiting for bucket ", bucket)));
      pending_.wait_ms += MillisSince(start);
    }
  }
  if (!pending_.finished && !per_bucket_waits_) {
    RETURN_IF_ERROR(FinishPending());
  }
  if (trace_ != nullptr && pending_.step - start_step_ < options_.trace_steps) {
    trace_->Complete(
        absl::StrCat("wait for bucket ", bucket, " of step ", pending_.step),
        "wait", kTrackCommunication, trace_start,
        TraceRecorder::NowMicros() - trace_start);
  }
  // The bucket's averaged gradient is final: its update may run before the
  // layers that read it, whatever the other buckets are still doing.
  if (!sync_.UpdatesParameters()) {
    const Bucket& span = layout_->buckets()[bucket];
    optimizer_->UpdateRange(params_, grads_, lr_, span.offset, span.numel);
  }
  pending_.final[bucket] = true;
  ++pending_.num_final;
  if (!pending_.finished &&
      pending_.num_final == static_cast<int>(pending_.final.size())) {
    RETURN_IF_ERROR(FinishPending());
  }
  return absl::OkStatus();
}

void Trainer::WritePendingRecord(Clock::time_point end) {
  StepRecord& record = pending_.record;
  // From this step's start to the next one's: consecutive steps tile the run
  // (but for drains and what follows them: evaluation, checkpoints). Its
  // sync_wait_ms was set with its compute: the waits inside this time.
  record.step_ms =
      pending_.drained_wait_ms +
      std::chrono::duration<double, std::milli>(end - pending_.start).count();
  record.bytes_sent = pending_.stats.bytes_sent;
  record.bytes_recv = pending_.stats.bytes_recv;
  record.samples_per_s =
      record.step_ms > 0 ? pending_.rows / (record.step_ms / 1000.0) : 0;
  for (auto& figure : pending_.stats.extra) record.extra.push_back(figure);
  metrics_->WriteStep(record);
  totals_.Add(record, pending_.rows, pending_.measured);
  pending_.active = false;
  pending_.stats = StepStats();
}

absl::Status Trainer::DrainPendingStepAt(Clock::time_point end) {
  if (!pending_.active) return absl::OkStatus();
  // In forward order (the last bucket holds the first layers), as a forward
  // would have asked for them.
  for (int b = static_cast<int>(pending_.final.size()) - 1; b >= 0; --b) {
    RETURN_IF_ERROR(CompleteBucket(b));
  }
  WritePendingRecord(end);
  return absl::OkStatus();
}

absl::Status Trainer::DrainPendingStep() {
  if (!pending_.active) return absl::OkStatus();
  const Clock::time_point end = Clock::now();
  const double waited_before = pending_.wait_ms;
  RETURN_IF_ERROR(DrainPendingStepAt(end));
  drained_wait_ms_ += pending_.wait_ms - waited_before;
  return absl::OkStatus();
}

absl::StatusOr<Trainer::StepCoreResult> Trainer::StepCore(
    const std::vector<int64_t>& indices, int64_t first, int rows, int64_t epoch,
    double straggle_ms, const std::string& what, StepTimeline& timeline,
    Clock::time_point start, StepMarks& marks, bool overlap) {
  forward_wait_ms_ = 0;
  // The step's marks on both clocks (step_timing.h); per-tensor marks only
  // where the step is traced.
  const int num_params = static_cast<int>(layout_->params().size());
  marks.bucket_ready.assign(layout_->buckets().size(), StepMark());
  marks.tensor_final.clear();
  absl::Status mark_status;  // the first failure of a mark in the callback
  auto mark = [&](int index, StepMark& at) {
    at.host_ms = MillisSince(start);
    if (mark_status.ok()) mark_status = clock_->Record(index);
  };
  mark(kStartMark, marks.start);
  RETURN_IF_ERROR(LoadBatch(indices, first, rows, epoch));

  // Forward asks for its layers' parameters: the previous step's buckets
  // that hold them are completed first, in the order forward reaches them.
  const std::vector<ParamInfo>& params = layout_->params();
  auto needed = [&](int first_param, int end_param) -> absl::Status {
    if (!pending_.active) return absl::OkStatus();
    if (first_param < 0 || end_param > static_cast<int>(params.size())) {
      return absl::InternalError(absl::StrCat(
          what, ": the model asked for parameters [", first_param, ", ",
          end_param, ") of ", params.size()));
    }
    const double waited_before = pending_.wait_ms;
    for (int p = first_param; p < end_param; ++p)
      RETURN_IF_ERROR(CompleteBucket(params[p].bucket));
    forward_wait_ms_ += pending_.wait_ms - waited_before;
    return absl::OkStatus();
  };
  // A model must ask for every parameter before backward writes a gradient:
  // the previous step's synchronization may still be writing the buffer.
  absl::Status order_status;
  // Hand each bucket to the strategy as soon as its last gradient is final.
  auto ready = [&](int param) {
    if (pending_.active && !pending_.finished && order_status.ok()) {
      order_status = absl::InternalError(absl::StrCat(
          what, ": backward began before forward asked for every parameter ",
          "(", pending_.num_final, " of ", pending_.final.size(),
          " buckets of the previous step final); the model breaks "
          "ForwardBackwardLayerwise's contract"));
    }
    if (!order_status.ok()) return;  // nothing more reaches the strategy
    const int bucket = params[param].bucket;
    const bool completes_bucket = bucket_pending_[bucket] == 1;
    // Marked before the hand-off: the gradient is final here on the
    // device, and whatever the strategy queues for it comes after.
    if (timeline.active()) {
      const int tensor = static_cast<int>(marks.tensor_final.size());
      marks.tensor_final.emplace_back();
      mark(kFixedMarks + num_params + tensor, marks.tensor_final.back());
    }
    if (completes_bucket)
      mark(kFixedMarks + bucket, marks.bucket_ready[bucket]);
    timeline.GradientFinal(params[param].spec.name, bucket, completes_bucket);
    if (--bucket_pending_[bucket] == 0) sync_.BucketReady(bucket);
  };
  if (straggle_ms > 0) {
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(straggle_ms));
  }
  timeline.DataLoaded();
  mark(kComputeStartMark, marks.compute_start);
  RETURN_IF_ERROR(model_.ForwardBackwardLayerwise(inputs_, labels_, rows, loss_,
                                                  needed, ready));
  RETURN_IF_ERROR(order_status);
  mark(kComputeEndMark, marks.compute_end);
  timeline.ComputeDone();
  // The previous step's record: it ended where this one started.
  RETURN_IF_ERROR(DrainPendingStepAt(start));
  RETURN_IF_ERROR(CheckEveryBucketHandedOver());

  StepCoreResult result;
  if (overlap) {
    // Nothing waited here: the next forward waits for each bucket it reads
    // (or the epoch's end for all of them).
    mark(kSyncedMark, marks.synced);
    timeline.SyncDone();
    pending_ = PendingStep();
    pending_.active = true;
    pending_.step = step_;
    pending_.final.assign(layout_->buckets().size(), false);
    if (!sync_.UpdatesParameters()) optimizer_->BeginStep();
    result.deferred = true;
  } else {
    RETURN_IF_ERROR(Annotate(sync_.Finish(result.stats), what));
    mark(kSyncedMark, marks.synced);
    timeline.SyncDone();
    if (!sync_.UpdatesParameters()) optimizer_->Step(params_, grads_, lr_);
  }
  RETURN_IF_ERROR(
      Annotate(mark_status, absl::StrCat(what, ": recording the device's clock")));

  // Waits for the device: every mark of the step is passed after this, so
  // reading them costs no further wait.
  RETURN_IF_ERROR(device_.CopyToHost(&result.loss, loss_, sizeof(float)));
  return result;
}

absl::Status Trainer::ReadStepMarks(StepMarks& marks) {
  auto read = [this](int index, StepMark& at) -> absl::Status {
    ASSIGN_OR_RETURN(at.device_ms, clock_->ElapsedMs(kStartMark, index));
    return absl::OkStatus();
  };
  absl::Status status = read(kStartMark, marks.start);
  if (status.ok()) status = read(kComputeStartMark, marks.compute_start);
  if (status.ok()) status = read(kComputeEndMark, marks.compute_end);
  if (status.ok()) status = read(kSyncedMark, marks.synced);
  for (size_t b = 0; b < marks.bucket_ready.size() && status.ok(); ++b)
    status = read(kFixedMarks + static_cast<int>(b), marks.bucket_ready[b]);
  const int num_params = static_cast<int>(layout_->params().size());
  for (size_t t = 0; t < marks.tensor_final.size() && status.ok(); ++t) {
    status = read(kFixedMarks + num_params + static_cast<int>(t),
                  marks.tensor_final[t]);
  }
  return Annotate(status, absl::StrCat("worker ", id_.rank, " step ", step_,
                                       ": reading the device's clock"));
}

// The run's next batch, every time: trials compare caps, not data. Only
// what a real step does is timed (no metrics line, no straggler delay).
absl::StatusOr<double> Trainer::TrialStepMs(const TrainingSnapshot& saved) {
  const std::vector<int64_t> indices = sampler_->Indices(start_epoch_);
  const int64_t first = start_epoch_step_ * options_.batch_size;
  const int rows = static_cast<int>(
      std::min<int64_t>(options_.batch_size, sampler_->num_samples() - first));
  const Clock::time_point start = Clock::now();
  StepTimeline untraced(nullptr, static_cast<int>(bucket_pending_.size()));
  RETURN_IF_ERROR(
      StepCore(indices, first, rows, start_epoch_,
               /*straggle_ms=*/0,
               absl::StrCat("worker ", id_.rank, " --autotune trial step"),
               untraced, start, step_marks_, /*overlap=*/false)
          .status());
  const double ms = MillisSince(start);
  RETURN_IF_ERROR(RestoreSnapshot(saved, device_, params_, *optimizer_, model_));
  return ms;
}

absl::Status Trainer::UseBucketBytes(int64_t bucket_bytes) {
  if (bucket_bytes == bucket_bytes_) return absl::OkStatus();
  ASSIGN_OR_RETURN(ParamLayout layout,
                   ParamLayout::Create(model_.ParamSpecs(), bucket_bytes));
  RETURN_IF_ERROR(sync_.Rebucket(layout));
  // In place: the model and the strategy may hold the layout by reference.
  *layout_ = std::move(layout);
  bucket_bytes_ = bucket_bytes;
  bucket_size_.clear();
  for (const Bucket& bucket : layout_->buckets()) {
    bucket_size_.push_back(static_cast<int>(bucket.params.size()));
  }
  bucket_pending_ = bucket_size_;
  return absl::OkStatus();
}

absl::Status Trainer::Autotune() {
  if (bucket_from_flag_) {
    if (id_.rank == 0) {
      GS_LOG(INFO) << "--autotune: --bucket_mb=" << options_.bucket_mb
                   << " was given and wins; nothing tried";
    }
    return absl::OkStatus();
  }
  if (sync_.UpdatesParameters() || sync_.ReplicasMayDiffer()) {
    return absl::InvalidArgumentError(
        "--autotune undoes its trial steps on the workers, but with the "
        "optimizer on the servers (--ps_update=server) or under "
        "--ps_consistency=ssp|asp they move state the workers cannot restore; "
        "leave --autotune out, or sweep --bucket_mb by hand");
  }
  if (options_.autotune_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--autotune_steps=", options_.autotune_steps, " must be at least 1"));
  }
  const std::vector<int64_t> candidates = BucketCandidates(bucket_bytes_);
  ASSIGN_OR_RETURN(const TrainingSnapshot saved,
                   TakeSnapshot(device_, params_, layout_->total_numel(),
                                *optimizer_, model_));
  std::vector<AutotuneTrial> trials;
  std::vector<double> my_ms;
  std::vector<std::vector<int64_t>> tried_offsets;
  for (int64_t bytes : candidates) {
    const absl::Status regrouped = UseBucketBytes(bytes);
    if (absl::IsUnimplemented(regrouped)) {
      // Every rank runs the same strategy, so every rank stops here.
      if (id_.rank == 0) {
        GS_LOG(WARNING) << "--autotune: --sync=" << options_.sync
                        << " cannot change its buckets after set-up ("
                        << regrouped.message() << "); the rule's cap stays";
      }
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(regrouped);
    // A cap that groups the parameters as an earlier one did is the same
    // trial; it would only add noise.
    std::vector<int64_t> offsets;
    for (const Bucket& bucket : layout_->buckets())
      offsets.push_back(bucket.offset);
    if (std::find(tried_offsets.begin(), tried_offsets.end(), offsets) !=
        tried_offsets.end()) {
      continue;
    }
    tried_offsets.push_back(offsets);
    RETURN_IF_ERROR(TrialStepMs(saved).status());  // connections, caches
    std::vector<double> step_ms;
    for (int i = 0; i < options_.autotune_steps; ++i) {
      ASSIGN_OR_RETURN(const double ms, TrialStepMs(saved));
      step_ms.push_back(ms);
    }
    AutotuneTrial trial;
    trial.bucket_bytes = bytes;
    trial.num_buckets = static_cast<int>(layout_->buckets().size());
    trial.steps = options_.autotune_steps;
    trial.samples = int64_t{options_.batch_size} * id_.world_size;
    trials.push_back(trial);
    // The median: one step slowed by another process on a shared machine
    // must not decide the trial.
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2,
                     step_ms.end());
    my_ms.push_back(step_ms[step_ms.size() / 2]);
  }

  ASSIGN_OR_RETURN(const int chosen,
                   AgreeOnFastestTrial(trials, my_ms, rendezvous_, id_,
                                       options_.timeout));
  RETURN_IF_ERROR(UseBucketBytes(trials[chosen].bucket_bytes));
  RETURN_IF_ERROR(RestoreSnapshot(saved, device_, params_, *optimizer_, model_));
  RETURN_IF_ERROR(WriteLayoutJson());  // the buckets that will run
  if (id_.rank != 0) return absl::OkStatus();
  const std::string source = AutotuneSource(trials, chosen);
  RecordSetting("bucket_mb", trials[chosen].bucket_bytes / double(1 << 20),
                source);
  GS_LOG(INFO) << "bucket cap " << trials[chosen].bucket_bytes / 1024
               << " KiB (" << source << "): " << layout_->buckets().size()
               << " buckets";
  if (options_.metrics_dir.empty()) return absl::OkStatus();
  return WriteFileAtomically(
      absl::StrCat(options_.metrics_dir, "/autotune.jsonl"),
      TrialLog(trials, chosen));
}

absl::Status Trainer::LoadBatch(const std::vector<int64_t>& indices,
                                int64_t first, int rows, int64_t epoch) {
  const int dim = model_.input_dim();
  for (int i = 0; i < rows; ++i) {
    const int64_t sample = indices[first + i];
    augmentation_->Write(sample, epoch, host_inputs_.data() + int64_t{i} * dim);
    host_labels_[i] = data_.train.labels[sample];
  }
  RETURN_IF_ERROR(device_.CopyToDevice(inputs_, host_inputs_.data(),
                                       sizeof(float) * rows * dim));
  return device_.CopyToDevice(labels_, host_labels_.data(),
                              sizeof(int32_t) * rows);
}

// A model that does not report every parameter would leave a bucket that is
// never synchronized: the step would use a stale gradient without a word.
absl::Status Trainer::CheckEveryBucketHandedOver() {
  for (size_t b = 0; b < bucket_pending_.size(); ++b) {
    if (bucket_pending_[b] != 0) {
      return absl::InternalError(
          absl::StrCat("bucket ", b, " still waits for ", bucket_pending_[b],
                       " gradient(s) after backward: the model did not report "
                       "every parameter"));
    }
  }
  bucket_pending_ = bucket_size_;
  return absl::OkStatus();
}

absl::Status Trainer::EvaluateEvery() {
  if (options_.eval_every <= 0 || id_.rank != 0 ||
      step_ % options_.eval_every != 0) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(DrainPendingStep());
  const Clock::time_point start = Clock::now();
  ASSIGN_OR_RETURN(const double accuracy,
                   evaluator_->Evaluate("every", /*alone=*/true, options_.eval_samples));
  const Clock::time_point end = Clock::now();
  eval_seconds_ += std::chrono::duration<double>(end - start).count();
  EvalRecord record;
  record.step = step_;
  record.seconds = std::chrono::duration<double>(end - run_start_).count();
  record.eval_seconds = eval_seconds_;
  record.test_accuracy = accuracy;
  metrics_->WriteEval(record);
  return absl::OkStatus();
}

// Worker 0 only: every worker holds the same parameters and optimizer state
// after a step, so one copy is the job's. A parameter server running the
// optimizer writes its own shard at the same steps (ps/server/shard.h).
absl::Status Trainer::WriteCheckpointIfAsked(int64_t epoch,
                                             int64_t done_in_epoch) {
  if (options_.checkpoint_path.empty() || id_.rank != 0 ||
      step_ == last_checkpoint_step_) {
    return absl::OkStatus();
  }
  Checkpoint checkpoint;
  checkpoint.model = model_.name();
  checkpoint.step = step_;
  // The position of the next step: an epoch that is done is (next, 0).
  const bool epoch_done = done_in_epoch == steps_per_epoch_;
  checkpoint.epoch = epoch_done ? epoch + 1 : epoch;
  checkpoint.epoch_step = epoch_done ? 0 : done_in_epoch;
  checkpoint.seed = options_.seed;
  checkpoint.world_size = id_.world_size;
  checkpoint.batch_size = options_.batch_size;
  checkpoint.optimizer = options_.optimizer.kind;
  checkpoint.optimizer_on_servers = sync_.UpdatesParameters();
  checkpoint.optimizer_step = optimizer_->step();
  checkpoint.compression = options_.compression.ToString();
  const int64_t n = layout_->total_numel();
  checkpoint.params.resize(n);
  RETURN_IF_ERROR(
      device_.CopyToHost(checkpoint.params.data(), params_, n * sizeof(float)));
  if (!checkpoint.optimizer_on_servers) {
    for (float* state : optimizer_->StateBuffers()) {
      std::vector<float> host(n);
      RETURN_IF_ERROR(
          device_.CopyToHost(host.data(), state, n * sizeof(float)));
      checkpoint.optimizer_state.push_back(std::move(host));
    }
  }
  // Worker 0's running statistics: the ones every worker evaluates with.
  checkpoint.buffers.resize(model_.buffer_count());
  if (!checkpoint.buffers.empty()) {
    RETURN_IF_ERROR(
        device_.CopyToHost(checkpoint.buffers.data(), model_.buffers(),
                           checkpoint.buffers.size() * sizeof(float)));
  }
  RETURN_IF_ERROR(
      Annotate(WriteCheckpoint(options_.checkpoint_path, checkpoint),
               absl::StrCat("worker 0: checkpoint of step ", step_)));
  last_checkpoint_step_ = step_;
  GS_LOG(DEBUG) << "checkpoint of step " << step_ << " written to "
                << options_.checkpoint_path;
  return absl::OkStatus();
}

void Trainer::ShowProgress(int64_t epoch, bool final_line) {
  if (!options_.progress || id_.rank != 0) return;
  const Clock::time_point now = Clock::now();
  if (!final_line && now - last_progress_ < std::chrono::seconds(2)) return;
  last_progress_ = now;
  const double elapsed =
      std::chrono::duration<double>(now - run_start_).count();
  const int64_t done = step_ - start_step_;  // in this run
  const double rate = done > 0 ? elapsed / done : 0;
  const double global_samples_per_s =
      elapsed > 0 ? done * static_cast<double>(options_.batch_size) *
                        id_.world_size / elapsed
                  : 0;
  PrintProgressLine(
      ProgressLine(step_, total_steps_, epoch + 1, options_.epochs, last_loss_,
                   global_samples_per_s, rate * (total_steps_ - step_)),
      final_line);
}

// Each rank writes its own file; worker 0 then merges every rank's file into
// --trace when it can read them (one machine or a shared file system), so one
// Perfetto view shows the whole job.
absl::Status Trainer::FinishTrace() {
  if (trace_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string mine,
                   WriteWorkerTrace(*trace_, options_.trace_path, id_.rank));
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   GatherOnWorker0("trace/worker", mine));
  if (id_.rank != 0) return absl::OkStatus();
  // The strategy's own processes (a PS's separate servers) wrote theirs
  // before the last worker's Shutdown returned, so they are complete here.
  for (const std::string& file : sync_.TraceFiles()) files.push_back(file);
  MergeJobTrace(files, options_.trace_path);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Trainer::GatherOnWorker0(
    const std::string& prefix, const std::string& value) {
  if (rendezvous_ == nullptr) return std::vector<std::string>{value};
  return rendezvous_->Gather(prefix, id_.rank, id_.world_size, /*root=*/0,
                             value, options_.timeout);
}

absl::Status Trainer::Finalize(double wall_seconds) {
  RETURN_IF_ERROR(Annotate(
      sync_.Shutdown(), absl::StrCat("worker ", id_.rank,
                                     " shutting down --sync=", options_.sync)));
  RETURN_IF_ERROR(FinishTrace());
  if (!options_.dump_params.empty()) {
    std::vector<float> host(layout_->total_numel());
    RETURN_IF_ERROR(
        device_.CopyToHost(host.data(), params_, host.size() * sizeof(float)));
    RETURN_IF_ERROR(WriteFileAtomically(
        absl::StrCat(options_.dump_params, ".worker", id_.rank),
        std::string(reinterpret_cast<const char*>(host.data()),
                    host.size() * sizeof(float))));
  }
  const std::string mine =
      RankSummaryJson(id_.rank, totals_, sync_.SummaryJson());
  ASSIGN_OR_RETURN(std::vector<std::string> all,
                   GatherOnWorker0("summary/worker", mine));
  if (id_.rank != 0) return absl::OkStatus();
  if (options_.metrics_dir.empty()) return absl::OkStatus();
  const std::string summary = RunSummaryJson(
      ManifestJson(), all, options_.sync, id_.world_size, id_.num_servers,
      model_.name(), last_accuracy_, wall_seconds);
  result_.summary_path = absl::StrCat(options_.metrics_dir, "/summary.json");
  return WriteFileAtomically(result_.summary_path, summary);
}

absl::StatusOr<TrainResult> Trainer::Run() {
  run_start_ = Clock::now();
  RETURN_IF_ERROR(Setup());
  if (options_.autotune) RETURN_IF_ERROR(Autotune());
  const int64_t per_rank = sampler_->num_samples();
  run_start_ = Clock::now();
  last_progress_ = run_start_;

  for (int64_t epoch = start_epoch_;
       epoch < options_.epochs && step_ < total_steps_; ++epoch) {
    const Clock::time_point epoch_start = Clock::now();
    // The same shuffle from (seed, epoch) as the run that wrote a checkpoint,
    // minus the batches it had already consumed.
    const std::vector<int64_t> indices = sampler_->Indices(epoch);
    int64_t done_in_epoch = epoch == start_epoch_ ? start_epoch_step_ : 0;
    epoch_loss_sum_ = 0;
    epoch_steps_ = 0;
    int64_t samples = 0;
    for (int64_t first = done_in_epoch * options_.batch_size;
         first < per_rank && step_ < total_steps_;
         first += options_.batch_size) {
      const int rows = static_cast<int>(
          std::min<int64_t>(options_.batch_size, per_rank - first));
      RETURN_IF_ERROR(TrainStep(indices, first, rows, epoch));
      RETURN_IF_ERROR(EvaluateEvery());
      ++done_in_epoch;
      samples += rows;
      ShowProgress(epoch, false);
      if (options_.checkpoint_every > 0 &&
          step_ % options_.checkpoint_every == 0) {
        RETURN_IF_ERROR(DrainPendingStep());
        RETURN_IF_ERROR(WriteCheckpointIfAsked(epoch, done_in_epoch));
      }
    }
    // Evaluation and the checkpoint read every parameter; the epoch's time
    // includes its last step's synchronization.
    RETURN_IF_ERROR(DrainPendingStep());
    EpochRecord record;
    record.rank = id_.rank;
    record.epoch = epoch;
    record.steps = epoch_steps_;
    record.mean_loss = epoch_steps_ > 0 ? epoch_loss_sum_ / epoch_steps_ : 0;
    record.seconds =
        std::chrono::duration<double>(Clock::now() - epoch_start).count();
    record.samples_per_s = record.seconds > 0 ? samples / record.seconds : 0;
    if (options_.evaluate) {
      // Replicas that may differ have no one model to share the work on.
      ASSIGN_OR_RETURN(last_accuracy_,
                       evaluator_->Evaluate(absl::StrCat(epoch), sync_.ReplicasMayDiffer(),
                                /*samples=*/0));
      record.test_accuracy = last_accuracy_;
    }
    metrics_->WriteEpoch(record);
    if (id_.rank == 0) {
      ShowProgress(epoch, true);
      GS_LOG(INFO) << absl::StrFormat(
          "epoch %d: mean loss %.4f, %.1f s, %.0f samples/s per worker%s",
          epoch + 1, record.mean_loss, record.seconds, record.samples_per_s,
          record.test_accuracy >= 0
              ? absl::StrFormat(", test accuracy %.2f%%",
                                100 * record.test_accuracy)
              : "");
    }
    // The epoch's end, or the run's last step inside it.
    RETURN_IF_ERROR(WriteCheckpointIfAsked(epoch, done_in_epoch));
  }
  // The run's end: replicas that should be identical are compared once more
  // (one CRC each), so that workers which diverged silently (another flag,
  // a strategy's fault) cannot end in success. Not where replicas may
  // legitimately differ (SSP, ASP), nor twice when --check_params_every
  // has just compared them.
  if (!sync_.ReplicasMayDiffer() &&
      !(options_.check_params_every > 0 &&
        step_ % options_.check_params_every == 0)) {
    RETURN_IF_ERROR(CheckParamsAgree("after the last step"));
  }
  const double wall =
      std::chrono::duration<double>(Clock::now() - run_start_).count();
  RETURN_IF_ERROR(Finalize(wall));
  result_.steps = step_;
  result_.final_loss = last_loss_;
  result_.test_accuracy = last_accuracy_;
  return result_;
}

}  // namespace

absl::StatusOr<TrainResult> RunTraining(const TrainerOptions& options,
                                        const ProcessIdentity& identity,
                                        Model& model, const DatasetPair& data,
                                        Device& device, GradientSync& sync,
                                        Rendezvous* rendezvous) {
  Trainer trainer(options, identity, model, data, device, sync, rendezvous);
  return trainer.Run();
}

}  // namespace gradsync
