// A Rendezvous for ranks that are threads of one process: unit tests of the
// ring, the parameter-server client and the trainer run a whole job without
// starting a gRPC coordinator.
//
//   auto job = std::make_shared<InMemoryJob>(/*num_workers=*/4,
//   /*num_servers=*/0); InMemoryRendezvous worker0(job, Role::kWorker, 0);  //
//   one per rank
//
// The job is the shared store; each rank holds its own handle, which says who
// it is in errors. Tests make the job lose a member with InMemoryJob::Lose:
// every handle's listeners hear of it as they would from the coordinator.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

class InMemoryJob {
 public:
  InMemoryJob(int num_workers, int num_servers)
      : num_workers_(num_workers), num_servers_(num_servers) {}

  // The job loses `member` (for example "worker 2") for `reason`: every
  // handle's lost() names it from now on and their listeners are called.
  void Lose(const std::string& member, const std::string& reason);

 private:
  friend class InMemoryRendezvous;
  const int num_workers_;
  const int num_servers_;
  // Waiters (Get, Barrier, ExplainFailure) await a condition on this
  // state: a key set, a barrier arrival, a loss. ThreadSanitizer cannot see
  // this lock (Debian's Abseil is uninstrumented; tools/tsan_suppressions.txt).
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
  // Arrivals per barrier name; a barrier opens when its count reaches the
  // group's size and the name is then used up.
  std::map<std::string, int> barriers_ ABSL_GUARDED_BY(mu_);
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  // Loss listeners of every handle, by id. Listeners are called without mu_
  // held (they may call back into the job), under listeners_mu_ so that
  // RemoveLossListener waits for a call in progress. Order: listeners_mu_
  // before mu_.
  absl::Mutex listeners_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<int, std::function<void(const absl::Status&)>> listeners_
      ABSL_GUARDED_BY(listeners_mu_);
  int next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 0;
};

class InMemoryRendezvous final : public Rendezvous {
 public:
  InMemoryRendezvous(std::shared_ptr<InMemoryJob> job, Role role, int rank)
      : job_(std::move(job)), role_(role), rank_(rank) {}

  std::string self() const override;
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Barrier(const std::string& name, BarrierGroup group,
                       absl::Duration timeout) override;
  absl::Status lost() const override;
  bool has_lost() const override { return !lost().ok(); }
  int AddLossListener(
      std::function<void(const absl::Status&)> listener) override;
  void RemoveLossListener(int id) override;
  absl::Status ExplainFailure(const absl::Status& symptom,
                              absl::Duration wait) const override;

 private:
  std::shared_ptr<InMemoryJob> job_;
  Role role_;
  int rank_;
};

}  // namespace gradsync
