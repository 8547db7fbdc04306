// A parameter server's checkpoints (server mode): the steps at which worker 0
// writes its checkpoint (RegisterConfig.checkpoint), the shard's snapshot of
// those steps, its file <--checkpoint>.server<k>, and loading it on --resume
// instead of taking worker 0's initial parameters.
//
// A key copies itself into the snapshot the moment it completes a checkpoint
// step, under its own lock, and the key that completes last writes the file
// before releasing its lock: no worker can pull that key's result, so none
// finishes the step (and writes its own checkpoint) before the shard is on
// disk, and a later step cannot change a key already copied. The shard of the
// checkpoint before is kept as <path>.server<k>.previous, for a job that
// stopped between a server's write and worker 0's. Lock order: a key's lock,
// then this one's.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/optim/checkpoint.h"
#include "proto/parameter_server.pb.h"
#include "ps/server/key_parameters.h"

namespace gradsync {

class ShardCheckpoint {
 public:
  // `name`: the server's, for messages ("server 1"). `keys`: the shard's
  // keys in registration order (their floats concatenated are the
  // snapshot's), `state_buffers` per optimizer block, `optimizer_kind` as
  // registered.
  ShardCheckpoint(std::string name, int server_rank, int num_servers,
                  ps::CheckpointConfig config, std::string optimizer_kind,
                  std::vector<CheckpointKey> keys, size_t state_buffers);

  const ps::CheckpointConfig& config() const { return config_; }
  // Whether worker 0 writes a checkpoint once `steps` steps are done.
  bool IsCheckpointStep(int64_t steps) const;
  // SSP/ASP: whether a pull of step `steps` - 1 waits for every worker (a
  // checkpoint step or the run's last).
  bool IsBarrierStep(int64_t steps) const;

  // Called with the key's lock held when key `index` (of `keys`) completed
  // the checkpoint step `steps` - 1: copies it into the snapshot, and writes
  // the file if it was the last key.
  void TakeKey(size_t index, const KeyParameters& parameters, int64_t steps);
  // Copies `count` floats of key `index`'s snapshot of step `steps` from
  // float `offset` into the memory `place` returns for them (SSP/ASP's reads
  // at a barrier, which later pushes must not change). Fails, without
  // calling `place`, when the snapshot holds another step.
  absl::Status ReadSnapshot(
      size_t index, int64_t steps, int64_t offset, int64_t count,
      absl::FunctionRef<char*(int64_t floats)> place) const;
  // Fills `parameters` (one per key, not yet published) from this shard's
  // checkpoint at the config's start step, refusing one that is not exactly
  // this shard at that step. Errors start with `context`.
  absl::Status Load(const std::vector<KeyParameters*>& parameters,
                    const std::string& context);

  // OK until writing a checkpoint failed; then that error, for good.
  absl::Status status() const;
  int64_t written() const { return written_.load(); }

 private:
  // <path>.server<k>: this shard's checkpoint next to worker 0's <path>.
  std::string ShardPath(const std::string& path) const;
  // What a shard's checkpoint calls its model: "ps shard: server 1 of 2".
  std::string ShardName() const;
  // Starts the snapshot of step `steps` (sizes, names, key table).
  void StartSnapshot(int64_t steps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteSnapshot(int64_t steps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int server_rank_;
  const int num_servers_;
  const ps::CheckpointConfig config_;
  const std::string optimizer_kind_;
  const std::vector<CheckpointKey> keys_;
  const std::vector<int64_t> offsets_;  // of each key in the snapshot
  const int64_t shard_floats_;          // the keys' floats together
  const size_t state_buffers_;

  mutable absl::Mutex mu_;
  Checkpoint snapshot_ ABSL_GUARDED_BY(mu_);
  size_t snapshot_keys_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
  std::atomic<int64_t> written_{0};
};

}  // namespace gradsync
