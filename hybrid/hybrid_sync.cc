// The hybrid strategy: row-sparse buckets to one strategy (the parameter
// servers), dense ones to another (the ring), behind one GradientSync.
#include "hybrid/hybrid_sync.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

constexpr int kSparse = 0;
constexpr int kDense = 1;

}  // namespace

HybridSync::HybridSync(std::string sparse_name,
                       std::unique_ptr<GradientSync> sparse,
                       std::string dense_name,
                       std::unique_ptr<GradientSync> dense) {
  parts_[kSparse].name = std::move(sparse_name);
  parts_[kSparse].sync = std::move(sparse);
  parts_[kDense].name = std::move(dense_name);
  parts_[kDense].sync = std::move(dense);
}

void HybridSync::SetTrainingSchedule(const TrainingSchedule& schedule) {
  for (Part& part : parts_) part.sync->SetTrainingSchedule(schedule);
}

absl::Status HybridSync::Split(const ParamLayout& layout) {
  const std::vector<ParamInfo>& params = layout.params();
  const int count = static_cast<int>(params.size());
  std::vector<std::string> sparse_names;
  int first_sparse = count, end_sparse = 0;
  for (int p = 0; p < count; ++p) {
    if (params[p].spec.sparse_row_width == 0) continue;
    sparse_names.push_back(params[p].spec.name);
    first_sparse = std::min(first_sparse, p);
    end_sparse = p + 1;
  }
  if (sparse_names.empty()) {
    return absl::InvalidArgumentError(
        "--sync=hybrid sends row-sparse tensors (embedding tables) to the "
        "parameter servers and the rest through the ring, but this model has "
        "no row-sparse tensor: use --sync=ring or --sync=ps, or a model with "
        "an embedding table (--model=embedding)");
  }
  if (end_sparse - first_sparse != static_cast<int>(sparse_names.size()) ||
      (first_sparse != 0 && end_sparse != count)) {
    return absl::UnimplementedError(absl::StrCat(
        "--sync=hybrid needs the row-sparse tensors [",
        absl::StrJoin(sparse_names, " "),
        "] to be consecutive at the start or the end of the model's "
        "parameters, so that each part is one span of the flat buffers; "
        "declare the tables first in the model's ParamSpecs"));
  }
  if (end_sparse - first_sparse == count) {
    return absl::InvalidArgumentError(
        "--sync=hybrid: every tensor of this model is row-sparse, so the "
        "ring would carry nothing: use --sync=ps");
  }
  parts_[kSparse].first_param = first_sparse;
  parts_[kSparse].end_param = end_sparse;
  parts_[kDense].first_param = first_sparse == 0 ? end_sparse : 0;
  parts_[kDense].end_param = first_sparse == 0 ? count : first_sparse;
  for (Part& part : parts_) {
    const ParamInfo& last = params[part.end_param - 1];
    part.offset = params[part.first_param].offset;
    part.numel = last.offset + last.numel - part.offset;
  }
  // Buckets in the full layout's order; each part's slice keeps that order.
  targets_.assign(layout.buckets().size(), BucketTarget());
  int next[2] = {0, 0};
  for (const Bucket& bucket : layout.buckets()) {
    const int part = bucket.params.front() >= first_sparse &&
                             bucket.params.front() < end_sparse
                         ? kSparse
                         : kDense;
    targets_[bucket.index] = {part, next[part]++};
  }
  return absl::OkStatus();
}

absl::Status HybridSync::Setup(const ParamLayout& layout, Device& device,
                               const SyncBuffers& buffers) {
  if (buffers.grads == nullptr || buffers.params == nullptr) {
    return absl::InvalidArgumentError("--sync=hybrid needs both flat buffers");
  }
  RETURN_IF_ERROR(Split(layout));
  // Every rank sets the parts up in the same order (servers, then ring), so
  // their connection phases cannot wait on each other.
  for (Part& part : parts_) {
    absl::StatusOr<ParamLayout> slice =
        layout.Slice(part.first_param, part.end_param);
    if (!slice.ok()) {
      return Annotate(slice.status(),
                      absl::StrCat("--sync=hybrid, ", part.name, " part"));
    }
    SyncBuffers span{buffers.grads + part.offset, buffers.params + part.offset};
    absl::Status status = part.sync->Setup(*slice, device, span);
    if (!status.ok()) {
      return Annotate(
          status,
          absl::StrCat("--sync=hybrid, the ",
                       &part == &parts_[kSparse] ? "row-sparse" : "dense",
                       " tensors' part (--sync=", part.name, ", ",
                       part.end_param - part.first_param, " tensors, ",
                       part.numel * 4, " bytes)"));
    }
  }
  if (parts_[kSparse].sync->UpdatesParameters() ||
      parts_[kDense].sync->UpdatesParameters()) {
    return absl::InvalidArgumentError(
        "--sync=hybrid runs the optimizer on the workers for both parts: "
        "--ps_update=server is not supported with it");
  }
  set_up_ = true;
  return absl::OkStatus();
}

void HybridSync::BucketReady(int bucket) {
  // An index outside the layout is handed on as one the part does not have,
  // so the part reports it at Finish as it would its own.
  if (bucket < 0 || bucket >= static_cast<int>(targets_.size())) {
    parts_[kDense].sync->BucketReady(-1);
    return;
  }
  const BucketTarget& target = targets_[bucket];
  parts_[target.part].sync->BucketReady(target.bucket);
}

absl::Status HybridSync::WaitBucket(int bucket) {
  if (bucket < 0 || bucket >= static_cast<int>(targets_.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--sync=hybrid: WaitBucket(", bucket, ") outside the layout's ",
        targets_.size(), " buckets"));
  }
  const BucketTarget& target = targets_[bucket];
  Part& part = parts_[target.part];
  return Annotate(part.sync->WaitBucket(target.bucket),
                  absl::StrCat("--sync=hybrid, ", part.name, " part"));
}

absl::Status HybridSync::Finish(StepStats& stats) {
  // Both parts are always waited for, so that neither is left mid-step.
  absl::Status first_error;
  for (Part& part : parts_) {
    StepStats part_stats;
    absl::Status status = part.sync->Finish(part_stats);
    if (!status.ok() && first_error.ok()) {
      first_error =
          Annotate(status, absl::StrCat("--sync=hybrid, ", part.name, " part"));
    }
    stats.bytes_sent += part_stats.bytes_sent;
    stats.bytes_recv += part_stats.bytes_recv;
    stats.extra.emplace_back(absl::StrCat(part.name, "_bytes_sent"),
                             static_cast<double>(part_stats.bytes_sent));
    stats.extra.emplace_back(absl::StrCat(part.name, "_bytes_recv"),
                             static_cast<double>(part_stats.bytes_recv));
    for (auto& [name, value] : part_stats.extra) {
      stats.extra.emplace_back(absl::StrCat(part.name, "_", name), value);
    }
  }
  return first_error;
}

absl::Status HybridSync::Rebucket(const ParamLayout& layout) {
  if (!set_up_) {
    return absl::FailedPreconditionError(
        "--sync=hybrid: Rebucket before Setup");
  }
  // Same tensors at the same offsets: the split is the same, only the
  // buckets inside each part change.
  RETURN_IF_ERROR(Split(layout));
  for (Part& part : parts_) {
    ASSIGN_OR_RETURN(ParamLayout slice,
                     layout.Slice(part.first_param, part.end_param));
    absl::Status status = part.sync->Rebucket(slice);
    if (!status.ok()) {
      return Annotate(status,
                      absl::StrCat("--sync=hybrid, ", part.name, " part"));
    }
  }
  return absl::OkStatus();
}

bool HybridSync::ReplicasMayDiffer() const {
  return parts_[kSparse].sync->ReplicasMayDiffer() ||
         parts_[kDense].sync->ReplicasMayDiffer();
}

absl::Status HybridSync::Shutdown() {
  absl::Status first_error;
  for (Part& part : parts_) {
    absl::Status status = part.sync->Shutdown();
    if (!status.ok() && first_error.ok()) {
      first_error =
          Annotate(status, absl::StrCat("--sync=hybrid, ", part.name, " part"));
    }
  }
  return first_error;
}

std::string HybridSync::SummaryJson() const {
  const Part& sparse = parts_[kSparse];
  const Part& dense = parts_[kDense];
  return absl::StrCat("{\"sparse_strategy\":\"", sparse.name,
                      "\",\"dense_strategy\":\"", dense.name,
                      "\",\"sparse_bytes\":", sparse.numel * 4,
                      ",\"dense_bytes\":", dense.numel * 4,
                      ",\"sparse\":", sparse.sync->SummaryJson(),
                      ",\"dense\":", dense.sync->SummaryJson(), "}");
}

std::vector<std::string> HybridSync::TraceFiles() const {
  std::vector<std::string> files = parts_[kSparse].sync->TraceFiles();
  for (std::string& file : parts_[kDense].sync->TraceFiles()) {
    files.push_back(std::move(file));
  }
  return files;
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateHybridSync(
    const SyncContext& context) {
  absl::StatusOr<std::unique_ptr<GradientSync>> sparse =
      GradientSyncRegistry::Create("ps", context);
  if (!sparse.ok()) {
    return Annotate(sparse.status(),
                    "--sync=hybrid, the row-sparse tensors' part (--sync=ps)");
  }
  absl::StatusOr<std::unique_ptr<GradientSync>> dense =
      GradientSyncRegistry::Create("ring", context);
  if (!dense.ok()) {
    return Annotate(dense.status(),
                    "--sync=hybrid, the dense tensors' part (--sync=ring)");
  }
  return std::unique_ptr<GradientSync>(std::make_unique<HybridSync>(
      "ps", *std::move(sparse), "ring", *std::move(dense)));
}

GRADSYNC_REGISTER_SYNC(hybrid, CreateHybridSync);

// Its two parts' checks, named as Create names them.
[[maybe_unused]] const bool hybrid_check_registered =
    GradientSyncRegistry::RegisterCheck(
        "hybrid", [](const SyncContext& context) -> absl::Status {
          RETURN_IF_ERROR(Annotate(
              GradientSyncRegistry::CheckOptions("ps", context),
              "--sync=hybrid, the row-sparse tensors' part (--sync=ps)"));
          return Annotate(
              GradientSyncRegistry::CheckOptions("ring", context),
              "--sync=hybrid, the dense tensors' part (--sync=ring)");
        });

}  // namespace gradsync
