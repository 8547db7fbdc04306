// The GradientSync of every CPU all-reduce: --sync=ring, halving_doubling,
// tree, hierarchical and allreduce are this one class running their row of
// the table (allreduce_table.h; registered in allreduce_strategies.cc), so
// they share the buckets, overlap, metrics, trace spans and failure handling.
// It reads no flag: the factories turn flags into AllReduceSyncOptions.
//
//   trainer ── BucketReady(b) ──> queue ──> communication thread
//                                             │ host staging (GPU only)
//                                             │ BucketReducer::Reduce: the
//                                             │   algorithm, or all-gather
//                                             │   and sum (codecs, rows)
//   trainer <── Finish() waits ── completed ──┘
//   (next forward <── WaitBucket(b) waits for b alone, on the CPU)
//
// BucketReady(b) only queues bucket b for a communication thread; that thread
// all-reduces the buckets in the order they became ready, which is the same on
// every rank because backward is deterministic (each all-reduce's header
// carries the bucket index, so a rank that disagrees fails loudly), and
// averages them (the 1/N is folded into the reduction). Finish waits for the
// step's buckets. On a CUDA device each bucket is first copied to a pinned
// host mirror (core/sync/host_staging.h) on a copy stream, overlapping the rest
// of backward, and copied back after its all-reduce; on the CPU the gradient
// buffer is reduced in place.
//
// --schedule=priority (partition_schedule.h) replaces the queue: each bucket
// is cut into partitions, the ranks agree on the buckets ready everywhere,
// and the thread all-reduces the ready partitions the next forward reads
// first, a credit's worth between agreements; --schedule=fifo is the queue
// above, unchanged.
//
// --compression and row-sparse buckets are BucketReducer's
// (bucket_reducer.h): it sums each bucket on the communication thread.
// The error-feedback residual is this worker's, saved beside each checkpoint
// (core/sync/error_feedback.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/algorithms/allreduce_kind.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/bucket_reducer.h"
#include "allreduce/partition_schedule.h"
#include "allreduce/transport/peer_transport.h"
#include "core/sync/compression.h"
#include "core/sync/error_feedback.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/host_staging.h"
#include "core/sync/step_buckets.h"

namespace gradsync {

struct AllReduceSyncOptions {
  // What the algorithm is made with: chunk, link, ranks per node.
  AlgorithmOptions algorithm;
  int socket_buffer_bytes = 4 << 20;
  // Why the chunk has its value, for the manifest: "flag", or the reason
  // the fixed default needs no deriving (it sizes system calls and the L2
  // staging, not the link: docs/compare.md has the sweep across link rates).
  std::string chunk_source =
      "default: 256 KiB, a system call's and L2's size, measured within 2% "
      "of the best chunk at 100 Mbit/s and 1 Gbit/s (docs/compare.md)";
  // The family's eager prefix before a peer's clear to send
  // (peer_exchange.h); 0: never wait. The ring ignores it.
  int64_t eager_bytes = PeerExchange::kDefaultEagerBytes;
  // Row-sparse buckets: all-gather the touched rows or all-reduce densely.
  using RowSparseRoute = ::gradsync::RowSparseRoute;
  RowSparseRoute row_sparse = RowSparseRoute::kAuto;
  // Tests only: called on the communication thread, without a lock, after
  // each collective of a bucket's gradient (a partition under priority, a
  // bucket under fifo) has completed, in the order they ran.
  std::function<void(const BucketPartition&)> after_collective;
};

class AllReduceSync : public GradientSync {
 public:
  // Runs `algorithm`'s row of the table (allreduce_table.h), which must
  // outlive this object.
  AllReduceSync(const SyncContext& context, const AllReduceEntry& algorithm,
                const AllReduceSyncOptions& options);
  ~AllReduceSync() override;

  void SetTrainingSchedule(const TrainingSchedule& schedule) override {
    schedule_ = schedule;
  }
  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override;
  void BucketReady(int bucket) override;
  absl::Status Finish(StepStats& stats) override;
  // On the CPU: returns once the communication thread has reduced `bucket`
  // in place. On a GPU the results reach the device only through the step's
  // FinishStep, so it is Unimplemented there and the trainer uses Finish.
  absl::Status WaitBucket(int bucket) override;
  absl::Status Rebucket(const ParamLayout& layout) override;
  absl::Status Shutdown() override;
  std::string SummaryJson() const override;

 private:
  // Validates and records bucket b as handed over; false if it is an error.
  bool MarkReady(int bucket);
  void SetSpans(const ParamLayout& layout);

  void CommunicationLoop();
  // --schedule=priority's loop (partition_schedule.h).
  void PriorityLoop();
  // Under mu_, priority: the buckets [0, p) this rank has on the host.
  int LocalReadyPrefixLocked() const;
  // Under mu_, priority, after an error: counts every bucket handed over
  // and not yet completed as completed, so Finish returns the error.
  void DrainAfterErrorLocked();
  // Priority, at Setup: the partition size and credit, from the flags or
  // derived from the link (probed when not given).
  absl::Status ResolveSchedule(const ParamLayout& layout);
  // Runs one partition's all-reduce; the error annotated with it.
  absl::Status ReducePartition(const BucketPartition& partition, int64_t step,
                               float scale);
  void StopThread();
  // Unregisters the loss listener; after it nothing touches transport_ from
  // the coordinator's thread.
  void StopListening();

  const SyncContext context_;
  const AllReduceEntry& entry_;
  const AllReduceSyncOptions options_;
  std::vector<BucketSpan> buckets_;
  Device* device_ = nullptr;  // Setup's, for Rebucket's new staging
  float* grads_ = nullptr;
  std::unique_ptr<HostStaging> staging_;
  std::unique_ptr<PeerTransport> transport_;
  int loss_listener_ = -1;  // registered with context_.rendezvous
  std::unique_ptr<AllReduceAlgorithm> algorithm_;
  std::unique_ptr<BucketReducer> reducer_;  // over algorithm_
  const Compressor compressor_;
  ErrorFeedback error_feedback_;  // the communication thread's during a step
  TrainingSchedule schedule_;
  std::thread thread_;
  // --schedule=priority: resolved at Setup.
  const bool priority_;
  int64_t partition_bytes_ = 0;
  int64_t credit_bytes_ = 0;
  bool cut_buckets_ = true;  // false: codecs that encode whole buckets
  std::vector<Bucket> layout_buckets_;

  // Shared with the communication thread.
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<int> queue_;
  StepBuckets step_buckets_{"ring"};  // this step: BucketReady seen
  int completed_ = 0;                 // this step
  std::vector<bool> reduced_;         // this step, per bucket: result final
  // Priority only, this step: per bucket, on the host and ready to send;
  // counted as completed; partitions still to run.
  std::vector<bool> arrived_;
  std::vector<bool> bucket_done_;
  std::vector<int> partitions_left_;
  PartitionSchedule partitions_;
  int agreed_prefix_ = 0;       // this step, the same on every rank
  int64_t agreements_ = 0;      // this step
  int64_t total_agreements_ = 0;
  double allreduce_ms_ = 0;           // this step, on the communication thread
  double codec_ms_ = 0;               // this step: encoding and decoding
  int64_t steps_done_ = 0;            // global steps finished
  int64_t row_sparse_gathered_ = 0;   // row-sparse buckets sent as rows
  int64_t row_sparse_dense_ = 0;      // and through the dense all-reduce

  absl::Status error_;  // first error; sticky
  bool stop_ = false;

  // Owned by the caller's thread.
  int64_t last_bytes_sent_ = 0;
  int64_t last_bytes_received_ = 0;
  int64_t last_gather_sent_ = 0;
  int64_t last_gather_received_ = 0;
};

}  // namespace gradsync
