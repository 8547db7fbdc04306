// One parameter server's shard of the keys: BSP aggregation (each push is
// summed the moment it arrives; a key's step completes when all N workers
// have pushed it), the optional server-side optimizer, and every consistency
// check on what workers send. No gRPC here: ps/server.cc feeds it messages
// and delivers its results, as ps-lite's KVServer hands requests to a handler.
//
// Pipelining inside a key. Each worker sends a key's floats in order, so the
// first min_r(received_r) floats of a key have been pushed by everyone and
// their result is final. Keys are therefore finalised block by block (blocks
// of `block_floats`, the server's message size): a block is averaged (or
// stepped by the optimizer) as soon as the slowest worker has pushed past it,
// and pulls stream it back while the rest of the key is still arriving, so a
// 4 MiB key does not wait for its last byte before its first byte returns.
//
// Memory does not grow with the number of steps. Under BSP a worker pushes
// step t+1 only after it has pulled all of step t, so a key only ever holds
// two steps: the sum of the step being pushed (completed + 1) and the result
// of the last completed step, which pulls read. Two buffers alternate by step
// parity; in server mode the result is the parameter buffer itself and one
// sum buffer suffices. Anything older or newer than those two steps is
// refused, which is also what keeps a confused worker from corrupting them.
//
// Stale-synchronous and asynchronous training (--ps_consistency=ssp|asp,
// server mode only). Each worker's push of a key is applied on its own, block
// by block as it arrives: the block's gradient divided by N, stepped by the
// block's optimizer with the BSP learning rate (so N pushes move the
// parameters as far as one BSP step; for SGD without momentum and no
// staleness they are the same sum). A key counts, per worker, the steps that
// worker pushed completely (its clock); the key's clock is the slowest
// worker's. A pull of step t by worker r is answered once r's own push of t
// is applied and
//   SSP with staleness s: every worker pushed step t - s (key clock > t - s),
//   ASP:                  no further condition,
// with the current parameters: they hold every worker's gradients of the
// steps before the key's clock, and perhaps some of later steps (SSP's
// guarantee, as in Ho et al., NIPS 2013). A worker computes step t + 1 only
// after that pull, so it runs at most s steps ahead of the slowest. The
// staleness of a gradient of step t is t minus the key's clock when its
// parameters were read: 0 under BSP, at most s under SSP. Steps at which the
// trainer checkpoints, and the run's last step, are barriers in every mode
// (the pull waits for every worker's push of that step), so a checkpoint is
// one consistent state, resume means "every worker continues from it", and
// every worker ends with the same model; pulls of such a step read the
// checkpoint's snapshot, which no later push changes.
//
// Checkpoints (server mode). The shard holds the parameters and optimizer
// slots, so it writes them to <--checkpoint>.server<k> at the steps worker 0
// writes its checkpoint (RegisterConfig.checkpoint), and on --resume loads
// them instead of taking worker 0's initial parameters. A key copies itself
// into the snapshot the moment it completes a checkpoint step, under its own
// lock, and the key that completes last writes the file before releasing its
// lock: no worker can pull that key's result, so none finishes the step (and
// writes its own checkpoint) before the shard is on disk, and a later step
// cannot change a key already copied. The shard of the checkpoint before
// is kept as <path>.server<k>.previous, for a job that stopped between a
// server's write and worker 0's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"
#include "core/optim/checkpoint.h"
#include "core/optim/optimizer.h"
#include "proto/parameter_server.pb.h"

namespace gradsync {

// Told when more of a key's result for the step it waits on is final.
class KeyWaiter {
 public:
  virtual ~KeyWaiter() = default;
  // Runs on the thread that finalised a block of the key (or in Pull when
  // some was final already), holding no shard lock. Must not block. Ask
  // FinalFloats how much is there: under SSP/ASP it is also called whenever
  // a worker's clock on the key moves, which may release nothing.
  virtual void KeyProgress(int64_t key) = 0;
};

// The default bound on a shard's keys (--ps_max_shard_mb): 32 GiB, far above
// any model studied here (VGG-16 is 553 MB in all), far below what a bogus
// registration could ask for.
constexpr int64_t kDefaultMaxShardBytes = int64_t{32} << 30;

class ServerShard {
 public:
  // `block_floats`: the unit in which keys are finalised (see above).
  // `max_floats`: the most floats of keys a registration may ask this shard
  // to hold (--ps_max_shard_mb), so that a hostile or confused worker cannot
  // make it allocate without bound.
  ServerShard(std::string job_id, int server_rank, int num_servers,
              int num_workers, int64_t block_floats,
              int64_t max_floats = kDefaultMaxShardBytes / 4);
  ~ServerShard();
  ServerShard(const ServerShard&) = delete;
  ServerShard& operator=(const ServerShard&) = delete;

  // "server 2".
  const std::string& name() const { return name_; }
  int num_workers() const { return num_workers_; }

  // A worker's registration. The first one fixes the keys, the update mode,
  // the optimizer and the first step (loading the shard's checkpoint on
  // resume); every later one must agree with it.
  absl::Status Register(const ps::RegisterConfig& config);
  // Server mode, worker 0: one part of a key's initial parameters, in order.
  absl::Status InitParams(const ps::KeyPart& part);
  // Server mode, worker 0, at the end of its registration: every key has its
  // initial parameters.
  absl::Status CheckParamsComplete() const;

  // Sums one part of a worker's push into the key's current step. A part that
  // fails any check changes nothing.
  absl::Status Push(const ps::KeyPart& part);

  // Checks a pull and arranges for waiter->KeyProgress(key) whenever more of
  // each key's result for request.header().step() becomes final (at once for
  // keys with some final already), until the key's step completes. On error
  // nothing is registered.
  absl::Status Pull(const ps::PullRequest& request,
                    const std::shared_ptr<KeyWaiter>& waiter);
  // How many leading floats of `key`'s result for `step`, as worker `rank`
  // pulls it, are final: all of them once the step completed (SSP/ASP: once
  // the pull may be answered), fewer while it is being pushed; -1 if that
  // result is gone (a later step completed) or the key is unknown.
  int64_t FinalFloats(int64_t key, int64_t step, int rank) const;
  // Copies up to `max_floats` final floats of `key`'s result for `step`, as
  // worker `rank` pulls it, from `offset` into the memory `place` returns for
  // their count (room for that many floats, any alignment), and returns the
  // count. Fails, without calling `place`, unless at least one float from
  // `offset` on is final. SSP/ASP: `reply` (if not null) gets the header
  // fields the reply carries: slowest_clock (the key's clock the floats were
  // read at) and, with the first part, wait_saved_us.
  absl::StatusOr<int64_t> ReadResult(
      int64_t key, int64_t step, int rank, int64_t offset, int64_t max_floats,
      absl::FunctionRef<char*(int64_t floats)> place,
      ps::Header* reply = nullptr);
  // The same into `part` (its data, offset, key_numel and
  // header's slowest_clock and wait_saved_us; the caller fills the rest of
  // the header).
  absl::Status ReadResult(int64_t key, int64_t step, int rank, int64_t offset,
                          int64_t max_floats, ps::KeyPart* part);
  // The key's size in floats (0 for an unknown key).
  int64_t KeyNumel(int64_t key) const;
  // A push that worker `rank`'s pull of `step` still waits for.
  struct MissingPush {
    int worker;
    int64_t step;
    bool operator<(const MissingPush& o) const {
      return worker != o.worker ? worker < o.worker : step < o.step;
    }
  };
  // The pushes of `key` that worker `rank`'s pull of `step` waits for: every
  // worker's push of `step` under BSP; under SSP/ASP the puller's own and
  // those older than the staleness bound allows. Empty once it may be read.
  std::vector<MissingPush> MissingWorkers(int64_t key, int64_t step,
                                          int rank) const;
  // "" under BSP, else " (SSP, staleness 2)" or " (ASP)": for messages.
  std::string ConsistencyNote() const;

  // A worker says the job is over for it. Returns true once every worker has.
  absl::StatusOr<bool> Shutdown(const ps::ShutdownRequest& request);
  std::vector<int> WorkersNotShutDown() const;

  // Payload counters, added to by the gRPC layer.
  void CountBytesOut(int64_t bytes) { bytes_out_ += bytes; }
  // {"server": 0, "keys": 12, "bytes_in": ..., "steps": ...}.
  std::string SummaryJson() const;

 private:
  struct KeyState;

  // Checks the header's job id and rank; `what` names the message ("push").
  absl::Status CheckHeader(const ps::Header& header, const char* what) const;
  absl::StatusOr<KeyState*> FindKey(const ps::Header& header, int64_t key,
                                    const char* what) const;
  // Called with key.mu held once every worker has pushed [0, pushed) of the
  // current step: finalises the whole blocks below `pushed` (all of the key
  // when pushed == numel) not finalised yet, and completes the step when the
  // key is done. Returns whether anything new became final. (Not annotated
  // ABSL_EXCLUSIVE_LOCKS_REQUIRED(key.mu): KeyState is incomplete here, which
  // clang's analysis refuses; shard.cc asserts the lock instead.)
  bool Finalize(KeyState& key, int64_t pushed);
  // "server 0: push from worker 2, step 5, key 3: ".
  std::string Context(const ps::Header& header, const char* what) const;
  // <path>.server<k>: this shard's checkpoint next to worker 0's <path>.
  std::string CheckpointPath(const std::string& path) const;
  // Where the shard of the checkpoint before keeps: <shard path>.previous.
  static std::string PreviousPath(const std::string& shard_path);
  // What a shard's checkpoint calls its model: "ps shard: server 1 of 2".
  std::string ShardName() const;
  // The first registration: builds the shard's keys (and, in server mode,
  // its optimizers) from `config` and publishes them; nothing on failure.
  absl::Status BuildFromFirst(const ps::RegisterConfig& config,
                              const std::string& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // A later registration: refused unless it describes the same shard (mode,
  // schedule, optimizer, key table) as the first, naming the difference.
  absl::Status CheckAgreesWithFirst(const ps::RegisterConfig& config,
                                    const std::string& context) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // One key's state at `shard_offset`; with an optimizer device (server
  // mode), its parameters and one bound optimizer per block.
  absl::StatusOr<std::unique_ptr<KeyState>> NewKey(
      const ps::KeySpec& spec, int64_t shard_offset, int64_t start_step,
      Device* optimizer_device, const OptimizerOptions& optimizer,
      bool asynchronous, const std::string& context) const;
  // Fills `keys` (built from `config`, not yet published) from this shard's
  // checkpoint, refusing one that is not exactly this shard at the start
  // step.
  absl::Status LoadCheckpoint(
      const ps::RegisterConfig& config,
      const std::vector<std::unique_ptr<KeyState>>& keys, Device& device,
      const std::string& context);
  // Whether worker 0 writes a checkpoint once `steps` steps are done.
  bool IsCheckpointStep(int64_t steps) const;
  // SSP/ASP: whether a pull of step `steps` - 1 waits for every worker (a
  // checkpoint step or the run's last).
  bool IsBarrierStep(int64_t steps) const;
  // SSP/ASP, key.mu held: one part of a push, checked like a BSP one, staged
  // and applied block by block; fills `notify` when the worker's clock moved.
  absl::Status PushAsync(KeyState& key, const ps::KeyPart& part,
                         std::vector<std::weak_ptr<KeyWaiter>>* notify);
  // SSP/ASP, key.mu held: applies worker `rank`'s staged floats [begin,
  // end), whole blocks (or the key's end).
  void ApplyAsync(KeyState& key, int rank, int64_t begin, int64_t end);
  // SSP/ASP: the key clock a pull of `step` needs (every worker pushed the
  // steps before it): step + 1 at a barrier, step + 1 - s under SSP, no
  // bound under ASP.
  int64_t RequiredClock(int64_t step) const;
  // Key.mu held: a push's part starts where its worker's push of the key
  // stands and stays within the key.
  absl::Status CheckPartContinues(const KeyState& key,
                                  const ps::KeyPart& part) const;
  // Key.mu held: worker 0 sent the key's initial parameters (server mode),
  // so the optimizer can run.
  absl::Status CheckParamsInitialized(const KeyState& key,
                                      const ps::Header& header) const;
  // SSP/ASP, key.mu held: worker `rank` pushed all of `step`.
  void AdvanceClock(KeyState& key, int rank, int64_t step);
  // SSP/ASP, key.mu held: whether worker `rank`'s pull of `step` may be
  // answered (1), must wait (0), or asks for a step it is past (-1).
  int AsyncReadiness(const KeyState& key, int64_t step, int rank) const;
  // SSP/ASP, key.mu held: ReadResult's work (see there).
  absl::StatusOr<int64_t> ReadAsync(
      KeyState& key, int64_t step, int rank, int64_t offset, int64_t max_floats,
      absl::FunctionRef<char*(int64_t floats)> place, ps::Header* reply);
  // BSP, key.mu held: one part of a push, summed (see the top of the file).
  absl::Status PushBsp(KeyState& key, const ps::KeyPart& part,
                       std::vector<std::weak_ptr<KeyWaiter>>* notify);
  bool asynchronous() const { return consistency_ != ps::CONSISTENCY_BSP; }
  // Called with key.mu held when the key completed the checkpoint step
  // `steps` - 1: copies it into the snapshot, and writes the file if it was
  // the last key.
  void SnapshotKey(const KeyState& key, int64_t steps);

  const std::string job_id_;
  const int server_rank_;
  const int num_servers_;
  const int num_workers_;
  const int64_t block_floats_;
  const int64_t max_floats_;
  const std::string name_;

  mutable absl::Mutex config_mu_;
  // Set once, by the first registration; immutable afterwards, so the
  // per-message path reads the key table without config_mu_ once it has seen
  // configured_ (acquire).
  std::atomic<bool> configured_{false};
  ps::RegisterConfig config_ ABSL_GUARDED_BY(config_mu_);
  ps::UpdateMode mode_ = ps::UPDATE_WORKER;
  ps::Consistency consistency_ = ps::CONSISTENCY_BSP;
  int64_t staleness_ = 0;
  float lr_ = 0.0f;
  std::unique_ptr<Device> device_;  // the optimizer's (CPU) device
  std::vector<std::unique_ptr<KeyState>> keys_;
  absl::flat_hash_map<int64_t, KeyState*> key_index_;
  std::unique_ptr<std::atomic<bool>[]> registered_;  // per worker rank
  std::vector<bool> shut_down_ ABSL_GUARDED_BY(config_mu_);
  // From the first registration (immutable afterwards, like keys_).
  ps::CheckpointConfig checkpoint_;
  std::string optimizer_kind_;
  int64_t shard_floats_ = 0;  // the keys' floats together

  // Server-mode checkpoints (see the top of this file). Lock order: a key's
  // mu, then checkpoint_mu_.
  absl::Mutex checkpoint_mu_ ABSL_ACQUIRED_AFTER(config_mu_);
  Checkpoint snapshot_ ABSL_GUARDED_BY(checkpoint_mu_);
  size_t snapshot_keys_ ABSL_GUARDED_BY(checkpoint_mu_) = 0;
  absl::Status checkpoint_status_ ABSL_GUARDED_BY(checkpoint_mu_);
  std::atomic<bool> checkpoint_failed_{false};
  std::atomic<int64_t> checkpoints_written_{0};

  std::atomic<int64_t> bytes_in_{0};
  std::atomic<int64_t> bytes_out_{0};
  std::atomic<int64_t> pushes_{0};       // parts summed
  std::atomic<int64_t> pulls_{0};        // pull requests accepted
  std::atomic<int64_t> completions_{0};  // (key, step) pairs completed
  std::atomic<int64_t> blocks_{0};       // blocks finalised
  std::atomic<int64_t> sum_ns_{0};       // time spent summing
  std::atomic<int64_t> update_ns_{0};    // averaging and optimizer

  // SSP/ASP, per worker: the staleness of its pushes (see the top of this
  // file), and the time its pulls were answered before BSP would have
  // answered them with the number of key reads it is summed over.
  mutable absl::Mutex stats_mu_ ABSL_ACQUIRED_AFTER(config_mu_);
  std::vector<int64_t> staleness_max_ ABSL_GUARDED_BY(stats_mu_);
  std::vector<int64_t> staleness_sum_ ABSL_GUARDED_BY(stats_mu_);
  std::vector<int64_t> staleness_count_ ABSL_GUARDED_BY(stats_mu_);
  std::vector<int64_t> saved_ns_ ABSL_GUARDED_BY(stats_mu_);
  std::vector<int64_t> reads_ ABSL_GUARDED_BY(stats_mu_);  // of whole keys
};

}  // namespace gradsync
