#include "core/cluster/in_memory_rendezvous.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gradsync {

void InMemoryJob::Lose(const std::string& member, const std::string& reason) {
  absl::Status loss;
  {
    absl::MutexLock lock(&mu_);
    if (!lost_.ok()) return;  // the first loss is the one reported
    lost_ = absl::UnavailableError(
        absl::StrCat("the job lost ", member, ": ", reason));
    loss = lost_;
  }
  absl::MutexLock lock(&listeners_mu_);
  for (auto& [id, listener] : listeners_) listener(loss);
}

std::string InMemoryRendezvous::self() const {
  return absl::StrCat(RoleName(role_), " ", rank_);
}

absl::Status InMemoryRendezvous::Set(const std::string& key,
                                     const std::string& value) {
  absl::MutexLock lock(&job_->mu_);
  job_->store_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryRendezvous::Get(const std::string& key,
                                                    absl::Duration timeout) {
  absl::MutexLock lock(&job_->mu_);
  // A loss ends the wait as the coordinator's would: the key will not come.
  auto settled = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job_->mu_) {
    return job_->store_.count(key) > 0 || !job_->lost_.ok();
  };
  if (!job_->mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(self(), " waited ", absl::FormatDuration(timeout),
                     " for key '", key, "', which no rank set"));
  }
  auto it = job_->store_.find(key);
  if (it == job_->store_.end()) {
    return absl::UnavailableError(absl::StrCat(
        job_->lost_.message(), "; so ", self(), " got no key '", key, "'"));
  }
  return it->second;
}

absl::Status InMemoryRendezvous::Barrier(const std::string& name,
                                         BarrierGroup group,
                                         absl::Duration timeout) {
  const int size = group == BarrierGroup::kWorkers
                       ? job_->num_workers_
                       : job_->num_workers_ + job_->num_servers_;
  absl::MutexLock lock(&job_->mu_);
  int& arrived = job_->barriers_[name];
  ++arrived;
  auto open = [&arrived, size, this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                  job_->mu_) { return arrived >= size || !job_->lost_.ok(); };
  if (!job_->mu_.AwaitWithTimeout(absl::Condition(&open), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        self(), " waited ", absl::FormatDuration(timeout), " at barrier '",
        name, "': ", arrived, " of ", size, " arrived"));
  }
  if (arrived < size) return job_->lost_;
  return absl::OkStatus();
}

absl::Status InMemoryRendezvous::lost() const {
  absl::MutexLock lock(&job_->mu_);
  return job_->lost_;
}

int InMemoryRendezvous::AddLossListener(
    std::function<void(const absl::Status&)> listener) {
  absl::MutexLock listeners_lock(&job_->listeners_mu_);
  const int id = job_->next_listener_++;
  const absl::Status loss = lost();
  if (!loss.ok()) {
    listener(loss);  // exactly once: it is not kept
    return id;
  }
  job_->listeners_[id] = std::move(listener);
  return id;
}

void InMemoryRendezvous::RemoveLossListener(int id) {
  absl::MutexLock lock(&job_->listeners_mu_);
  job_->listeners_.erase(id);
}

absl::Status InMemoryRendezvous::ExplainFailure(const absl::Status& symptom,
                                                absl::Duration wait) const {
  if (symptom.ok()) return symptom;
  absl::MutexLock lock(&job_->mu_);
  auto lost = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job_->mu_) {
    return !job_->lost_.ok();
  };
  job_->mu_.AwaitWithTimeout(absl::Condition(&lost), wait);
  if (job_->lost_.ok() ||
      absl::StrContains(symptom.message(), job_->lost_.message())) {
    return symptom;
  }
  return absl::Status(symptom.code(), absl::StrCat(job_->lost_.message(),
                                                   "; so ", symptom.message()));
}

}  // namespace gradsync
