#include "core/sync/step_buckets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradsync {

void StepBuckets::Reset(int num_buckets, int64_t first_step) {
  ready_.assign(num_buckets, false);
  num_ready_ = 0;
  step_ = first_step;
}

absl::Status StepBuckets::MarkReady(int bucket) {
  if (bucket < 0 || bucket >= num_buckets()) {
    return absl::FailedPreconditionError(
        absl::StrCat(owner_, ": step ", step_, ": BucketReady(", bucket,
                     ") is out of range (", num_buckets(), " buckets)"));
  }
  if (ready_[bucket]) {
    return absl::FailedPreconditionError(
        absl::StrCat(owner_, ": step ", step_, ": bucket ", bucket,
                     " was handed over twice"));
  }
  ready_[bucket] = true;
  ++num_ready_;
  return absl::OkStatus();
}

absl::Status StepBuckets::CheckAllReady() const {
  if (all_ready()) return absl::OkStatus();
  std::vector<int> missing;
  for (int b = 0; b < num_buckets(); ++b) {
    if (!ready_[b]) missing.push_back(b);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(owner_, ": step ", step_, ": Finish before bucket(s) ",
                   absl::StrJoin(missing, ", "), " were handed over"));
}

void StepBuckets::ClearStep() {
  ready_.assign(ready_.size(), false);
  num_ready_ = 0;
}

void StepBuckets::NextStep() {
  ClearStep();
  ++step_;
}

absl::Status ExplainStepFailure(const Rendezvous* rendezvous,
                                const absl::Status& error) {
  if (error.ok() || rendezvous == nullptr) return error;
  return rendezvous->ExplainFailure(error, kLossReportWait);
}

}  // namespace gradsync
