// One key under BSP: summing, block-wise completion and reads (see
// bsp_key.h).
#include "ps/server/bsp_key.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// dst[i] += src[i] for float32 data in a byte string. memcpy of one float
// compiles to a plain (vectorisable) load and keeps the code free of
// alignment and aliasing assumptions about the protobuf's string buffer.
void AddFloats(float* dst, const char* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    float value;
    std::memcpy(&value, src + 4 * i, sizeof(float));
    dst[i] += value;
  }
}

}  // namespace

BspKey::BspKey(const Shape& shape, Setting setting)
    : ShardKey(shape, std::move(setting)), completed_(start_step_ - 1) {
  absl::MutexLock lock(&mu_);
  sums_[0].assign(numel_, 0.0f);
  // Worker mode: sums by step parity.
  if (!server_mode()) sums_[1].assign(numel_, 0.0f);
}

absl::Status BspKey::Push(const ps::KeyPart& part, Waiters* notify) {
  absl::MutexLock lock(&mu_);
  const ps::Header& header = part.header();
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  const int rank = header.rank();
  if (header.step() <= completed_) {
    return absl::OutOfRangeError(
        absl::StrCat(Context(header, "push"), ": step ", header.step(),
                     " is in the past; this key completed step ", completed_,
                     " and takes pushes for step ", completed_ + 1));
  }
  if (header.step() > completed_ + 1) {
    return absl::OutOfRangeError(
        absl::StrCat(Context(header, "push"), ": step ", header.step(),
                     " is too far ahead; this key takes pushes for step ",
                     completed_ + 1, " (BSP)"));
  }
  const int64_t received = received_[rank];
  if (received == numel_) {
    return absl::AlreadyExistsError(absl::StrCat(
        Context(header, "push"), ": worker ", rank, " already pushed all ",
        numel_, " floats of this key for step ", header.step()));
  }
  RETURN_IF_ERROR(CheckPartContinues(part));
  // After this part, every worker has pushed [0, pushed).
  int64_t pushed = received + n;
  for (int r = 0; r < num_workers_; ++r) {
    if (r != rank) pushed = std::min(pushed, received_[r]);
  }
  if (server_mode() &&
      (pushed == numel_ ||
       pushed / block_floats_ * block_floats_ > final_floats_)) {
    RETURN_IF_ERROR(CheckParamsInitialized(header));
  }
  const absl::Time start = absl::Now();
  const int slot = server_mode() ? 0 : static_cast<int>(header.step() % 2);
  float* sums = sums_[slot].data();
  // [begin, end) = [begin, first) already written by someone (add) +
  // [first, end) reached first by this worker (copy).
  const int64_t begin = part.offset();
  const int64_t end = begin + n;
  const int64_t first = std::clamp(written_, begin, end);
  const char* data = part.data().data();
  AddFloats(sums + begin, data, first - begin);
  std::memcpy(sums + first, data + (first - begin) * 4,
              static_cast<size_t>(end - first) * 4);
  written_ = std::max(written_, end);
  statistics_.AddSumTime(start);
  received_[rank] += n;
  if (Finalize(pushed)) {
    // Waiters stay registered until the key's step completes.
    if (completed_ == header.step()) {
      notify->swap(waiters_);
    } else {
      *notify = waiters_;
    }
  }
  return absl::OkStatus();
}

bool BspKey::Finalize(int64_t pushed) {
  const int64_t end =
      pushed == numel_ ? numel_ : pushed / block_floats_ * block_floats_;
  if (end <= final_floats_) return false;
  const absl::Time start = absl::Now();
  const int64_t step = completed_ + 1;
  // sum / N in float, the arithmetic of the ring and of the local reference,
  // so results agree to float rounding of the sums.
  const float n = static_cast<float>(num_workers_);
  for (int64_t begin = final_floats_; begin < end; begin += block_floats_) {
    const int64_t count = std::min(block_floats_, numel_ - begin);
    if (server_mode()) {
      float* grads = sums_[0].data() + begin;
      for (int64_t i = 0; i < count; ++i) grads[i] = grads[i] / n;
      parameters_->StepBlock(begin, grads, lr_);
    } else {
      float* sums = sums_[step % 2].data() + begin;
      for (int64_t i = 0; i < count; ++i) sums[i] = sums[i] / n;
    }
    statistics_.CountBlock();
  }
  final_floats_ = end;
  if (end == numel_) {
    // Step + 1 sums into the other buffer (worker mode), which holds step -
    // 1's result: every worker has pulled it, since each pushed `step` and
    // does so only after its pull of step - 1 finished. In server mode the
    // one sum buffer is free again likewise. Either way its old contents are
    // overwritten by step + 1's first arrivals (written = 0).
    completed_ = step;
    if (server_mode() && checkpoint_.IsCheckpointStep(step + 1)) {
      checkpoint_.TakeKey(index_, *parameters_, step + 1);
    }
    final_floats_ = 0;
    written_ = 0;
    std::fill(received_.begin(), received_.end(), 0);
    statistics_.CountKeyStep();
  }
  statistics_.AddUpdateTime(start);
  return true;
}

absl::Status BspKey::CheckPull(const ps::Header& header,
                               const std::string& context) const {
  absl::MutexLock lock(&mu_);
  const int64_t step = header.step();
  if (step < completed_) {
    return absl::OutOfRangeError(
        absl::StrCat(context, ": step ", step, " is in the past for key ", id_,
                     ", which completed step ", completed_));
  }
  if (step > completed_ + 1) {
    return absl::OutOfRangeError(
        absl::StrCat(context, ": step ", step, " is too far ahead for key ",
                     id_, ", which takes pushes for step ", completed_ + 1));
  }
  return absl::OkStatus();
}

bool BspKey::AddPull(int64_t step, int rank,
                     const std::shared_ptr<KeyWaiter>& waiter) {
  absl::MutexLock lock(&mu_);
  // Between the check and here a key can only have moved from pending to
  // complete: completing step + 1 needs this worker's own push.
  if (completed_ == step) return true;
  waiters_.push_back(waiter);
  return final_floats_ > 0;
}

int64_t BspKey::FinalFloats(int64_t step, int rank) const {
  absl::MutexLock lock(&mu_);
  if (completed_ == step) return numel_;
  if (completed_ + 1 == step) return final_floats_;
  return completed_ > step ? -1 : 0;
}

absl::StatusOr<int64_t> BspKey::Read(
    int64_t step, int rank, int64_t offset, int64_t max_floats,
    absl::FunctionRef<char*(int64_t floats)> place, ps::Header* reply) {
  absl::MutexLock lock(&mu_);
  const int64_t available = completed_ == step       ? numel_
                            : completed_ + 1 == step ? final_floats_
                                                     : -1;
  if (offset < 0 || offset >= available) {
    return absl::FailedPreconditionError(absl::StrCat(
        server_, ": result of key ", id_, " for step ", step, " from float ",
        offset, " is not available; the key's last completed step is ",
        completed_, " and ", final_floats_, " floats of the next are final"));
  }
  const int64_t n = std::min(max_floats, available - offset);
  const float* source =
      server_mode() ? parameters_->data() : sums_[step % 2].data();
  std::memcpy(place(n), source + offset,
              static_cast<size_t>(n) * sizeof(float));
  return n;
}

std::vector<MissingPush> BspKey::MissingWorkers(int64_t step, int rank) const {
  std::vector<MissingPush> missing;
  absl::MutexLock lock(&mu_);
  if (completed_ >= step) return missing;
  for (int r = 0; r < num_workers_; ++r) {
    // Before its step starts, nobody has pushed it.
    if (completed_ + 1 < step || received_[r] < numel_) {
      missing.push_back({r, step});
    }
  }
  return missing;
}

int64_t BspKey::StepsDone() const {
  absl::MutexLock lock(&mu_);
  return completed_ + 1;
}

}  // namespace gradsync
