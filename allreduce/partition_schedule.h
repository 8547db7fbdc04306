// --schedule=priority for the all-reduce family: which partitions of a step
// run next, as separate collectives, and how every rank comes to run the
// same ones in the same order. No sockets and no threads here: AllReduceSync
// (allreduce_sync.h) drives it from its communication thread, and the tests
// drive it by hand.
//
// Why the ranks must agree. Every collective is entered by every rank; if
// rank 0 starts partition A while rank 1 starts partition B, the transfer
// headers disagree and the step fails (or, with equal sizes, two different
// gradients would be summed). Under fifo the order is backward's, the same
// everywhere. Under priority each rank would pick among what *it* has ready,
// and ranks run backward at different speeds.
//
// The agreement. Backward hands buckets over in index order (bucket 0 holds
// the last layers), so what a rank has ready is a prefix [0, p) of the
// buckets. Before picking, the ranks all-reduce one tiny vector (one float
// per bucket: 1 below the rank's own prefix, 0 above) with the algorithm
// they run anyway; an entry that sums to N is ready on every rank, so the
// number of leading entries equal to N is min over the ranks of p, the same
// number everywhere. Each rank then takes, from the buckets below that
// agreed prefix, the unsent partitions with the lowest offsets (soonest read
// by the next forward, core/sync/schedule.h) up to the credit; the choice is
// a function of the agreed prefix and of what was sent before, both equal on
// every rank, so it is equal. A rank whose buckets arrive out of index order
// (a model that reports some gradients late, a DDP bucket order that is not
// gradsync's) only sees a shorter prefix: less to pick from, never a wrong
// pick. Once the agreed prefix covers every bucket, the rest of the step runs
// without another agreement.
//
//   rank 0 ready: [b0 b1 b2 b3]        sums:  2 2 1 0   (N = 2)
//   rank 1 ready: [b0 b1 b2]    ->  agreed prefix 2: pick among b0, b1
//                                   (b2, b3 wait for the next agreement)
//
// A rank enters an agreement only when its own prefix holds an unsent
// partition; the rank with the smallest prefix then has one, and that
// partition lies in every other rank's prefix too, so no agreement comes back
// empty and nobody spins.
//
// The credit, and what preemption means here. One communication thread runs
// one collective at a time, and a collective that has started cannot be
// abandoned (the peers are mid-stream). So the credit is the bytes the
// ranks commit to between two agreements: the partitions taken for one
// batch run to the end, then the ranks agree again and a partition that
// became ready meanwhile (the first layers, at the end of backward) goes
// before every queued partition of lower priority. A late high-priority
// partition waits at most for the batch in progress, never for the queue.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sync/param_layout.h"
#include "core/sync/schedule.h"

namespace gradsync {

// The tag of the agreement's all-reduce, below the probe's and the
// selector's (from 0xFFFFFF00) and above any partition's (PartitionTag).
inline constexpr uint32_t kReadyPrefixTag = 0xFFFFFE00u;

// The tag a partition's all-reduce carries in its headers: the bucket's
// index for a bucket's first partition (so fifo's tags are unchanged), and
// distinct for every partition of the step, so ranks that disagree on the
// partition fail instead of summing different gradients.
uint32_t PartitionTag(const BucketPartition& partition, int num_buckets);

// The agreement's vector for a rank whose buckets [0, prefix) are ready:
// `num_buckets` floats, 1 below the prefix and 0 from it on.
std::vector<float> ReadyPrefixVote(int prefix, int num_buckets);
// The agreed prefix from the summed votes of `world_size` ranks: the number
// of leading entries every rank voted for.
int AgreedReadyPrefix(const std::vector<float>& summed_votes, int world_size);

// Seconds for one all-reduce of `bytes`, as the cost model predicts it.
using CollectiveSeconds = std::function<double(double bytes)>;

// The derived partition size: the smallest power of two, from
// kMinDerivedPartitionBytes up, whose predicted all-reduce spends at least
// (kPartitionLatencyShare - 1) times its latency terms on its bytes, so
// cutting a bucket into such partitions costs it at most about
// 1/kPartitionLatencyShare in extra latencies. The latency terms are the
// prediction for a buffer of one float. Capped at kMaxDerivedPartitionBytes
// (a partition that large is a bucket).
inline constexpr int64_t kMinDerivedPartitionBytes = 64 << 10;
inline constexpr int64_t kMaxDerivedPartitionBytes = 64 << 20;
inline constexpr double kPartitionLatencyShare = 10;
int64_t DerivePartitionBytes(const CollectiveSeconds& predict);

// The derived credit: two partitions. An agreement costs about one
// partition's latency terms (a collective of a few floats with the same
// algorithm), so two partitions between agreements keep it near half the
// partition's own latency share, while a late partition waits for at most
// two partitions in progress.
inline constexpr int kDerivedCreditPartitions = 2;

// The partitions of one step and which of them were taken. Not thread-safe.
class PartitionSchedule {
 public:
  // `buckets` cut by CutPartitions(bucket, partition_bytes), or whole
  // when `cut` is false (the codecs that encode a bucket as one unit).
  void Reset(const std::vector<Bucket>& buckets, int64_t partition_bytes,
             bool cut);
  // Before a step: nothing taken.
  void NewStep();

  // True when a bucket below `prefix` has a partition not yet taken.
  bool HasUntakenBelow(int prefix) const;
  // True when every partition of the step was taken.
  bool AllTaken() const { return taken_count_ == total_; }
  // Takes the untaken partitions of the buckets below `prefix` with the
  // lowest offsets, in that order, while their bytes fit `credit_bytes`
  // (at least one when any is left): the next batch, the same on every rank
  // given the same prefix and history.
  std::vector<BucketPartition> TakeBatch(int prefix, int64_t credit_bytes);

  int num_buckets() const { return static_cast<int>(partitions_.size()); }
  // The partitions of `bucket`, lowest offset first.
  const std::vector<BucketPartition>& partitions(int bucket) const {
    return partitions_[bucket];
  }
  int64_t largest_partition_bytes() const { return largest_bytes_; }
  int total_partitions() const { return total_; }

 private:
  std::vector<std::vector<BucketPartition>> partitions_;  // per bucket
  std::vector<std::vector<bool>> taken_;                  // this step
  int total_ = 0;
  int taken_count_ = 0;
  int64_t largest_bytes_ = 0;
};

}  // namespace gradsync
