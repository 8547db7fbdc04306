// The coordinator's gRPC service (proto/coordinator.proto): the state of one
// job's rendezvous behind the handlers — who has joined, barriers, the
// key-value store, and who is watching. CoordinatorServer (coordinator.h)
// serves it; tests and the fuzzer call the handlers directly.
//
// Every handler checks, in this order, the job token (gRPC metadata), the
// job id, the sender's role and rank, and the sizes of what it is asked to
// store; anything else is refused with an error and never stored. Blocking
// handlers wait at most their request's timeout (capped), and give up at
// once when the job has lost a member or the coordinator is shutting down.
//
// Liveness: every member holds a Watch stream open for its whole life. When a
// stream breaks without the member having called Leave first, the member is
// lost (killed, crashed, unreachable); every other watcher is told, with the
// member's role, rank and address, and every blocked call fails naming it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cluster/coordinator.h"
#include "proto/coordinator.grpc.pb.h"

namespace gradsync {

struct CoordinatorServiceOptions {
  std::string job_id;
  int num_workers = 1;
  int num_servers = 0;
  // Where the coordinator's host read N and K ("8 workers (WORLD_SIZE), ..."),
  // for the error that refuses a member believing in another shape.
  std::string shape_source;
  // Worker 0's settings: a worker whose Join states others is refused, and
  // the job fails (CoordinatorServer::Start).
  WorkerSettings worker_settings;
  // Required from every caller when not empty (core/cluster/job_token.h).
  std::string job_token;
  // Bounds on the key-value store (tests lower them).
  int64_t max_store_bytes = int64_t{1} << 30;
  size_t max_store_keys = 1 << 20;
  size_t max_barriers = 1 << 20;
};

// Watch uses gRPC's callback API, so that a member's watch holds no thread
// and its breaking is noticed the moment gRPC learns of it; the other
// handlers are synchronous.
class CoordinatorService final
    : public proto::Coordinator::WithCallbackMethod_Watch<
          proto::Coordinator::Service> {
 public:
  // Sizes a request may not exceed; a key or barrier name is a short path,
  // an address a host:port. Values may be whole run summaries, up to the
  // gRPC message limit, but the store as a whole is bounded (options).
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxAddressBytes = 1024;
  static constexpr size_t kMaxJobIdBytes = 256;
  // A worker's settings at Join: far more than gradsync has flags, and
  // values far longer than any flag's.
  static constexpr int kMaxSettings = 4096;
  static constexpr size_t kMaxSettingBytes = 16384;
  // Get of this key answers the job's id, for members that were started
  // without one (core/cluster/coordinator.h); it is not in the store.
  static constexpr char kJobIdKey[] = "gradsync/job_id";
  // Longer waits are cut to this (a week): no arithmetic overflows.
  static constexpr int64_t kMaxTimeoutMs = int64_t{7} * 24 * 3600 * 1000;

  explicit CoordinatorService(CoordinatorServiceOptions options);

  grpc::Status Join(grpc::ServerContext* context,
                    const proto::JoinRequest* request,
                    proto::JoinResponse* response) override;
  grpc::Status Barrier(grpc::ServerContext* context,
                       const proto::BarrierRequest* request,
                       proto::BarrierResponse* response) override;
  grpc::Status Set(grpc::ServerContext* context,
                   const proto::SetRequest* request,
                   proto::SetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context,
                   const proto::GetRequest* request,
                   proto::GetResponse* response) override;
  grpc::ServerWriteReactor<proto::WatchEvent>* Watch(
      grpc::CallbackServerContext* context,
      const proto::WatchRequest* request) override;
  grpc::Status Leave(grpc::ServerContext* context,
                     const proto::LeaveRequest* request,
                     proto::LeaveResponse* response) override;
  grpc::Status Alive(grpc::ServerContext* context,
                     const proto::AliveRequest* request,
                     proto::AliveResponse* response) override;

  // Shutting down takes three steps, because a job that failed shuts its
  // coordinator down too, often within milliseconds of the loss behind the
  // failure — before the coordinator has noticed it — and the members still
  // running must hear of that loss, not that the job ended.
  // BeginShutdown: blocked handlers return, new waits fail at once, members
  // whose watch has already broken are recorded as lost, and every watcher
  // is probed. AwaitProbeAnswers: every watcher that has not left answers
  // (it is alive), or a loss is known, or `timeout` passes — and then the
  // watchers that did not answer are lost. EndJob: the watchers still there
  // are told the job has ended, and their streams close.
  void BeginShutdown();
  // Before shutting down a job that failed: waits up to `timeout` for the
  // members that have never watched the job (started late, still
  // connecting) to do so, so that they too hear why the job failed instead
  // of waiting out their connection deadline. Returns at once when the job
  // has not failed or everyone has watched.
  void AwaitLateMembers(absl::Duration timeout);
  void AwaitProbeAnswers(absl::Duration timeout);
  void EndJob();

  // "worker 2 (...): reason" for each member lost so far, in order.
  std::vector<std::string> LostMembers() const;
  // Bytes held by the key-value store (keys and values).
  int64_t StoreBytes() const;

 private:
  using MemberKey = std::pair<Role, int>;
  struct Loss {
    MemberKey member;
    std::string address;
    std::string host;
    std::string reason;
    std::string Describe() const;
  };

  class Watcher;
  // The caller is of this job: its token and job id.
  grpc::Status CheckCaller(const grpc::ServerContextBase& context,
                           const proto::Sender& sender) const;
  // CheckCaller, then the sender's role and rank within the job's shape.
  grpc::Status CheckCall(const grpc::ServerContextBase& context,
                         const proto::Sender& sender) const;
  // For Watch and Join: a caller of this job whose role or rank is outside
  // the job's shape believes in another job. The job cannot start, so the
  // refusal fails it for everyone (recorded as that member's loss).
  grpc::Status CheckMember(const grpc::ServerContextBase& context,
                           const proto::Sender& sender,
                           const std::string& peer);
  std::string ShapeLocked() const;
  // Why a joining worker's settings cannot be taken: "" when they agree
  // with worker 0's (or either side states none); otherwise the first
  // setting by name that differs, naming both values, and what to do
  // (worker 0's advice for a flag, its derived_advice for a derived one).
  // `name` is set to the setting's name.
  std::string SettingsDifference(const proto::JoinRequest& request,
                                 std::string* name) const;
  // The same for a joining parameter server, which states only the settings
  // it reads itself: each must be among worker 0's, with worker 0's value.
  std::string ServerSettingsDifference(const proto::JoinRequest& request,
                                       std::string* name) const;
  // "<difference>; <advice>", the advice chosen by the setting's kind.
  std::string WithAdvice(const std::string& difference,
                         const std::string& setting,
                         const std::string& flag_advice) const;
  template <typename Done, typename Describe>
  grpc::Status WaitLocked(grpc::ServerContext* context, int64_t timeout_ms,
                          Done done, Describe describe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MissingLocked(const std::set<MemberKey>& present,
                            bool everyone) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MissingMembersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordLossLocked(const MemberKey& member, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // As RecordLossLocked, for a member not in members_ (refused at Join).
  void RecordLossLocked(const MemberKey& member, const std::string& address,
                        const std::string& host, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::string BrokenWatch(const std::string& peer);

  const CoordinatorServiceOptions options_;
  // The last call refused for its job token (never the token itself);
  // its own mutex, since CheckCaller runs before mu_ is taken.
  mutable absl::Mutex refusal_mu_;
  mutable std::string last_refusal_ ABSL_GUARDED_BY(refusal_mu_);
  mutable absl::Mutex mu_;
  std::map<MemberKey, Member> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<MemberKey>> barriers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
  int64_t store_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Tells every watcher that something changed (a loss, a probe, a leave,
  // the end of the job).
  void PumpWatchersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Members with an open watch; a watcher removes itself when it finishes.
  std::map<MemberKey, Watcher*> watching_ ABSL_GUARDED_BY(mu_);
  std::set<MemberKey> left_ ABSL_GUARDED_BY(mu_);
  // Members of the job's shape whose watch was ever registered.
  std::set<MemberKey> watched_ever_ ABSL_GUARDED_BY(mu_);
  std::vector<Loss> losses_ ABSL_GUARDED_BY(mu_);
  std::set<MemberKey> lost_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool job_ended_ ABSL_GUARDED_BY(mu_) = false;
  // The shutdown probe: its round (0: none yet) and who has answered it.
  int64_t probe_round_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<MemberKey> answered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradsync
