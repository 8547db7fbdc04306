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
#include "core/coordinator.h"
#include "proto/coordinator.grpc.pb.h"

namespace gradsync {

struct CoordinatorServiceOptions {
  std::string job_id;
  int num_workers = 1;
  int num_servers = 0;
  // Required from every caller when not empty (core/job_token.h).
  std::string job_token;
};

class CoordinatorService final : public proto::Coordinator::Service {
 public:
  // Sizes a request may not exceed; a key or barrier name is a short path,
  // an address a host:port. Values may be whole run summaries, up to the
  // gRPC message limit, but the store as a whole is bounded.
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxAddressBytes = 1024;
  static constexpr size_t kMaxJobIdBytes = 256;
  static constexpr int64_t kMaxStoreBytes = int64_t{1} << 30;
  static constexpr size_t kMaxStoreKeys = 1 << 20;
  static constexpr size_t kMaxBarriers = 1 << 20;
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
  grpc::Status Watch(grpc::ServerContext* context,
                     const proto::WatchRequest* request,
                     grpc::ServerWriter<proto::WatchEvent>* writer) override;
  grpc::Status Leave(grpc::ServerContext* context,
                     const proto::LeaveRequest* request,
                     proto::LeaveResponse* response) override;

  // The coordinator is going away normally: watchers are told the job has
  // ended and every blocked handler returns.
  void BeginShutdown();

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

  grpc::Status CheckCall(const grpc::ServerContext& context,
                         const proto::Sender& sender) const;
  template <typename Done, typename Describe>
  grpc::Status WaitLocked(grpc::ServerContext* context, int64_t timeout_ms,
                          Done done, Describe describe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MissingLocked(const std::set<MemberKey>& present,
                            bool everyone) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MissingMembersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordLossLocked(const MemberKey& member, const std::string& peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorServiceOptions options_;
  mutable absl::Mutex mu_;
  std::map<MemberKey, Member> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<MemberKey>> barriers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
  int64_t store_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Members with an open watch, and where it comes from.
  std::map<MemberKey, std::string> watching_ ABSL_GUARDED_BY(mu_);
  std::set<MemberKey> left_ ABSL_GUARDED_BY(mu_);
  std::vector<Loss> losses_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gradsync
