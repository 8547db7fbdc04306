// The one seam between the worker runtime and a gradient-synchronization
// strategy, and the registry that picks a strategy by name (--sync=...).
//
// The trainer knows nothing else about communication. During backward it calls
// BucketReady(b) the moment every gradient of bucket b is final; BucketReady
// must not block on the network (it hands the bucket to a communication
// thread, a gRPC completion queue or a CUDA stream). Finish() then waits for
// all buckets of the step; afterwards every rank holds the same averaged
// gradient in the flat gradient buffer, or, when UpdatesParameters() is true
// (a parameter server running the optimizer), the same new parameters.
// Strategies that can tell when one bucket is done implement WaitBucket, so
// the next step's forward waits only for the buckets its layers read.
//
// Adding a strategy is one folder and one GRADSYNC_REGISTER_SYNC line; the
// library must be linked with alwayslink = 1 so its registration runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"
#include "core/device/device.h"
#include "core/optim/optimizer_options.h"
#include "core/sync/compression.h"
#include "core/sync/param_layout.h"
#include "core/sync/schedule.h"

namespace gradsync {

// What a strategy measured during one step; the trainer adds its own timings
// and writes everything into the step's JSON line.
struct StepStats {
  int64_t bytes_sent = 0;  // payload bytes this rank sent in this step
  int64_t bytes_recv = 0;  // payload bytes this rank received in this step
  // Strategy-specific figures ("push_ms", "pull_ms", "server1_bytes_sent",
  // ...).
  std::vector<std::pair<std::string, double>> extra;
};

// Where the flat buffers live. Both are device memory of `total_numel` floats
// laid out by the ParamLayout.
struct SyncBuffers {
  float* grads = nullptr;
  float* params = nullptr;
};

// Where training starts and when the trainer checkpoints
// (core/optim/checkpoint.h), for strategies that hold training state of their
// own: parameter servers running the optimizer keep the parameters and
// optimizer slots, so they write their shard at the steps worker 0 writes its
// checkpoint and load it again on --resume.
struct TrainingSchedule {
  int64_t start_step = 0;       // global steps already done (resumed), else 0
  bool resume = false;          // the run continues from `checkpoint_path`
  std::string checkpoint_path;  // empty: no checkpoints
  // Checkpoints follow every `checkpoint_every`-th step (0: none of those),
  // every epoch's last step and the run's last step.
  int64_t checkpoint_every = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
};

// What a strategy is given to set itself up: who this rank is, how to reach
// its peers, and the optimizer a strategy that updates parameters must run.
struct SyncContext {
  ProcessIdentity identity;
  // Rendezvous with the other processes of the job; null in a single-process
  // run (one worker and no servers). Strategies publish their own listening
  // addresses with Set and read their peers' with Get.
  Rendezvous* rendezvous = nullptr;
  // Every member of the job (workers first, then servers), as the rendezvous
  // returned them when this process joined; a server's address is its gRPC
  // endpoint, a worker's is its host (no port).
  std::vector<Member> members;
  // Every wait on a peer gives up after this and names the peer (--timeout_s).
  absl::Duration timeout = absl::Seconds(60);
  // The workers' optimizer, its learning rate already scaled for the number
  // of workers (--lr_scaling): what --ps_update=server runs on the servers.
  OptimizerOptions optimizer;
  // --compression: how each bucket is encoded after it is ready (none: float32
  // exactly as before). A strategy that cannot carry a method refuses it in
  // its factory with InvalidArgument naming the method and the strategy.
  CompressionSpec compression;
  // Shared by every worker of the job (--seed): random-k draws its indices
  // from it, so all workers pick the same ones.
  uint64_t compression_seed = 0;
  // --schedule, --partition_kb, --credit_kb (core/sync/schedule.h): the order
  // the strategy sends ready buckets in. A strategy that sends only in ready
  // order takes fifo and refuses priority in its factory, naming itself.
  ScheduleOptions schedule;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // Before Setup, once. Step numbers a strategy exchanges with its peers
  // start at schedule.start_step. Strategies without training state of their
  // own need nothing from it.
  virtual void SetTrainingSchedule(const TrainingSchedule& schedule) {}
  // Once, before training.
  virtual absl::Status Setup(const ParamLayout& layout, Device& device,
                             const SyncBuffers& buffers) = 0;
  // During backward, as soon as every gradient of `bucket` is final.
  virtual void BucketReady(int bucket) = 0;
  // Blocks until every bucket of this step is synchronized.
  virtual absl::Status Finish(StepStats& stats) = 0;
  // Per-bucket completion, for the next step's forward to start on its first
  // layers while later buckets are still in flight. Called after the step's
  // last BucketReady and before its Finish, any number of times, for any
  // buckets in any order: blocks until `bucket` is synchronized (its averaged
  // gradient, or with UpdatesParameters() its new parameters, in the
  // buffers, readable by the work the trainer queues next). Finish still
  // follows once per step: it waits for the rest and returns the step's
  // statistics. The default is Unimplemented: the trainer then waits for the
  // whole step with Finish before the first layer, which is always correct.
  virtual absl::Status WaitBucket(int bucket) {
    return absl::UnimplementedError(
        "this strategy completes a step only as a whole (Finish)");
  }
  // Between steps (after Finish, before the next BucketReady): regroup the
  // parameters into `layout`'s buckets. `layout` holds the same tensors at
  // the same offsets as Setup's; only the bucket cap differs. --autotune
  // calls it on every rank at the same step with the same layout, to time
  // another bucket size without a second Setup (which would reconnect or
  // re-register). Unimplemented where a strategy cannot regroup mid-run.
  virtual absl::Status Rebucket(const ParamLayout& layout) {
    return absl::UnimplementedError(
        "this strategy cannot change its buckets after Setup");
  }
  // True when Finish() leaves new parameters (server-side optimizer) rather
  // than averaged gradients; the trainer then skips its optimizer step.
  virtual bool UpdatesParameters() const { return false; }
  // True when workers may hold different parameters between steps (a
  // parameter server under SSP or ASP): the trainer then neither compares
  // replicas nor sums an evaluation over them.
  virtual bool ReplicasMayDiffer() const { return false; }
  // After the last step: tell peers and servers the job is done, release
  // sockets. Called once; errors are reported but training results stand.
  virtual absl::Status Shutdown() { return absl::OkStatus(); }
  // A JSON object with the strategy's run-level figures, merged into the run
  // summary under "sync" (for example per-server bytes for the PS).
  virtual std::string SummaryJson() const { return "{}"; }
  // After Shutdown: --trace timelines the strategy's other processes wrote
  // (a PS's separate servers), which worker 0 merges with the workers'.
  virtual std::vector<std::string> TraceFiles() const { return {}; }
};

using GradientSyncFactory =
    std::function<absl::StatusOr<std::unique_ptr<GradientSync>>(
        const SyncContext&)>;

// Checks what a strategy's factory would refuse in its options (its flags'
// values, their combinations with the context's compression and schedule),
// without creating it: nothing is connected, logged or recorded.
using GradientSyncCheck = std::function<absl::Status(const SyncContext&)>;

class GradientSyncRegistry {
 public:
  // Returns true so it can initialise a static; dies on a duplicate name.
  static bool Register(const std::string& name, GradientSyncFactory factory);
  static absl::StatusOr<std::unique_ptr<GradientSync>> Create(
      const std::string& name, const SyncContext& context);
  // A check for strategy `name`'s options, beside its factory.
  static bool RegisterCheck(const std::string& name, GradientSyncCheck check);
  // For a launcher that checks its workers' flags once before it starts
  // any (`context` with the job's shape, no rendezvous): the error Create
  // would give for `name`'s options, in every worker after start-up. An
  // unknown name is refused; a strategy without a check passes (its
  // factory checks at start-up).
  static absl::Status CheckOptions(const std::string& name,
                                   const SyncContext& context);
  // Registered names, sorted ("local", "ps", "ring", ...).
  static std::vector<std::string> Names();
};

#define GRADSYNC_REGISTER_SYNC(name, factory)                    \
  static const bool gs_sync_registered_##name [[maybe_unused]] = \
      ::gradsync::GradientSyncRegistry::Register(#name, factory)

}  // namespace gradsync
