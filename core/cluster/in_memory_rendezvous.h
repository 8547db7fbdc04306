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

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

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
  // std::mutex, not absl::Mutex: ThreadSanitizer sees through the standard
  // library's locks, but not through Debian's uninstrumented Abseil, and the
  // ring's tests run over this under TSan (tools/test.sh).
  mutable std::mutex mu_;
  std::condition_variable changed_;  // a key set, a barrier arrival, a loss
  std::map<std::string, std::string> store_;  // guarded by mu_
  // Arrivals per barrier name (guarded by mu_); a barrier opens when its
  // count reaches the group's size and the name is then used up.
  std::map<std::string, int> barriers_;
  absl::Status lost_;  // guarded by mu_
  // Loss listeners of every handle, by id. Listeners are called without mu_
  // held (they may call back into the job), under listeners_mu_ so that
  // RemoveLossListener waits for a call in progress.
  std::mutex listeners_mu_;
  std::map<int, std::function<void(const absl::Status&)>> listeners_;
  int next_listener_ = 0;  // guarded by listeners_mu_
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
