// How the processes of one job find each other and agree on small facts: the
// interface every strategy, transport and the trainer talk to, with no
// network library behind it (Gloo's rendezvous::Store is the model).
//
//   Set/Get      a key-value store for small blobs (addresses, NCCL's unique
//                id, checksums, summaries); Get waits until the key is set.
//   Barrier      named barriers over the workers or over everyone.
//   Broadcast, Gather, AllGather
//                built on Set/Get, so every implementation has them.
//   loss         when the job loses a member, lost() names it, listeners hear
//                it at once, and ExplainFailure puts it in front of a symptom
//                seen elsewhere (a socket closed by the lost peer).
//
// Two implementations: CoordinatorClient (core/cluster/coordinator.h), the
// gRPC service of a real job, and InMemoryRendezvous
// (core/cluster/in_memory_rendezvous.h), for tests that run every rank as a
// thread of one process.
//
// Every blocking call takes a deadline; when it passes, the error names the
// key or the ranks still missing.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gradsync {

enum class Role { kWorker, kServer };
const char* RoleName(Role role);  // "worker", "server"

// One process of the job, as it announced itself when it joined.
struct Member {
  Role role = Role::kWorker;
  int rank = 0;
  std::string address;  // what the member advertised ("10.213.0.5:41000")
  std::string host;     // its host name
};

enum class BarrierGroup { kWorkers, kEveryone };

// Who this process is within its job: read once from the environment
// (core/cluster/cluster_env.h) and handed to the strategies and the trainer.
struct ProcessIdentity {
  Role role = Role::kWorker;
  int rank = 0;        // worker rank, or server index for a server
  int world_size = 1;  // number of workers (torchrun's name)
  int num_servers = 0;
  int local_rank = 0;        // among this job's processes on this host
  int local_world_size = 1;  // this job's processes on this host; 1 if unknown
  std::string job_id = "gradsync";
  // The address peers use to reach this process.
  std::string advertise_host = "127.0.0.1";
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  // "worker 3": who this handle speaks for, for error messages.
  virtual std::string self() const = 0;

  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // Waits up to `timeout` for `key` to be set.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;
  virtual absl::Status Barrier(const std::string& name, BarrierGroup group,
                               absl::Duration timeout) = 0;

  // OK while the job is whole; otherwise Unavailable naming the first member
  // lost ("the job lost worker 2 (...): ...").
  virtual absl::Status lost() const = 0;
  // Whether lost() is no longer OK; cheap enough for polling loops.
  virtual bool has_lost() const = 0;
  // Calls `listener` exactly once with the loss (the status lost() returns),
  // at once if the job has already lost a member. A strategy blocked on the
  // lost member uses it to fail its step now rather than at a deadline. The
  // id goes to RemoveLossListener, which must run before anything `listener`
  // uses is destroyed.
  virtual int AddLossListener(
      std::function<void(const absl::Status&)> listener) = 0;
  // Waits for a call of the listener in progress, then forgets it.
  virtual void RemoveLossListener(int id) = 0;
  // For a failure seen elsewhere: waits up to `wait` for a lost member to be
  // reported and returns `symptom` with that cause in front, or `symptom`
  // unchanged when none is.
  virtual absl::Status ExplainFailure(const absl::Status& symptom,
                                      absl::Duration wait) const = 0;

  // Rank `root` publishes `value` under `key`; every caller gets it back
  // (the root its own value, at once).
  absl::StatusOr<std::string> Broadcast(const std::string& key, int rank,
                                        int root, const std::string& value,
                                        absl::Duration timeout);
  // Each of ranks 0..count-1 publishes `value` under "<prefix>/<rank>"; rank
  // `root` gets all of them in rank order, the others an empty vector.
  absl::StatusOr<std::vector<std::string>> Gather(const std::string& prefix,
                                                  int rank, int count, int root,
                                                  const std::string& value,
                                                  absl::Duration timeout);
  // As Gather, but every rank gets every value.
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& prefix,
                                                     int rank, int count,
                                                     const std::string& value,
                                                     absl::Duration timeout);
};

// A Rendezvous that passes every call on to `inner`, for decorators that
// change one or two of them (a key prefix, relayed addresses) and must keep
// the rest, the loss reporting above all, exactly as the inner one has it.
class ForwardingRendezvous : public Rendezvous {
 public:
  explicit ForwardingRendezvous(Rendezvous* inner) : inner_(inner) {}

  std::string self() const override { return inner_->self(); }
  absl::Status Set(const std::string& key, const std::string& value) override {
    return inner_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    return inner_->Get(key, timeout);
  }
  absl::Status Barrier(const std::string& name, BarrierGroup group,
                       absl::Duration timeout) override {
    return inner_->Barrier(name, group, timeout);
  }
  absl::Status lost() const override { return inner_->lost(); }
  bool has_lost() const override { return inner_->has_lost(); }
  int AddLossListener(
      std::function<void(const absl::Status&)> listener) override {
    return inner_->AddLossListener(std::move(listener));
  }
  void RemoveLossListener(int id) override { inner_->RemoveLossListener(id); }
  absl::Status ExplainFailure(const absl::Status& symptom,
                              absl::Duration wait) const override {
    return inner_->ExplainFailure(symptom, wait);
  }

 protected:
  Rendezvous* inner() const { return inner_; }

 private:
  Rendezvous* inner_;
};

}  // namespace gradsync
