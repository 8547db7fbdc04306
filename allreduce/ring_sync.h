// --sync=ring: GradientSync over the CPU ring all-reduce (ring_allreduce.h),
// and over every other CPU all-reduce of the family (allreduce_algorithm.h):
// --sync=halving_doubling, tree, hierarchical and allreduce register this same
// class with their own AllReduceStrategy (allreduce_family_sync.cc), so they
// share the buckets, overlap, metrics, trace spans and failure handling.
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
#include "allreduce/allreduce_algorithm.h"
#include "allreduce/ring_allreduce.h"
#include "allreduce/ring_transport.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/host_staging.h"
#include "core/sync/step_buckets.h"

namespace gradsync {

struct RingSyncOptions {
  int64_t chunk_bytes = 256 << 10;
  int socket_buffer_bytes = 4 << 20;
  // Why chunk_bytes has its value, for the manifest: "flag", or the reason
  // the fixed default needs no deriving (it sizes system calls and the L2
  // staging, not the link: docs/compare.md has the sweep across link rates).
  std::string chunk_source =
      "default: 256 KiB, a system call's and L2's size, measured within 2% "
      "of the best chunk at 100 Mbit/s and 1 Gbit/s (docs/compare.md)";
};

// From --ring_chunk_kb and --ring_socket_buffer_kb.
RingSyncOptions RingSyncOptionsFromFlags();

// Which all-reduce of the family a RingSync runs.
struct AllReduceStrategy {
  std::string name = "ring";  // the --sync= name, starts errors and logs
  // The ranks besides the ring neighbours this rank needs connections to
  // (RingTransportOptions::peers); null for none.
  std::function<std::vector<int>(int rank, int world_size)> peers;
  // Makes the algorithm over the connected transport; null for the ring.
  std::function<absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>>(
      RingTransport* transport, const RingSyncOptions& options)>
      create;
};

class RingSync : public GradientSync {
 public:
  RingSync(const SyncContext& context, const RingSyncOptions& options,
           AllReduceStrategy strategy = AllReduceStrategy());
  ~RingSync() override;

  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override;
  void BucketReady(int bucket) override;
  absl::Status Finish(StepStats& stats) override;
  absl::Status Shutdown() override;
  std::string SummaryJson() const override;

 private:
  // Validates and records bucket b as handed over; false if it is an error.
  bool MarkReady(int bucket);
  struct Span {
    int64_t offset = 0;  // floats
    int64_t numel = 0;
  };

  void CommunicationLoop();
  void StopThread();
  // Unregisters the loss listener; after it nothing touches transport_ from
  // the coordinator's thread.
  void StopListening();

  const SyncContext context_;
  const RingSyncOptions options_;
  const AllReduceStrategy strategy_;
  std::vector<Span> buckets_;
  std::unique_ptr<HostStaging> staging_;
  std::unique_ptr<RingTransport> transport_;
  int loss_listener_ = -1;  // registered with context_.rendezvous
  std::unique_ptr<AllReduceAlgorithm> ring_;
  std::thread thread_;

  // Shared with the communication thread.
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<int> queue_;
  StepBuckets step_buckets_{"ring"};  // this step: BucketReady seen
  int completed_ = 0;                 // this step
  double allreduce_ms_ = 0;           // this step, on the communication thread
  absl::Status error_;                // first error; sticky
  bool stop_ = false;

  // Owned by the caller's thread.
  int64_t last_bytes_sent_ = 0;
  int64_t last_bytes_received_ = 0;
};

}  // namespace gradsync
