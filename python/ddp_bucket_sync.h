// DDP's gradient buckets through a gradsync strategy: the C++ half of
// gradsync.torch.comm_hook.
//
// DistributedDataParallel calls its communication hook once per bucket, in
// bucket order, as backward makes each bucket's gradients final, and waits
// for every bucket's future before the optimizer step. Here each call
// copies the bucket into the strategy's flat gradient buffer and hands the
// strategy's bucket over at once (GradientSync::BucketReady), so the
// communication of late layers overlaps the backward of early ones exactly
// as in a native worker. The call for DDP's last bucket waits for the whole
// step (GradientSync::Finish) and copies the averages back into every
// bucket of the step; the Python side then completes their futures. DDP's
// reducer waits for all of them at the end of backward anyway, so
// completing them together loses no overlap, and the seam needs nothing new.
//
// Layout. DDP (PyTorch 1.13, without find_unused_parameters) runs its first
// iteration with ONE bucket and only then builds its real buckets, from the
// order gradients became ready, closing a bucket once it holds at least
// first_bucket_bytes (the first) or bucket_cap_mb (the others). A strategy
// is set up once (a ring's transport, a parameter server's partition are
// built for one layout), so the strategy's buckets are derived at the end of
// the first step by DDP's own rule: the parameters in the order backward
// made their gradients final (recorded by the Python side's gradient hooks
// as DDP's reducer records it; without a record, the reverse of the order
// DDP lists them in each bucket), grouped with DDP's two caps. These are
// DDP's rebuilt buckets, and each DDP bucket hands over the strategy bucket
// of the same index. Should DDP's buckets differ all the same, they are
// copied into the strategy's parameter by parameter, each
// strategy bucket handed over once all of its parameters have arrived (said
// once in the log). Every worker checks that the others derived the same
// buckets. The first step's buckets are held until DDP's last bucket
// arrives: that step does not overlap. Parameters are known by a key (the
// Python side passes each parameter's address).
//
// Not thread-safe: DDP calls the hook from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "core/telemetry/trace.h"
#include "core/train/step_timeline.h"
#include "python/job_connection.h"

namespace gradsync {

// One parameter of a DDP bucket, in the bucket's order.
struct DdpParam {
  int64_t key = 0;  // the same parameter has the same key in every step
  int64_t numel = 0;
};

// One call of DDP's hook: GradBucket's index(), buffer(), parameters() and
// is_last().
struct DdpBucket {
  int index = 0;
  float* data = nullptr;  // numel contiguous floats, ours until the step ends
  int64_t numel = 0;
  std::vector<DdpParam> params;
  bool is_last = false;
};

// What the last completed step cost, for the per-step metrics.
struct DdpStepStats {
  int64_t step = -1;
  double step_ms = 0;       // from the end of the previous step to this one's
  double sync_wait_ms = 0;  // blocked in Finish (exposed communication)
  StepStats strategy;       // bytes and the strategy's own figures
};

class DdpBucketSync {
 public:
  // DDP's caps: DistributedDataParallel(bucket_cap_mb=...) and
  // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES.
  struct Caps {
    int64_t first_bucket_bytes = int64_t{1} << 20;
    int64_t bucket_bytes = int64_t{25} << 20;
  };
  explicit DdpBucketSync(JobConnection& job) : job_(job) {}
  // Before the first bucket; later calls are refused.
  absl::Status SetCaps(const Caps& caps);
  // Before the first step's last bucket: the parameters' keys in the order
  // backward made their gradients final. Later calls are ignored.
  void SetReadyOrder(std::vector<int64_t> keys);
  // --trace: the step timeline (core/train/step_timeline.h) of steps
  // 1..`steps` goes to `trace`. Step 0 sets the strategy up and is not
  // traced. Before the first bucket.
  void SetTrace(TraceRecorder* trace, int64_t steps);
  ~DdpBucketSync();

  // Takes one bucket. True when it ended the step: every bucket handed over
  // in this step then holds the average over the workers.
  absl::StatusOr<bool> Add(const DdpBucket& bucket);

  const DdpStepStats& last_step() const { return last_step_; }
  // The strategy's buckets; null before the first step ended.
  const ParamLayout* layout() const {
    return layout_.has_value() ? &*layout_ : nullptr;
  }
  // The timelines the strategy's own processes wrote (a PS's servers).
  std::vector<std::string> TraceFiles() const;
  // The strategy's buckets (empty before the first step ended).
  std::string DescribeLayout() const;
  std::string SummaryJson() const;
  // After the last step: the strategy's Shutdown (a PS's servers hear that
  // this worker is done). Idempotent.
  absl::Status Shutdown();

 private:
  struct Slot {
    int64_t offset = 0;  // in the flat buffer
    int64_t numel = 0;
    int bucket = 0;  // the strategy's
    int64_t arrived_in_step = -1;
  };

  absl::StatusOr<bool> AddUnchecked(const DdpBucket& bucket);
  absl::Status CheckOrder(const DdpBucket& bucket);
  absl::Status SetUpFromFirstStep();
  absl::Status AgreeOnLayout(const std::string& mine);
  absl::Status CopyIn(const DdpBucket& bucket);
  absl::Status EndStep();
  void NoticeRegrouping(const DdpBucket& bucket);

  JobConnection& job_;
  Caps caps_;
  std::vector<int64_t> ready_order_;
  absl::Status failed_;
  std::unique_ptr<GradientSync> strategy_;
  std::optional<ParamLayout> layout_;
  std::vector<float> grads_;
  std::vector<float> params_;
  absl::flat_hash_map<int64_t, Slot> slots_;
  std::vector<int> params_per_bucket_;  // the strategy's buckets
  std::vector<int> missing_;            // params not yet arrived, per bucket
  // DDP's buckets of the step in progress, copied back at its end.
  std::vector<DdpBucket> step_buckets_;
  // The strategy's buckets' parameter keys, to tell whether DDP's buckets
  // are the same.
  std::vector<std::vector<int64_t>> strategy_keys_;
  bool difference_noticed_ = false;
  int next_index_ = 0;
  int64_t step_ = 0;
  int64_t last_step_end_us_ = 0;
  DdpStepStats last_step_;
  bool shut_down_ = false;
  TraceRecorder* trace_ = nullptr;
  int64_t trace_steps_ = 0;
  std::unique_ptr<StepTimeline> timeline_;  // null: this step not traced
};

}  // namespace gradsync
