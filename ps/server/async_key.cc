// One key under SSP or ASP: per-push updates, clocks and reads (see
// async_key.h).
#include "ps/server/async_key.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"

namespace gradsync {

AsyncKey::AsyncKey(const Shape& shape, Setting setting,
                   ps::Consistency consistency, int64_t staleness)
    : ShardKey(shape, std::move(setting)),
      consistency_(consistency),
      staleness_(staleness),
      clock_(shape.num_workers, start_step_),
      staged_(shape.num_workers, std::vector<float>(shape.numel)),
      read_clock_(shape.num_workers, start_step_),
      slowest_(start_step_),
      unreported_saved_ns_(shape.num_workers, 0) {}

absl::Status AsyncKey::Push(const ps::KeyPart& part, Waiters* notify) {
  absl::MutexLock lock(&mu_);
  const ps::Header& header = part.header();
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  const int rank = header.rank();
  const int64_t next = clock_[rank];
  if (header.step() != next) {
    return absl::OutOfRangeError(absl::StrCat(
        Context(header, "push"), ": step ", header.step(),
        header.step() < next ? " is in the past" : " is too far ahead",
        "; worker ", rank, " pushed ", next,
        " steps of this key, so its next push is for step ", next, Note()));
  }
  const int64_t received = received_[rank];
  RETURN_IF_ERROR(CheckPartContinues(part));
  RETURN_IF_ERROR(CheckParamsInitialized(header));
  if (received == 0) {
    // The parameters this gradient was computed on held every worker's
    // steps before read_clock.
    statistics_.RecordStaleness(rank, header.step() - read_clock_[rank]);
  }
  const absl::Time start = absl::Now();
  std::memcpy(staged_[rank].data() + received, part.data().data(),
              part.data().size());
  statistics_.AddSumTime(start);
  received_[rank] += n;
  const int64_t pushed = received_[rank];
  // Every whole block of what had arrived was applied then.
  Apply(rank, received / block_floats_ * block_floats_,
        pushed == numel_ ? numel_ : pushed / block_floats_ * block_floats_);
  if (pushed == numel_) {
    AdvanceClock(rank, header.step());
    // Any waiting pull may have become answerable (its own push is done, or
    // the slowest worker moved); the ones that gave up are dropped.
    waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(),
                                  [](const std::weak_ptr<KeyWaiter>& waiter) {
                                    return waiter.expired();
                                  }),
                   waiters_.end());
    *notify = waiters_;
  }
  return absl::OkStatus();
}

void AsyncKey::Apply(int rank, int64_t begin, int64_t end) {
  if (end <= begin) return;
  const absl::Time start = absl::Now();
  // One optimizer step per worker's push, on its own gradient, with 1/N of
  // the learning rate: N pushes move the parameters as far as one BSP step.
  const float lr = lr_ / static_cast<float>(num_workers_);
  for (int64_t block = begin; block < end; block += block_floats_) {
    parameters_->StepBlock(block, staged_[rank].data() + block, lr);
    statistics_.CountBlock();
  }
  statistics_.AddUpdateTime(start);
}

void AsyncKey::AdvanceClock(int rank, int64_t step) {
  clock_[rank] = step + 1;
  received_[rank] = 0;
  const int64_t slowest = *std::min_element(clock_.begin(), clock_.end());
  if (slowest == slowest_) return;
  // One worker's clock moved by one, so the key's moves by at most one.
  slowest_ = slowest;
  statistics_.CountKeyStep();
  if (checkpoint_.IsCheckpointStep(slowest)) {
    checkpoint_.TakeKey(index_, *parameters_, slowest);
  }
  // BSP would answer pulls of the steps before `slowest` only now.
  const absl::Time now = absl::Now();
  size_t kept = 0;
  for (const EarlyRead& read : early_) {
    if (read.step >= slowest) {
      early_[kept++] = read;
      continue;
    }
    const int64_t saved = absl::ToInt64Nanoseconds(now - read.at);
    statistics_.AddWaitSaved(read.worker, saved);
    unreported_saved_ns_[read.worker] += saved;
  }
  early_.resize(kept);
}

int64_t AsyncKey::RequiredClock(int64_t step) const {
  if (checkpoint_.IsBarrierStep(step + 1)) return step + 1;
  if (consistency_ == ps::CONSISTENCY_SSP) return step + 1 - staleness_;
  return std::numeric_limits<int64_t>::min();  // ASP
}

AsyncKey::Readiness AsyncKey::ReadinessOf(int64_t step, int rank) const {
  // It pushed later steps since.
  if (step < clock_[rank] - 1) return Readiness::kPast;
  // Its own push is not all in.
  if (clock_[rank] < step + 1) return Readiness::kWait;
  return slowest_ >= RequiredClock(step) ? Readiness::kReady : Readiness::kWait;
}

absl::Status AsyncKey::CheckPull(const ps::Header& header,
                                 const std::string& context) const {
  absl::MutexLock lock(&mu_);
  // Its own push of the step may still be on the way.
  const int64_t pushed = clock_[header.rank()];
  const int64_t step = header.step();
  if (step != pushed && step != pushed - 1) {
    return absl::OutOfRangeError(
        absl::StrCat(context, ": worker ", header.rank(), " pushed ", pushed,
                     " steps of key ", id_, ", so it can pull step ",
                     pushed - 1, " or ", pushed, Note()));
  }
  return absl::OkStatus();
}

bool AsyncKey::AddPull(int64_t step, int rank,
                       const std::shared_ptr<KeyWaiter>& waiter) {
  absl::MutexLock lock(&mu_);
  if (ReadinessOf(step, rank) == Readiness::kReady) return true;
  waiters_.push_back(waiter);
  return false;
}

int64_t AsyncKey::FinalFloats(int64_t step, int rank) const {
  absl::MutexLock lock(&mu_);
  switch (ReadinessOf(step, rank)) {
    case Readiness::kReady:
      return numel_;
    case Readiness::kWait:
      return 0;
    case Readiness::kPast:
      break;
  }
  return -1;
}

absl::StatusOr<int64_t> AsyncKey::Read(
    int64_t step, int rank, int64_t offset, int64_t max_floats,
    absl::FunctionRef<char*(int64_t floats)> place, ps::Header* reply) {
  absl::MutexLock lock(&mu_);
  if (ReadinessOf(step, rank) != Readiness::kReady || offset < 0 ||
      offset >= numel_) {
    return absl::FailedPreconditionError(absl::StrCat(
        server_, ": parameters of key ", id_, " for worker ", rank, "'s step ",
        step, " from float ", offset, " are not available; the worker pushed ",
        clock_[rank], " steps of it, the slowest ", slowest_, Note()));
  }
  const int64_t n = std::min(max_floats, numel_ - offset);
  int64_t clock = slowest_;
  if (checkpoint_.IsCheckpointStep(step + 1)) {
    // A barrier: every worker reads the checkpoint's state, which pushes of
    // the next step (already arriving from the fastest) do not change.
    clock = step + 1;
    RETURN_IF_ERROR(
        checkpoint_.ReadSnapshot(index_, step + 1, offset, n, place));
  } else {
    std::memcpy(place(n), parameters_->data() + offset,
                static_cast<size_t>(n) * sizeof(float));
  }
  if (reply != nullptr) reply->set_slowest_clock(clock);
  if (offset == 0) {
    read_clock_[rank] = clock;
    if (clock < step + 1) early_.push_back({rank, step, absl::Now()});
    if (reply != nullptr) {
      reply->set_wait_saved_us(unreported_saved_ns_[rank] / 1000);
    }
    unreported_saved_ns_[rank] = 0;
    statistics_.CountRead(rank);
  }
  return n;
}

std::vector<MissingPush> AsyncKey::MissingWorkers(int64_t step,
                                                  int rank) const {
  std::vector<MissingPush> missing;
  absl::MutexLock lock(&mu_);
  if (ReadinessOf(step, rank) != Readiness::kWait) return missing;
  const int64_t required = RequiredClock(step);
  for (int r = 0; r < num_workers_; ++r) {
    if (r == rank && clock_[r] < step + 1) {
      missing.push_back({r, step});
    } else if (clock_[r] < required) {
      missing.push_back({r, required - 1});
    }
  }
  return missing;
}

int64_t AsyncKey::StepsDone() const {
  absl::MutexLock lock(&mu_);
  return slowest_;
}

}  // namespace gradsync
