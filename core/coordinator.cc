#include "core/coordinator.h"

#include <unistd.h>

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

#define RETURN_GRPC_IF_ERROR(expr)                    \
  do {                                                \
    grpc::Status gs_grpc_status_ = (expr);            \
    if (!gs_grpc_status_.ok()) return gs_grpc_status_; \
  } while (0)

namespace gradsync {
namespace {

// Messages carry summaries of whole runs; stay well clear of gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 64 << 20;
// Blocking handlers wake up this often to notice a client that went away.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(200);

proto::Role ToProto(Role role) {
  return role == Role::kServer ? proto::ROLE_SERVER : proto::ROLE_WORKER;
}
Role FromProto(proto::Role role) {
  return role == proto::ROLE_SERVER ? Role::kServer : Role::kWorker;
}

std::string Name(Role role, int rank) {
  return absl::StrCat(RoleName(role), " ", rank);
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

const char* RoleName(Role role) {
  return role == Role::kServer ? "server" : "worker";
}

// The service keeps everything under one mutex: a job has a few dozen members
// and a handful of calls per run, so contention is not a concern, and one lock
// keeps the waits simple to reason about.
class CoordinatorServer::Service final : public proto::Coordinator::Service {
 public:
  Service(std::string job_id, int num_workers, int num_servers)
      : job_id_(std::move(job_id)),
        num_workers_(num_workers),
        num_servers_(num_servers) {}

  grpc::Status Join(grpc::ServerContext* context,
                    const proto::JoinRequest* request,
                    proto::JoinResponse* response) override {
    RETURN_GRPC_IF_ERROR(CheckSender(request->sender()));
    const Role role = FromProto(request->sender().role());
    const int rank = request->sender().rank();
    absl::MutexLock lock(&mu_);
    auto key = std::make_pair(role, rank);
    auto it = members_.find(key);
    if (it != members_.end()) {
      return grpc::Status(
          grpc::StatusCode::ALREADY_EXISTS,
          absl::StrCat(Name(role, rank), " joined twice (first from ",
                       it->second.host, " ", it->second.address, ", now from ",
                       request->host(), " ", request->address(),
                       "); two processes were given the same rank"));
    }
    members_[key] = Member{role, rank, request->address(), request->host()};
    const size_t expected = num_workers_ + num_servers_;
    RETURN_GRPC_IF_ERROR(WaitLocked(
        context, request->timeout_ms(),
        [&] { return members_.size() == expected; },
        [&] { return absl::StrCat("waiting for ", MissingMembersLocked(),
                                  " to join"); }));
    for (const auto& entry : members_) {
      proto::MemberInfo* info = response->add_members();
      info->set_role(ToProto(entry.second.role));
      info->set_rank(entry.second.rank);
      info->set_address(entry.second.address);
      info->set_host(entry.second.host);
    }
    return grpc::Status::OK;
  }

  grpc::Status Barrier(grpc::ServerContext* context,
                       const proto::BarrierRequest* request,
                       proto::BarrierResponse*) override {
    RETURN_GRPC_IF_ERROR(CheckSender(request->sender()));
    const Role role = FromProto(request->sender().role());
    if (!request->everyone() && role != Role::kWorker) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat(Name(role, request->sender().rank()),
                                       " entered workers-only barrier '",
                                       request->name(), "'"));
    }
    absl::MutexLock lock(&mu_);
    auto& arrived = barriers_[request->name()];
    arrived.insert({role, request->sender().rank()});
    const size_t expected =
        num_workers_ + (request->everyone() ? num_servers_ : 0);
    return WaitLocked(
        context, request->timeout_ms(),
        [&] { return arrived.size() >= expected; },
        [&] {
          return absl::StrCat("barrier '", request->name(), "' waiting for ",
                              MissingLocked(arrived, request->everyone()));
        });
  }

  grpc::Status Set(grpc::ServerContext*, const proto::SetRequest* request,
                   proto::SetResponse*) override {
    RETURN_GRPC_IF_ERROR(CheckSender(request->sender()));
    absl::MutexLock lock(&mu_);
    store_[request->key()] = request->value();
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* context,
                   const proto::GetRequest* request,
                   proto::GetResponse* response) override {
    RETURN_GRPC_IF_ERROR(CheckSender(request->sender()));
    absl::MutexLock lock(&mu_);
    grpc::Status status = WaitLocked(
        context, request->timeout_ms(),
        [&] { return store_.count(request->key()) > 0; },
        [&] { return absl::StrCat("waiting for key '", request->key(), "'"); });
    if (status.ok()) response->set_value(store_[request->key()]);
    return status;
  }

 private:
  grpc::Status CheckSender(const proto::Sender& sender) const {
    if (sender.job_id() != job_id_) {
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("request from job '", sender.job_id(),
                       "' refused: this coordinator serves job '", job_id_,
                       "'"));
    }
    const int limit =
        sender.role() == proto::ROLE_SERVER ? num_servers_ : num_workers_;
    if (sender.rank() < 0 || sender.rank() >= limit) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("unknown ", Name(FromProto(sender.role()), sender.rank()),
                       ": the job has ", num_workers_, " workers and ",
                       num_servers_, " servers"));
    }
    return grpc::Status::OK;
  }

  // Waits (mu_ held) until done() or the timeout; the error names what is
  // still missing. Wakes periodically to notice a cancelled client.
  template <typename Done, typename Describe>
  grpc::Status WaitLocked(grpc::ServerContext* context, int64_t timeout_ms,
                          Done done, Describe describe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
    auto condition = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done(); };
    // Other waiters may be satisfied by this call's change of state.
    while (!done()) {
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        return grpc::Status(
            grpc::StatusCode::DEADLINE_EXCEEDED,
            absl::StrCat("timed out after ", timeout_ms / 1000.0, " s ",
                         describe()));
      }
      if (context->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      mu_.AwaitWithDeadline(absl::Condition(&condition),
                            std::min(deadline, now + kCancelPoll));
    }
    return grpc::Status::OK;
  }

  std::string MissingLocked(const std::set<std::pair<Role, int>>& present,
                            bool everyone) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> missing;
    for (int r = 0; r < num_workers_; ++r) {
      if (!present.count({Role::kWorker, r})) missing.push_back(Name(Role::kWorker, r));
    }
    for (int r = 0; everyone && r < num_servers_; ++r) {
      if (!present.count({Role::kServer, r})) missing.push_back(Name(Role::kServer, r));
    }
    return absl::StrJoin(missing, ", ");
  }

  std::string MissingMembersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::set<std::pair<Role, int>> present;
    for (const auto& entry : members_) present.insert(entry.first);
    return MissingLocked(present, /*everyone=*/true);
  }

  const std::string job_id_;
  const int num_workers_;
  const int num_servers_;
  absl::Mutex mu_;
  std::map<std::pair<Role, int>, Member> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::pair<Role, int>>> barriers_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const std::string& bind_address, const std::string& job_id,
    int num_workers, int num_servers) {
  if (num_workers < 1 || num_servers < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator needs at least one worker and no negative server count; "
        "got ", num_workers, " workers, ", num_servers, " servers"));
  }
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer);
  server->service_ =
      std::make_unique<Service>(job_id, num_workers, num_servers);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(bind_address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator could not listen on ", bind_address,
        " (port in use? set MASTER_PORT to a free port)"));
  }
  GS_LOG(DEBUG) << "coordinator for job " << job_id << " on port "
                << server->port_ << " (" << num_workers << " workers, "
                << num_servers << " servers)";
  return server;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  if (server_ != nullptr) {
    // Blocked handlers return within kCancelPoll of the deadline.
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
    server_.reset();
  }
}

class CoordinatorClient::Stub {
 public:
  explicit Stub(std::shared_ptr<grpc::Channel> channel)
      : channel_(channel), stub_(proto::Coordinator::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
};

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& target, const std::string& job_id, Role role, int rank,
    absl::Duration connect_timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  auto channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() +
                                                    connect_timeout))) {
    return absl::DeadlineExceededError(absl::StrCat(
        Name(role, rank), ": no coordinator answered at ", target, " within ",
        absl::FormatDuration(connect_timeout),
        " (worker 0 hosts it on MASTER_ADDR:MASTER_PORT; is it running, and "
        "are MASTER_ADDR/MASTER_PORT the same for every process?)"));
  }
  std::unique_ptr<CoordinatorClient> client(new CoordinatorClient);
  client->stub_ = std::make_unique<Stub>(channel);
  client->target_ = target;
  client->job_id_ = job_id;
  client->role_ = role;
  client->rank_ = rank;
  return client;
}

CoordinatorClient::~CoordinatorClient() = default;

std::string CoordinatorClient::self() const { return Name(role_, rank_); }

namespace {

// The server enforces `timeout`; the RPC deadline leaves it time to say why.
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(5)));
}

template <typename Request>
void FillSender(Request& request, const std::string& job_id, Role role,
                int rank) {
  proto::Sender* sender = request.mutable_sender();
  sender->set_job_id(job_id);
  sender->set_role(ToProto(role));
  sender->set_rank(rank);
}

}  // namespace

absl::StatusOr<std::vector<Member>> CoordinatorClient::Join(
    const std::string& address, absl::Duration timeout) {
  proto::JoinRequest request;
  FillSender(request, job_id_, role_, rank_);
  request.set_address(address);
  request.set_host(Hostname());
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::JoinResponse response;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  RETURN_IF_ERROR(FromGrpc(stub_->stub_->Join(&context, request, &response),
                           absl::StrCat(self(), " joining job at ", target_)));
  std::vector<Member> members;
  for (const auto& info : response.members()) {
    members.push_back(
        Member{FromProto(info.role()), info.rank(), info.address(), info.host()});
  }
  return members;
}

absl::Status CoordinatorClient::Barrier(const std::string& name,
                                        BarrierGroup group,
                                        absl::Duration timeout) {
  proto::BarrierRequest request;
  FillSender(request, job_id_, role_, rank_);
  request.set_name(name);
  request.set_everyone(group == BarrierGroup::kEveryone);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::BarrierResponse response;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  return FromGrpc(stub_->stub_->Barrier(&context, request, &response),
                  absl::StrCat(self(), " in barrier '", name, "'"));
}

absl::Status CoordinatorClient::Set(const std::string& key,
                                    const std::string& value) {
  proto::SetRequest request;
  FillSender(request, job_id_, role_, rank_);
  request.set_key(key);
  request.set_value(value);
  proto::SetResponse response;
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(30));
  return FromGrpc(stub_->stub_->Set(&context, request, &response),
                  absl::StrCat(self(), " setting key '", key, "'"));
}

absl::StatusOr<std::string> CoordinatorClient::Get(const std::string& key,
                                                   absl::Duration timeout) {
  proto::GetRequest request;
  FillSender(request, job_id_, role_, rank_);
  request.set_key(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::GetResponse response;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  RETURN_IF_ERROR(FromGrpc(stub_->stub_->Get(&context, request, &response),
                           absl::StrCat(self(), " getting key '", key, "'")));
  return response.value();
}

}  // namespace gradsync
