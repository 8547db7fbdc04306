// One key of a parameter server's shard, as the shard routes messages to it:
// what every key holds whatever the consistency mode (its size, the floats of
// the current push received from each worker, the pulls waiting on it, and in
// server mode its parameters and optimizer), behind one lock per key so keys
// proceed in parallel. BspKey (ps/server/bsp_key.h) and AsyncKey
// (ps/server/async_key.h) add the state of their mode. No gRPC, no flags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/parameter_server.pb.h"
#include "ps/server/key_parameters.h"
#include "ps/server/shard_checkpoint.h"
#include "ps/server/shard_statistics.h"

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

// A push that a worker's pull still waits for.
struct MissingPush {
  int worker;
  int64_t step;
  bool operator<(const MissingPush& o) const {
    return worker != o.worker ? worker < o.worker : step < o.step;
  }
};

// "server 0: push from worker 2, step 5, key 3": the start of every error
// about a message.
std::string MessageContext(const std::string& server, const ps::Header& header,
                           const char* what);

// Pulls to tell once the lock is released (KeyWaiter::KeyProgress).
using Waiters = std::vector<std::weak_ptr<KeyWaiter>>;

class ShardKey {
 public:
  struct Shape {
    int64_t id = 0;
    int64_t numel = 0;
    // The key's place among the shard's keys (registration order), which is
    // its place in the shard's checkpoint.
    size_t index = 0;
    int num_workers = 1;
    // The unit in which results are final and the optimizer steps.
    int64_t block_floats = 1;
  };
  // What the shard lends every key, whatever its mode.
  struct Setting {
    // The server's name for messages ("server 0"); it outlives the key.
    const std::string& server;
    // The step of every worker's first push (non-zero after a resume).
    int64_t start_step = 0;
    // Server mode's parameters and optimizer, null in worker mode, and the
    // BSP learning rate the optimizer steps with.
    std::unique_ptr<KeyParameters> parameters;
    float lr = 0;
    // The shard's; they outlive the key. The key copies itself into
    // `checkpoint` at checkpoint steps and counts its reads in `statistics`.
    ShardCheckpoint& checkpoint;
    ShardStatistics& statistics;
  };
  ShardKey(const Shape& shape, Setting setting);
  virtual ~ShardKey() = default;
  ShardKey(const ShardKey&) = delete;
  ShardKey& operator=(const ShardKey&) = delete;

  int64_t id() const { return id_; }
  int64_t numel() const { return numel_; }

  // Server mode, worker 0: the next part of the key's initial parameters.
  absl::Status InitParams(const ps::KeyPart& part);
  // Server mode: an error unless worker 0 sent all initial parameters.
  absl::Status CheckParamsComplete() const;

  // One part of a push, already checked to name this key with whole floats.
  // A part that fails any check changes nothing. Fills `notify` with the
  // pulls to tell.
  virtual absl::Status Push(const ps::KeyPart& part, Waiters* notify) = 0;
  // Whether a pull of header.step() by header.rank() may wait on this key;
  // errors start with `context`.
  virtual absl::Status CheckPull(const ps::Header& header,
                                 const std::string& context) const = 0;
  // Registers a checked pull; returns true when some of it can be read now
  // (the caller tells the waiter), else `waiter` is told later.
  virtual bool AddPull(int64_t step, int rank,
                       const std::shared_ptr<KeyWaiter>& waiter) = 0;
  // See ServerShard::FinalFloats and ServerShard::ReadResult.
  virtual int64_t FinalFloats(int64_t step, int rank) const = 0;
  virtual absl::StatusOr<int64_t> Read(
      int64_t step, int rank, int64_t offset, int64_t max_floats,
      absl::FunctionRef<char*(int64_t floats)> place, ps::Header* reply) = 0;
  // The pushes worker `rank`'s pull of `step` waits for.
  virtual std::vector<MissingPush> MissingWorkers(int64_t step,
                                                  int rank) const = 0;
  // How many steps of the key are done (for the summary).
  virtual int64_t StepsDone() const = 0;

 protected:
  // A push's part starts where its worker's push of the key stands and stays
  // within the key.
  absl::Status CheckPartContinues(const ps::KeyPart& part) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Worker 0 sent the key's initial parameters (server mode), so the
  // optimizer can run.
  absl::Status CheckParamsInitialized(const ps::Header& header) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Context(const ps::Header& header, const char* what) const {
    return MessageContext(server_, header, what);
  }

  const int64_t id_;
  const int64_t numel_;
  const size_t index_;
  const int num_workers_;
  const int64_t block_floats_;
  const std::string& server_;
  const int64_t start_step_;
  const float lr_;
  ShardCheckpoint& checkpoint_;
  ShardStatistics& statistics_;

  mutable absl::Mutex mu_;
  // Floats of the current push received from each worker.
  std::vector<int64_t> received_ ABSL_GUARDED_BY(mu_);
  // Pulls waiting on the key. Weak: a pull that gave up (deadline,
  // cancelled) is simply skipped.
  Waiters waiters_ ABSL_GUARDED_BY(mu_);
  // Server mode; null in worker mode.
  const std::unique_ptr<KeyParameters> parameters_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace gradsync
