// The coordinator: a small gRPC service on MASTER_ADDR:MASTER_PORT, hosted by
// worker rank 0, through which the processes of one job find each other.
//
//   Join     every worker and server announces (role, rank, address); the call
//            returns the whole roster once everyone has joined.
//   Barrier  named barriers over the workers or over everyone.
//   Set/Get  a key-value store for small blobs (NCCL's unique id, summaries);
//            Get waits until the key is set.
//   Watch    from Join to the end, each member's client holds a stream open:
//            it is how the job learns that a member was lost (see below).
//
// Every blocking call has a deadline; when it passes the error names the ranks
// (or key) still missing. Requests carry the job id and are refused for any
// other job; with a job token (core/cluster/job_token.h) they must also carry
// it, and with a TLS configuration (core/cluster/tls_config.h) the connection
// is TLS. Both come in CoordinatorSecurity; the command line fills it from its
// flags (tools/cluster_flags.h).
//
// Lost members. A member whose watch breaks before it has left (killed,
// crashed, host gone) is lost; so is the coordinator, for everyone else, when
// worker 0 dies. Every client then learns which member was lost (lost(),
// ExplainFailure()) within a fraction of a second, and — unless told
// otherwise — ends its own process a short grace period later, with an error
// naming the lost member, if its own error handling has not ended it first.
// A job cannot go on without a member, and without this a survivor blocked
// on the lost member would wait for its --timeout_s (or a parameter server
// for its idle timeout) before failing. Strategies do better than the grace
// period: their loss listeners (AddLossListener) fail the step in flight the
// moment the loss is known, so the process ends through its own error path.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"
#include "core/cluster/tls_config.h"

namespace grpc {
class Server;
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace gradsync {

class CoordinatorService;  // core/coordinator_service.h

// A worker's training-relevant settings, sent with its Join and compared by
// the coordinator with worker 0's: a worker whose settings differ would train
// another model, so it is refused and the whole job fails at once, naming both
// workers and the first setting that differs. The library reads no flags:
// the command line makes them (tools/job_settings.h), the PyTorch hook from
// its connect() arguments.
struct WorkerSettings {
  // By name as the user writes them ("--lr" -> "0.05"). Empty: none stated,
  // nothing compared.
  std::map<std::string, std::string> values;
  // Worker 0's only: what a refused worker is told to do.
  std::string advice = "give every worker the same training flags";
  // Settings whose name does not start with "--" are derived: what a
  // process computes from its flags, its environment and the job's shape
  // before it joins (a parameter server's stream windows from the job's
  // link). Worker 0's only: what a member refused for one of those is told,
  // worker or server.
  std::string derived_advice =
      "every process derives it from its environment and the job's shape: "
      "give every process the same environment";
};

// Whether a setting `name` of WorkerSettings is derived (see above).
inline bool IsDerivedSetting(const std::string& name) {
  return name.rfind("--", 0) != 0;
}

// Who may talk to the coordinator, and how. The default, no token and
// plaintext, is for tests and single-machine benchmarks.
struct CoordinatorSecurity {
  std::string job_token;  // empty: none required, none sent
  TlsConfig tls;          // not enabled: plaintext
};

class CoordinatorServer {
 public:
  // Listens on `bind_address` ("0.0.0.0:29500"; port 0 picks a free one),
  // requiring `security`'s token and serving its TLS. The port is this
  // job's alone (no SO_REUSEPORT): one taken by another process is an error
  // saying so. An empty `job_id` (no launcher named the job) makes a fresh
  // one (NewJobId), which members that were given none learn on Connect.
  // `shape_source` says where worker 0 read num_workers and num_servers
  // (ClusterEnv::shape), for the error that refuses a member that believes
  // in another shape. `worker_settings` are worker 0's, which every worker
  // that states its settings at Join must have (none: nothing compared).
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const std::string& bind_address, const std::string& job_id,
      int num_workers, int num_servers,
      const CoordinatorSecurity& security = CoordinatorSecurity(),
      const std::string& shape_source = "",
      const WorkerSettings& worker_settings = WorkerSettings());
  ~CoordinatorServer();

  int port() const { return port_; }
  // The job's id: the one given to Start, or the fresh one made for it.
  const std::string& job_id() const { return job_id_; }
  // Tells every member that the job has ended normally, then stops serving.
  void Shutdown();
  // "worker 2 (...): reason" for every member lost so far.
  std::vector<std::string> LostMembers() const;

 private:
  CoordinatorServer() = default;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string job_id_;
  int port_ = 0;
};

struct CoordinatorClientOptions {
  CoordinatorSecurity security;
  // When the job loses a member: end this process (exit code 1, after
  // logging which member was lost) if it is still running `grace` later.
  // Tests that watch losses from inside one process turn this off.
  bool exit_when_member_lost = true;
  absl::Duration grace = absl::Seconds(3);
  // The job's shape as this process sees it, sent with Join and compared
  // there with worker 0's: a member that believes in another shape is
  // refused and the job fails, naming both. num_workers < 1: not stated.
  int num_workers = 0;
  int num_servers = 0;
  std::string shape_source;  // ClusterEnv::shape
  // This member's training-relevant settings, sent with Join: a worker's
  // every one (see WorkerSettings), a parameter server's those it reads
  // itself, each compared with worker 0's value of the same name.
  WorkerSettings settings;
  // Called once, from the thread that watches the job, when the coordinator
  // says the job has ended (worker 0 has finished) while this member is
  // still in it: a parameter server then knows no worker will come back.
  std::function<void()> on_job_ended;
};

// The Rendezvous of a real job (core/cluster/rendezvous.h), over gRPC.
class CoordinatorClient final : public Rendezvous {
 public:
  // Connects to `target` ("host:port"), waiting up to `connect_timeout` for the
  // coordinator to come up (it is started by worker 0, possibly after us).
  // Sends `options.security`'s token and speaks its TLS. With an empty
  // `job_id` it asks the coordinator for the job's id (job_id()).
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& target, const std::string& job_id, Role role, int rank,
      absl::Duration connect_timeout,
      const CoordinatorClientOptions& options = CoordinatorClientOptions());
  // Leaves the job (see Leave) and stops watching.
  ~CoordinatorClient() override;

  Role role() const { return role_; }
  int rank() const { return rank_; }
  const std::string& job_id() const { return job_id_; }
  // "worker 3".
  std::string self() const override;

  // Starts watching the job, announces this process at `address` and
  // returns every member once all num_workers + num_servers have joined,
  // workers first, by rank.
  absl::StatusOr<std::vector<Member>> Join(const std::string& address,
                                           absl::Duration timeout);
  absl::Status Barrier(const std::string& name, BarrierGroup group,
                       absl::Duration timeout) override;
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

  // Says that this member ends, so its going is no loss. With an error,
  // the member ends because of it and the job cannot go on: every other
  // member hears of it as of a loss ("the job lost worker 1 (...): it
  // failed: <error>"), unless a loss is already known. Idempotent; a
  // coordinator already gone is not an error.
  void Leave(const absl::Status& outcome = absl::OkStatus());

  // OK while the job is whole; otherwise Unavailable naming the first
  // member lost ("the job lost worker 2 (127.0.0.1:40011 on host a): ...").
  absl::Status lost() const override;
  // Whether lost() is no longer OK; lock-free, for polling loops.
  bool has_lost() const override {
    return has_lost_.load(std::memory_order_acquire);
  }
  // Calls `listener` with the loss (the status lost() returns) once the job
  // loses a member, or at once if it already has: exactly once, from the
  // thread that watches the job, before the grace period starts. A strategy
  // blocked on the lost member uses it to fail its step at once instead of
  // waiting out a deadline. The returned id goes to RemoveLossListener,
  // which must run before anything `listener` uses is destroyed.
  int AddLossListener(
      std::function<void(const absl::Status&)> listener) override;
  // Waits for a call of the listener in progress, then forgets it.
  void RemoveLossListener(int id) override;

  // For a failure seen elsewhere (a socket closed by a peer): waits up to
  // `wait` for the coordinator to say which member was lost, and returns
  // `symptom` with that cause in front; `symptom` unchanged when no loss is
  // reported (or this client does not watch).
  absl::Status ExplainFailure(const absl::Status& symptom,
                              absl::Duration wait) const override;

 private:
  class Stub;
  CoordinatorClient() = default;
  absl::Status StartWatch(absl::Duration timeout);
  void WatchLoop();
  void OnLoss(const absl::Status& loss);
  // Tells the coordinator, as it shuts down, that this member is alive.
  void Answer(int64_t round);
  template <typename Request>
  void FillSender(Request& request) const;
  void Prepare(grpc::ClientContext& context) const;
  // Prepare for the calls that wait on the job (Join, Barrier, Set, Get):
  // a deadline of `timeout` plus 5 s, and they wait for a connection.
  void PrepareWaitingCall(grpc::ClientContext& context,
                          absl::Duration timeout) const;
  // FromGrpc for those calls: a deadline missed while there was no
  // connection says so.
  absl::Status WaitedCallStatus(const grpc::Status& status,
                                absl::string_view what) const;

  std::unique_ptr<Stub> stub_;
  std::string target_;
  std::string job_id_;
  Role role_ = Role::kWorker;
  int rank_ = 0;
  CoordinatorClientOptions options_;

  std::atomic<bool> has_lost_{false};
  // Taken before mu_ where both are held (OnLoss, AddLossListener).
  absl::Mutex listeners_mu_;
  std::map<int, std::function<void(const absl::Status&)>> listeners_
      ABSL_GUARDED_BY(listeners_mu_);
  int next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 0;

  mutable absl::Mutex mu_;
  std::unique_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(mu_);
  std::thread watch_thread_;
  bool watch_started_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_registered_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_over_ ABSL_GUARDED_BY(mu_) = false;   // the stream has ended
  absl::Status watch_error_ ABSL_GUARDED_BY(mu_);  // before registration
  bool job_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradsync
