// The training loop of one worker: data from the DistributedSampler, forward
// and backward with each bucket handed to the GradientSync the moment its
// gradients are final, Finish, the optimizer step, metrics, sharded
// evaluation every epoch, checkpoints on worker 0, and the run summary
// gathered on worker 0 through the coordinator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"
#include "core/data/dataset.h"
#include "core/data/image_augmentation.h"
#include "core/device/device.h"
#include "core/sync/compression.h"
#include "core/sync/schedule.h"
#include "core/sync/gradient_sync.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/train/straggler.h"

namespace gradsync {

struct TrainerOptions {
  int batch_size = 64;  // per worker
  int64_t epochs = 5;
  int64_t max_steps = 0;  // stop after this many steps in all; 0 = no limit
  uint64_t seed = 1;      // parameters and data order
  bool shuffle = true;
  bool drop_last = false;
  // Applied to each training sample as its batch is built, drawn from (seed,
  // epoch, sample index) so every strategy and number of workers sees the
  // same augmented samples. Never applied to the test set.
  AugmentationOptions augmentation;
  double bucket_mb = 25;  // 0: the rule's cap (core/sync/bucket_size_rule.h)
  // --autotune: before the first step, time each of a few bucket caps around
  // the rule's (core/train/autotune.h) for one untimed and `autotune_steps`
  // timed trial steps, keep the fastest by the slowest rank, and undo every
  // trial step (parameters, optimizer and model state restored; the sampler
  // and step count do not move), so the run trains exactly as one started
  // with the chosen --bucket_mb. An explicit bucket_mb is kept untried.
  bool autotune = false;
  int autotune_steps = 3;
  std::string sync = "local";
  // --overlap_next_forward: the next step's forward starts as soon as the
  // buckets its first layers read are synchronized (GradientSync::WaitBucket)
  // and their optimizer update applied, instead of after the whole Finish.
  // The same parameters either way; a step's exposed communication is then
  // the time the following forward (or the epoch's end) waits for it.
  bool overlap_next_forward = true;
  // --compression: every bucket's encoding on the wire (core/sync/compression.h).
  CompressionSpec compression;
  // --schedule, --partition_kb, --credit_kb: handed to the strategy
  // (core/sync/schedule.h); the trainer's own order does not change.
  ScheduleOptions schedule;
  OptimizerOptions optimizer;
  std::string lr_scaling = "none";
  bool evaluate = true;
  // Worker 0 writes a checkpoint (core/optim/checkpoint.h) here after every
  // epoch, every `checkpoint_every` steps (0: no others) and the last step.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  // Every rank reads `checkpoint_path` and continues from it; epochs and
  // max_steps count from the original run's start.
  bool resume = false;
  std::string metrics_dir;         // JSON lines and summary.json; empty = none
  bool progress = true;            // a progress line on worker 0
  int64_t check_params_every = 0;  // compare parameter CRCs across ranks
  std::string dump_params;         // write final parameters to <path>.worker<r>
  int64_t warmup_steps = 5;        // left out of the summary's means
  absl::Duration timeout = absl::Seconds(60);
  // Timeline (core/telemetry/trace.h): each rank writes
  // <trace_path>.worker<r>.json for its first `trace_steps` steps, and worker 0
  // merges them into `trace_path` when the files are on its file system. Empty:
  // no trace.
  std::string trace_path;
  int64_t trace_steps = 20;
  // Fault injection for the failure tests: worker `fault_rank` ends itself at
  // the start of step `fault_step`, by exit(3) ("exit") or SIGKILL ("kill").
  int fault_rank = -1;
  int64_t fault_step = 0;
  std::string fault = "exit";
  // Stragglers and jitter for experiments (core/train/straggler.h).
  Slowness slowness;
  // Worker 0 also evaluates the whole test set on its own parameters every
  // this many steps (0: never), writing an "eval" line with the time since
  // the run started: accuracy against wall time, without a collective.
  int64_t eval_every = 0;
  // Those evaluations use the first this many test samples (0: all), so
  // frequent ones cost little.
  int64_t eval_samples = 0;
};

struct TrainResult {
  int64_t steps = 0;
  double final_loss = 0;
  double test_accuracy = -1;  // after the last epoch; -1 if not evaluated
  std::string metrics_path;   // this rank's JSON lines
  std::string summary_path;   // worker 0 only
};

// Runs training to the end. `rendezvous` may be null for a single worker
// without servers; `sync` must already be created for this job.
absl::StatusOr<TrainResult> RunTraining(const TrainerOptions& options,
                                        const ProcessIdentity& identity,
                                        Model& model, const DatasetPair& data,
                                        Device& device, GradientSync& sync,
                                        Rendezvous* rendezvous);

}  // namespace gradsync
