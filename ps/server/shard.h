// One parameter server's shard of the keys: the registration that fixes them
// (update mode, consistency, optimizer, schedule, all checked to agree across
// workers), every check on what workers send, and the routing of pushes and
// pulls to the keys. No gRPC here: ps/server/server.cc feeds it messages and
// delivers its results, as ps-lite's KVServer hands requests to a handler.
//
// The shard is a thin owner; each concern keeps its own state and lock (in
// this folder):
//   bsp_key.h            a key under BSP: sums, block-wise completion
//   async_key.h          a key under SSP/ASP: per-push updates, clocks
//   shard_key.h          what both kinds of key share (one lock per key)
//   key_parameters.h     a key's parameters and optimizer (server mode)
//   shard_checkpoint.h   the checkpoint schedule, snapshot and file
//   shard_statistics.h   the counters of the summary
//   encoded_key.h        a key's compressed pushes and results
// Lock order: the shard's registration lock, then a key's encodings', then
// the key's, then the checkpoint's or the statistics'.
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
#include "proto/parameter_server.pb.h"
#include "ps/server/encoded_key.h"
#include "ps/server/shard_checkpoint.h"
#include "ps/server/shard_key.h"
#include "ps/server/shard_statistics.h"

namespace gradsync {

// The default bound on a shard's keys (--ps_max_shard_mb): 32 GiB, far above
// any model studied here (VGG-16 is 553 MB in all), far below what a bogus
// registration could ask for.
constexpr int64_t kDefaultMaxShardBytes = int64_t{32} << 30;

class ServerShard {
 public:
  // `block_floats`: the unit in which keys are finalised (ps/server/bsp_key.h).
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

  // Worker mode under --compression (ps/key_compression.h): whether `key`'s
  // results travel as an encoding rather than float32.
  bool EncodedResult(int64_t key) const;
  // The size in bytes of `key`'s encoded result for `step` as worker `rank`
  // pulls it once the step is complete, 0 before; an error when the result
  // is gone or the key has no encoded result.
  absl::StatusOr<int64_t> EncodedResultBytes(int64_t key, int64_t step,
                                             int rank);
  // Copies up to `max_bytes` of that encoding from byte `offset` into the
  // memory `place` returns for their count, and returns the count.
  absl::StatusOr<int64_t> ReadEncodedResult(
      int64_t key, int64_t step, int rank, int64_t offset, int64_t max_bytes,
      absl::FunctionRef<char*(int64_t bytes)> place);
  // A push that worker `rank`'s pull of `step` still waits for.
  using MissingPush = ::gradsync::MissingPush;
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
  void CountBytesOut(int64_t bytes) { statistics_.CountBytesOut(bytes); }
  // {"server": 0, "keys": 12, "bytes_in": ..., "steps": ...}.
  std::string SummaryJson() const;

 private:
  // Checks the header's job id and rank; `what` names the message ("push").
  absl::Status CheckHeader(const ps::Header& header, const char* what) const;
  absl::StatusOr<ShardKey*> FindKey(const ps::Header& header, int64_t key,
                                    const char* what) const;
  // The key `key` once registration published the keys; null before, or
  // for an unknown key.
  ShardKey* KeyOrNull(int64_t key) const;
  // The key's encodings (null: float32 both ways, or an unknown key).
  EncodedKey* EncodedOrNull(int64_t key) const;
  // `key`'s float32 result for `step`, all of it (for its encoding).
  absl::StatusOr<std::vector<float>> WholeResult(ShardKey* key, int64_t step,
                                                 int rank);
  // "server 0: push from worker 2, step 5, key 3: ".
  std::string Context(const ps::Header& header, const char* what) const {
    return MessageContext(name_, header, what);
  }
  // The first registration: builds the shard's keys (and, in server mode,
  // their parameters and optimizers, loaded from the shard's checkpoint on
  // resume) from `config` and publishes them; nothing on failure.
  absl::Status BuildFromFirst(const ps::RegisterConfig& config,
                              const std::string& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // A later registration: refused unless it describes the same shard (mode,
  // schedule, optimizer, key table) as the first, naming the difference.
  absl::Status CheckAgreesWithFirst(const ps::RegisterConfig& config,
                                    const std::string& context) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  bool asynchronous() const { return consistency_ != ps::CONSISTENCY_BSP; }

  const std::string job_id_;
  const int server_rank_;
  const int num_servers_;
  const int num_workers_;
  const int64_t block_floats_;
  const int64_t max_floats_;
  const std::string name_;

  // Counted by the keys and the gRPC layer; needs no registration.
  ShardStatistics statistics_;

  mutable absl::Mutex config_mu_;
  // Set once, by the first registration; what it publishes is immutable
  // afterwards, so the per-message path reads the key table without
  // config_mu_ once it has seen configured_ (acquire).
  std::atomic<bool> configured_{false};
  ps::RegisterConfig config_ ABSL_GUARDED_BY(config_mu_);
  std::unique_ptr<std::atomic<bool>[]> registered_;  // per worker rank
  std::vector<bool> shut_down_ ABSL_GUARDED_BY(config_mu_);
  // Published with configured_ (see above).
  ps::UpdateMode mode_ = ps::UPDATE_WORKER;
  ps::Consistency consistency_ = ps::CONSISTENCY_BSP;
  int64_t staleness_ = 0;
  std::unique_ptr<Device> device_;  // the optimizer's (CPU), before the keys
  std::unique_ptr<ShardCheckpoint> checkpoint_;  // before the keys too
  std::vector<std::unique_ptr<ShardKey>> keys_;
  absl::flat_hash_map<int64_t, ShardKey*> key_index_;
  // Keys pushed or pulled as encodings (--compression, row-sparse keys).
  std::vector<std::unique_ptr<EncodedKey>> encoded_keys_;
  absl::flat_hash_map<int64_t, EncodedKey*> encoded_index_;
};

}  // namespace gradsync
