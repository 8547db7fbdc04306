// DDP's buckets through a gradsync strategy (see ddp_bucket_sync.h).
#include "python/ddp_bucket_sync.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// "3 buckets of [4096 262144 1049600] floats, parameters of [10 2560 ...]
// floats": what every worker must agree on.
std::string DescribeBuckets(const std::vector<std::vector<DdpParam>>& buckets) {
  std::vector<int64_t> bucket_numels;
  std::vector<int64_t> param_numels;
  for (const std::vector<DdpParam>& bucket : buckets) {
    int64_t numel = 0;
    for (const DdpParam& param : bucket) {
      param_numels.push_back(param.numel);
      numel += param.numel;
    }
    bucket_numels.push_back(numel);
  }
  return absl::StrCat(buckets.size(), " buckets of [",
                      absl::StrJoin(bucket_numels, " "),
                      "] floats, parameters of [",
                      absl::StrJoin(param_numels, " "), "] floats");
}

// DDP's rebuild rule (Reducer::rebuild_buckets, by
// compute_bucket_assignment_by_size): walk the parameters in the order their
// gradients become final and close a bucket once it holds at least its
// limit, the first bucket's limit being the small first_bucket_bytes so that
// communication starts early.
std::vector<std::vector<DdpParam>> GroupLikeDdp(
    const std::vector<DdpParam>& ready_order, int64_t first_bucket_bytes,
    int64_t bucket_bytes) {
  std::vector<std::vector<DdpParam>> buckets;
  std::vector<DdpParam> current;
  int64_t current_bytes = 0;
  for (const DdpParam& param : ready_order) {
    current.push_back(param);
    current_bytes += param.numel * static_cast<int64_t>(sizeof(float));
    const int64_t limit = buckets.empty() ? first_bucket_bytes : bucket_bytes;
    if (current_bytes >= limit) {
      buckets.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

int64_t NowMicros() { return absl::ToUnixMicros(absl::Now()); }

}  // namespace

DdpBucketSync::~DdpBucketSync() { Shutdown().IgnoreError(); }

absl::Status DdpBucketSync::SetCaps(const Caps& caps) {
  if (strategy_ != nullptr || !step_buckets_.empty()) {
    return absl::FailedPreconditionError(
        "gradsync: DDP's bucket caps must be known before the first backward");
  }
  if (caps.first_bucket_bytes <= 0 || caps.bucket_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradsync: DDP's bucket caps must be positive (first bucket ",
        caps.first_bucket_bytes, " bytes, others ", caps.bucket_bytes, ")"));
  }
  caps_ = caps;
  return absl::OkStatus();
}

absl::StatusOr<bool> DdpBucketSync::Add(const DdpBucket& bucket) {
  if (!failed_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gradsync's DDP hook failed earlier and cannot go on: ",
        failed_.message()));
  }
  absl::StatusOr<bool> ended = AddUnchecked(bucket);
  if (!ended.ok()) failed_ = ended.status();
  return ended;
}

absl::Status DdpBucketSync::CheckOrder(const DdpBucket& bucket) {
  if (shut_down_) {
    return absl::FailedPreconditionError(
        "gradsync's DDP hook was called after state.close()");
  }
  int64_t sum = 0;
  for (const DdpParam& param : bucket.params) sum += param.numel;
  if (sum != bucket.numel || bucket.numel <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP bucket ", bucket.index, " has ", bucket.numel,
        " floats but its parameters add up to ", sum));
  }
  if (bucket.index == next_index_) return absl::OkStatus();
  if (bucket.index == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DDP started a new step (bucket 0) while gradsync's step ", step_,
        " still waits for bucket ", next_index_,
        ": one gradsync state serves two hooks. Register the hook once, and "
        "give each DistributedDataParallel model its own "
        "gradsync.torch.connect() state"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("DDP handed over bucket ", bucket.index, " in step ", step_,
                   " where gradsync expected bucket ", next_index_,
                   " (DDP launches buckets in order): is the hook registered "
                   "on two models with one state?"));
}

absl::StatusOr<bool> DdpBucketSync::AddUnchecked(const DdpBucket& bucket) {
  RETURN_IF_ERROR(CheckOrder(bucket));
  next_index_ = bucket.is_last ? 0 : bucket.index + 1;
  step_buckets_.push_back(bucket);
  if (strategy_ == nullptr) {
    // The first step: the layout is known once DDP's last bucket is here.
    if (!bucket.is_last) return false;
    RETURN_IF_ERROR(SetUpFromFirstStep());
    for (const DdpBucket& held : step_buckets_) RETURN_IF_ERROR(CopyIn(held));
  } else {
    NoticeRegrouping(bucket);
    RETURN_IF_ERROR(CopyIn(bucket));
  }
  if (!bucket.is_last) return false;
  RETURN_IF_ERROR(EndStep());
  return true;
}

absl::Status DdpBucketSync::AgreeOnLayout(const std::string& mine) {
  const ProcessIdentity& id = job_.env();
  Rendezvous* rendezvous = job_.rendezvous();
  if (rendezvous == nullptr || id.world_size == 1) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<std::string> all,
                   rendezvous->AllGather("gradsync-torch/ddp-buckets", id.rank,
                                         id.world_size, mine,
                                         job_.options().timeout));
  for (int rank = 1; rank < static_cast<int>(all.size()); ++rank) {
    if (all[rank] == all[0]) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "DDP's buckets differ across workers: worker 0 has ", all[0],
        "; worker ", rank, " has ", all[rank],
        ". Every worker must build the same model and wrap it in "
        "DistributedDataParallel with the same bucket_cap_mb"));
  }
  return absl::OkStatus();
}

void DdpBucketSync::SetReadyOrder(std::vector<int64_t> keys) {
  if (strategy_ == nullptr) ready_order_ = std::move(keys);
}

absl::Status DdpBucketSync::SetUpFromFirstStep() {
  std::vector<DdpParam> ready_order;
  absl::flat_hash_map<int64_t, int64_t> numel_of;
  for (const DdpBucket& bucket : step_buckets_) {
    ready_order.insert(ready_order.end(), bucket.params.rbegin(),
                       bucket.params.rend());
    for (const DdpParam& param : bucket.params)
      numel_of[param.key] = param.numel;
  }
  // The recorded order, when it names exactly DDP's parameters, once each.
  std::vector<DdpParam> recorded;
  absl::flat_hash_map<int64_t, bool> seen;
  for (int64_t key : ready_order_) {
    auto found = numel_of.find(key);
    if (found == numel_of.end() || seen[key]) break;
    seen[key] = true;
    recorded.push_back(DdpParam{key, found->second});
  }
  if (recorded.size() == ready_order.size()) {
    ready_order = std::move(recorded);
  } else if (!ready_order_.empty() && job_.env().rank == 0) {
    GS_LOG(WARNING) << "the gradients' order recorded in the first step does "
                       "not name DDP's parameters; gradsync's buckets follow "
                       "the reverse of DDP's parameter order instead";
  }
  const std::vector<std::vector<DdpParam>> groups =
      GroupLikeDdp(ready_order, caps_.first_bucket_bytes, caps_.bucket_bytes);
  RETURN_IF_ERROR(AgreeOnLayout(DescribeBuckets(groups)));
  // ParamLayout groups parameters in reverse into buckets; one "parameter"
  // per group, stated last group first, and a cap every one of them exceeds
  // give strategy bucket i = group i.
  const int n = static_cast<int>(groups.size());
  std::vector<ParamSpec> specs;
  for (int i = n - 1; i >= 0; --i) {
    int64_t numel = 0;
    for (const DdpParam& param : groups[i]) numel += param.numel;
    specs.push_back(ParamSpec{absl::StrCat("bucket_", i), {numel}});
  }
  ASSIGN_OR_RETURN(ParamLayout layout,
                   ParamLayout::Create(std::move(specs), /*bucket_bytes=*/1));
  params_per_bucket_.assign(n, 0);
  strategy_keys_.assign(n, {});
  for (int i = 0; i < n; ++i) {
    int64_t offset = layout.buckets()[i].offset;
    for (const DdpParam& param : groups[i]) {
      Slot slot;
      slot.offset = offset;
      slot.numel = param.numel;
      slot.bucket = i;
      if (!slots_.emplace(param.key, slot).second) {
        return absl::InvalidArgumentError(
            "DDP's buckets hold one parameter twice (the same tensor "
            "registered as two parameters?)");
      }
      offset += param.numel;
      ++params_per_bucket_[i];
      strategy_keys_[i].push_back(param.key);
    }
  }
  missing_ = params_per_bucket_;
  grads_.assign(layout.total_numel(), 0.0f);
  params_.assign(layout.total_numel(), 0.0f);

  ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> strategy,
                   job_.CreateStrategy());
  if (strategy->UpdatesParameters()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync=", job_.options().sync,
        " runs the optimizer on the servers (--ps_update=server), but behind "
        "DDP the optimizer is PyTorch's: use --ps_update=worker"));
  }
  RETURN_IF_ERROR(Annotate(
      strategy->Setup(layout, job_.device(),
                      SyncBuffers{grads_.data(), params_.data()}),
      absl::StrCat("worker ", job_.env().rank, " setting up --sync=",
                   job_.options().sync, " for DDP's ", n, " buckets")));
  strategy_ = std::move(strategy);
  layout_ = std::move(layout);
  if (job_.env().rank == 0) {
    GS_LOG(INFO) << "--sync=" << job_.options().sync << ": " << n
                 << " buckets as DDP builds them after its first iteration "
                 << "(first " << caps_.first_bucket_bytes << " bytes, then "
                 << caps_.bucket_bytes << "), " << layout_->total_bytes()
                 << " bytes in all:\n"
                 << layout_->Describe();
  }
  return absl::OkStatus();
}

void DdpBucketSync::NoticeRegrouping(const DdpBucket& bucket) {
  if (difference_noticed_) return;
  bool same = bucket.index < static_cast<int>(strategy_keys_.size()) &&
              strategy_keys_[bucket.index].size() == bucket.params.size();
  for (size_t i = 0; same && i < bucket.params.size(); ++i)
    same = strategy_keys_[bucket.index][i] == bucket.params[i].key;
  if (same) return;
  difference_noticed_ = true;
  if (job_.env().rank == 0) {
    GS_LOG(INFO) << "DDP's bucket " << bucket.index << " in step " << step_
                 << " is not gradsync's bucket " << bucket.index
                 << "; the strategy's " << params_per_bucket_.size()
                 << " buckets are filled parameter by parameter, each sent "
                    "once all of its parameters are here";
  }
}

absl::Status DdpBucketSync::CopyIn(const DdpBucket& bucket) {
  int64_t offset = 0;
  for (const DdpParam& param : bucket.params) {
    auto found = slots_.find(param.key);
    if (found == slots_.end() || found->second.numel != param.numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DDP's bucket ", bucket.index, " in step ", step_,
          " holds a parameter of ", param.numel,
          " floats that was not in DDP's buckets of the first step: the "
          "model's parameters changed after the first backward, or one "
          "gradsync state serves two models (connect() once per model)"));
    }
    Slot& slot = found->second;
    if (slot.arrived_in_step == step_) {
      return absl::FailedPreconditionError(
          absl::StrCat("DDP handed over a parameter twice in step ", step_,
                       " (bucket ", bucket.index, ")"));
    }
    slot.arrived_in_step = step_;
    std::memcpy(grads_.data() + slot.offset, bucket.data + offset,
                param.numel * sizeof(float));
    offset += param.numel;
    if (--missing_[slot.bucket] == 0) {
      if (timeline_ != nullptr) {
        // The span since the previous hand-over: for the first bucket the
        // previous step's optimizer, data and forward too (PyTorch's loop).
        timeline_->GradientFinal(absl::StrCat("DDP bucket ", slot.bucket),
                                 slot.bucket, /*completes_bucket=*/true);
      }
      strategy_->BucketReady(slot.bucket);
    }
  }
  return absl::OkStatus();
}

absl::Status DdpBucketSync::EndStep() {
  for (size_t b = 0; b < missing_.size(); ++b) {
    if (missing_[b] != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step_, " ended with ", missing_[b],
          " parameter(s) of gradsync's bucket ", b,
          " never handed over by DDP (unused parameters? "
          "find_unused_parameters=True is not supported behind gradsync)"));
    }
  }
  if (timeline_ != nullptr) timeline_->ComputeDone();
  const absl::Time wait_start = absl::Now();
  StepStats stats;
  RETURN_IF_ERROR(strategy_->Finish(stats));
  const absl::Time wait_end = absl::Now();
  if (timeline_ != nullptr) timeline_->SyncDone();
  for (const DdpBucket& bucket : step_buckets_) {
    int64_t offset = 0;
    for (const DdpParam& param : bucket.params) {
      std::memcpy(bucket.data + offset, grads_.data() + slots_[param.key].offset,
                  param.numel * sizeof(float));
      offset += param.numel;
    }
  }
  const int64_t now = NowMicros();
  last_step_.step = step_;
  last_step_.step_ms =
      last_step_end_us_ == 0 ? 0 : (now - last_step_end_us_) / 1000.0;
  last_step_.sync_wait_ms = absl::ToDoubleMilliseconds(wait_end - wait_start);
  last_step_.strategy = std::move(stats);
  last_step_end_us_ = now;
  step_buckets_.clear();
  missing_ = params_per_bucket_;
  if (timeline_ != nullptr) {
    timeline_->StepDone(step_, *layout_,
                        std::string("averages copied back to DDP"));
    timeline_.reset();
  }
  ++step_;
  if (trace_ != nullptr && step_ <= trace_steps_) {
    // From here: PyTorch's optimizer step, the next batch, forward, backward.
    timeline_ = std::make_unique<StepTimeline>(
        trace_, static_cast<int>(params_per_bucket_.size()));
    timeline_->DataLoaded();
  }
  return absl::OkStatus();
}

void DdpBucketSync::SetTrace(TraceRecorder* trace, int64_t steps) {
  trace_ = trace;
  trace_steps_ = steps;
}

std::vector<std::string> DdpBucketSync::TraceFiles() const {
  return strategy_ != nullptr ? strategy_->TraceFiles()
                              : std::vector<std::string>();
}

std::string DdpBucketSync::DescribeLayout() const {
  return layout_.has_value() ? layout_->Describe() : std::string();
}

std::string DdpBucketSync::SummaryJson() const {
  return strategy_ != nullptr ? strategy_->SummaryJson() : "{}";
}

absl::Status DdpBucketSync::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  if (strategy_ == nullptr) return absl::OkStatus();
  return strategy_->Shutdown();
}

}  // namespace gradsync
