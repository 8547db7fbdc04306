// What one parameter server's shard counts for its summary: payload bytes,
// parts, pulls, key steps and blocks, time spent summing and updating, and,
// under SSP/ASP, per worker the staleness of its pushes and the wait its
// pulls saved against BSP. Counters are atomics (the hot path adds to them
// under a key's lock, where another lock would serialise keys); the
// per-worker figures have their own lock, taken after a key's.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace gradsync {

class ShardStatistics {
 public:
  explicit ShardStatistics(int num_workers);

  // One part of a push accepted, `bytes` of payload.
  void CountPushPart(int64_t bytes) {
    bytes_in_ += bytes;
    ++parts_in_;
  }
  // Payload bytes of pull replies.
  void CountBytesOut(int64_t bytes) { bytes_out_ += bytes; }
  void CountPull() { ++pulls_; }
  // A key completed a step (SSP/ASP: the key's clock moved).
  void CountKeyStep() { ++key_steps_; }
  // A block averaged or stepped by the optimizer.
  void CountBlock() { ++blocks_; }
  // Time since `start` spent summing (or staging) pushes, or updating
  // (averaging, optimizer).
  void AddSumTime(absl::Time start) { sum_ns_ += NanosSince(start); }
  void AddUpdateTime(absl::Time start) { update_ns_ += NanosSince(start); }

  // SSP/ASP: worker `rank` pushed a gradient `staleness` steps stale.
  void RecordStaleness(int rank, int64_t staleness);
  // SSP/ASP: a pull of `worker` was answered `saved_ns` before BSP would have.
  void AddWaitSaved(int worker, int64_t saved_ns);
  // SSP/ASP: worker `rank` read a whole key (the count the saved wait is
  // averaged over).
  void CountRead(int rank);

  // Adds the counters to `summary` ("bytes_in", "parts_in", "key_steps",
  // ...) and, when `per_worker`, the per-worker arrays "staleness_max",
  // "staleness_mean" and "wait_saved_ms_mean".
  void AddTo(nlohmann::json& summary, bool per_worker) const;

 private:
  static int64_t NanosSince(absl::Time start) {
    return absl::ToInt64Nanoseconds(absl::Now() - start);
  }

  const int num_workers_;
  std::atomic<int64_t> bytes_in_{0};
  std::atomic<int64_t> bytes_out_{0};
  std::atomic<int64_t> parts_in_{0};   // push parts summed
  std::atomic<int64_t> pulls_{0};      // pull requests accepted
  std::atomic<int64_t> key_steps_{0};  // (key, step) pairs completed
  std::atomic<int64_t> blocks_{0};     // blocks finalised
  std::atomic<int64_t> sum_ns_{0};     // time spent summing
  std::atomic<int64_t> update_ns_{0};  // averaging and optimizer

  mutable absl::Mutex mu_;
  std::vector<int64_t> staleness_max_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> staleness_sum_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> staleness_count_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> saved_ns_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> reads_ ABSL_GUARDED_BY(mu_);  // of whole keys
};

}  // namespace gradsync
