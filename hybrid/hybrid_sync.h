// --sync=hybrid: Parallax's split (EuroSys'19). Row-sparse tensors (embedding
// tables: ParamSpec::sparse_row_width > 0) go to the parameter servers, where
// a push can carry only the touched rows and the servers sum whatever rows
// arrive; every dense tensor goes through the ring, which moves 2(N−1)/N of a
// dense gradient per link whatever N is. The trainer sees one GradientSync.
//
// Each part is a whole strategy of its own, Set up over its own slice of the
// layout (ParamLayout::Slice) and the matching sub-span of the flat buffers:
// the row-sparse parameters must be consecutive at one end of the parameter
// list (a model's table is its first parameter, which puts it at the start of
// the buffer and in the last bucket), so that both parts are contiguous
// spans; any other arrangement is refused with its reason. BucketReady and
// WaitBucket map a bucket to its part; Finish waits for both; StepStats add
// up; the summary names both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {

class HybridSync : public GradientSync {
 public:
  // `sparse` (named `sparse_name`, "ps") moves the row-sparse tensors,
  // `dense` ("ring") the others. Both made for the same job, not yet Set up.
  HybridSync(std::string sparse_name, std::unique_ptr<GradientSync> sparse,
             std::string dense_name, std::unique_ptr<GradientSync> dense);

  void SetTrainingSchedule(const TrainingSchedule& schedule) override;
  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override;
  void BucketReady(int bucket) override;
  absl::Status Finish(StepStats& stats) override;
  // The bucket's part waits for it; Unimplemented when that part cannot
  // (the trainer then waits for the whole step in Finish).
  absl::Status WaitBucket(int bucket) override;
  absl::Status Rebucket(const ParamLayout& layout) override;
  bool ReplicasMayDiffer() const override;
  absl::Status Shutdown() override;
  std::string SummaryJson() const override;
  std::vector<std::string> TraceFiles() const override;

 private:
  // A part: which strategy, and its slice of the parameters.
  struct Part {
    std::string name;
    std::unique_ptr<GradientSync> sync;
    int first_param = 0;
    int end_param = 0;
    int64_t offset = 0;  // floats, where its span starts in the flat buffers
    int64_t numel = 0;
  };
  // Where each of the full layout's buckets went: part (0 sparse, 1 dense)
  // and its index in that part's layout.
  struct BucketTarget {
    int part = 0;
    int bucket = 0;
  };

  // Splits `layout` into the two parts' parameter ranges and the bucket map.
  absl::Status Split(const ParamLayout& layout);

  Part parts_[2];
  std::vector<BucketTarget> targets_;
  bool set_up_ = false;
};

// Makes the registered "ps" and "ring" strategies (from their flags) for
// `context` and joins them. A job without parameter servers is refused by
// the PS part at Setup, with the flags that start some.
absl::StatusOr<std::unique_ptr<GradientSync>> CreateHybridSync(
    const SyncContext& context);

}  // namespace gradsync
