// Test-set accuracy over the ranks' shards (evaluator.h).
#include "core/train/evaluator.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {

// Every rank evaluates its shard of the test set (i, i + N, ...) and the
// correct counts are summed through the rendezvous: N times less work per
// rank than evaluating everything on worker 0, and no rank waits for another.
absl::StatusOr<double> Evaluator::Evaluate(const std::string& round, bool alone,
                                         int64_t samples) {
  const Dataset& test = test_;
  const int dim = model_.input_dim();
  const int classes = model_.num_classes();
  host_inputs_.resize(static_cast<size_t>(max_batch_) * dim);
  if (alone && identity_.rank != 0) return -1.0;
  if (!alone) RETURN_IF_ERROR(TakeWorkerZerosBuffers(round));
  const int64_t size = samples > 0 ? std::min(samples, test.size) : test.size;
  std::vector<int64_t> shard;
  const int stride = alone ? 1 : identity_.world_size;
  for (int64_t i = alone ? 0 : identity_.rank; i < size; i += stride)
    shard.push_back(i);
  std::vector<float> logits(static_cast<size_t>(max_batch_) * classes);
  int64_t correct = 0;
  for (size_t first = 0; first < shard.size(); first += max_batch_) {
    const int rows =
        static_cast<int>(std::min<size_t>(max_batch_, shard.size() - first));
    for (int i = 0; i < rows; ++i) {
      std::copy_n(test.row(shard[first + i]), dim,
                  host_inputs_.data() + int64_t{i} * dim);
    }
    RETURN_IF_ERROR(device_.CopyToDevice(inputs_, host_inputs_.data(),
                                         sizeof(float) * rows * dim));
    const float* device_logits = nullptr;
    RETURN_IF_ERROR(model_.Forward(inputs_, rows, &device_logits));
    RETURN_IF_ERROR(device_.CopyToHost(logits.data(), device_logits,
                                       sizeof(float) * rows * classes));
    for (int i = 0; i < rows; ++i) {
      const float* row = logits.data() + int64_t{i} * classes;
      const int predicted =
          static_cast<int>(std::max_element(row, row + classes) - row);
      if (predicted == test.labels[shard[first + i]]) ++correct;
    }
  }
  if (alone || rendezvous_ == nullptr || identity_.world_size == 1) {
    return size > 0 ? static_cast<double>(correct) / size : 0.0;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> counts,
                   rendezvous_->AllGather(
                       absl::StrCat("eval/", round), identity_.rank, identity_.world_size,
                       absl::StrCat(correct), timeout_));
  int64_t total = 0;
  for (int r = 0; r < identity_.world_size; ++r) {
    const std::string& value = counts[r];
    int64_t count = 0;
    if (!absl::SimpleAtoi(value, &count)) {
      return absl::InternalError(
          absl::StrCat("worker ", r, " sent evaluation count '", value, "'"));
    }
    total += count;
  }
  return static_cast<double>(total) / test.size;
}

// Batch-norm running statistics are per worker (each normalises over its own
// share of the batch, as DDP without SyncBatchNorm), so before the workers
// evaluate their shards of the test set, every one takes worker 0's: all
// shards are then scored by one model, worker 0's, which is also the one its
// checkpoints and --eval_every score. DDP (broadcast_buffers=True) sends
// rank 0's buffers before every forward; since training-mode forwards only
// write the running statistics and never read them, sending them before
// evaluation instead gives the same evaluated model at a fraction of the
// traffic (38 KB for ResNet-18).
absl::Status Evaluator::TakeWorkerZerosBuffers(const std::string& round) {
  const int64_t count = model_.buffer_count();
  if (count == 0 || rendezvous_ == nullptr || identity_.world_size == 1) {
    return absl::OkStatus();
  }
  std::string bytes;
  if (identity_.rank == 0) {
    bytes.resize(count * sizeof(float));
    RETURN_IF_ERROR(
        device_.CopyToHost(bytes.data(), model_.buffers(), bytes.size()));
  }
  ASSIGN_OR_RETURN(
      std::string reference,
      rendezvous_->Broadcast(absl::StrCat("buffers/", round), identity_.rank,
                             /*root=*/0, bytes, timeout_));
  if (identity_.rank == 0) return absl::OkStatus();
  if (reference.size() != static_cast<size_t>(count) * sizeof(float)) {
    return absl::InternalError(absl::StrCat(
        "worker ", identity_.rank, ": worker 0 sent ", reference.size(),
        " bytes of model buffers before evaluation ", round, ", expected ",
        count * sizeof(float), "; every worker needs the same --model"));
  }
  return device_.CopyToDevice(model_.buffers(), reference.data(),
                              reference.size());
}

}  // namespace gradsync
