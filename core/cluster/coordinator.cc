#include "core/cluster/coordinator.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/coordinator_service.h"
#include "core/cluster/grpc_job_token.h"
#include "core/cluster/job_id.h"
#include "core/cluster/job_token.h"
#include "core/cluster/listen_port.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

namespace gradsync {
namespace {

// Messages carry summaries of whole runs; stay well clear of gRPC's 4 MiB
// default.
constexpr int kMaxMessageBytes = 64 << 20;
// A host that vanishes without closing its connections (power loss, cable,
// a partition) is noticed by keepalive pings: a ping after 3 s without
// traffic, answered within 7 s, so a loss is known within about 10 s (a ping
// is a few dozen bytes; the ack comes from gRPC's own threads, not the busy
// trainer). The answer's deadline is what a live process must never miss:
// 4 s was missed under ThreadSanitizer on a loaded 2-core machine (the
// watchdog closed a live member's connection and failed its barrier), so it
// is 7 s, which still ends a partitioned job well within 15 s.
constexpr int kKeepaliveTimeMs = 3000;
constexpr int kKeepaliveTimeoutMs = 7000;
// How long a coordinator that is shutting down waits for each member still
// watching to answer its probe (see CoordinatorService::BeginShutdown). A
// live member answers within milliseconds, but a starved one gets the same
// allowance as a keepalive ping; one that does not answer is lost.
constexpr absl::Duration kShutdownProbe =
    absl::Milliseconds(kKeepaliveTimeoutMs);
// Leave is best effort on the way out; a dead coordinator must not delay us.
constexpr absl::Duration kLeaveTimeout = absl::Seconds(2);
// How long worker 0 keeps the coordinator of a failed job up for members
// that have not connected yet (started a moment late by mpirun or srun), so
// that they learn why the job failed rather than wait out --timeout_s.
constexpr absl::Duration kLateMembers = absl::Seconds(5);

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
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  // Some of gRPC's own refusals carry no message; the code then says it.
  return absl::Status(code, absl::StrCat(what, ": ",
                                         status.error_message().empty()
                                             ? absl::StatusCodeToString(code)
                                             : status.error_message()));
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const std::string& bind_address, const std::string& job_id, int num_workers,
    int num_servers, const CoordinatorSecurity& security,
    const std::string& shape_source, const WorkerSettings& worker_settings) {
  if (num_workers < 1 || num_servers < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator needs at least one worker and no negative server count; "
        "got ",
        num_workers, " workers, ", num_servers, " servers"));
  }
  // No launcher named the job: a fresh id, so that two jobs never share one;
  // the members learn it when they connect.
  const std::string id = job_id.empty() ? NewJobId() : job_id;
  if (id.size() > CoordinatorService::kMaxJobIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job id has ", id.size(), " bytes; at most ",
                     CoordinatorService::kMaxJobIdBytes));
  }
  if (!security.job_token.empty()) {
    RETURN_IF_ERROR(Annotate(ValidateJobToken(security.job_token),
                             "the coordinator's job token"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentialsFor(security.tls));
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer);
  server->service_ = std::make_unique<CoordinatorService>([&] {
    CoordinatorServiceOptions options;
    options.job_id = id;
    options.num_workers = num_workers;
    options.num_servers = num_servers;
    options.shape_source = shape_source;
    options.worker_settings = worker_settings;
    options.job_token = security.job_token;
    return options;
  }());
  server->job_id_ = id;
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second job's coordinator would then
  // bind the same port and the kernel would spread members over both.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(bind_address, credentials, &server->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Ping idle members too, and let them ping us as often as they do.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      kKeepaliveTimeMs / 2);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    const absl::Status free = CheckPortFree(bind_address);
    return absl::UnavailableError(absl::StrCat(
        "coordinator could not listen on ", bind_address, ": ",
        free.ok() ? "gRPC refused the address (set MASTER_ADDR/MASTER_PORT "
                    "to an address of this host and a free port)"
                  : free.message()));
  }
  const bool loopback = bind_address.rfind("127.", 0) == 0 ||
                        bind_address.rfind("localhost:", 0) == 0 ||
                        bind_address.rfind("[::1]:", 0) == 0;
  if (security.job_token.empty() && !loopback) {
    GS_LOG(WARNING) << "coordinator of job " << id << " listens on "
                    << bind_address
                    << " without a job token: anyone who can reach it may "
                       "join (set GRADSYNC_JOB_TOKEN or --job_token_file)";
  }
  GS_LOG(DEBUG) << "coordinator for job " << id << " on port "
                << server->port_ << " (" << num_workers << " workers, "
                << num_servers << " servers, " << security.tls.Describe()
                << (security.job_token.empty() ? ", no token" : ", token")
                << ")";
  return server;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  if (server_ != nullptr) {
    // Members still running get a moment to finish and leave: if one of
    // them was lost instead, the others must hear of it as a loss, not as
    // the end of the job (see CoordinatorService::BeginShutdown).
    service_->AwaitLateMembers(kLateMembers);
    service_->BeginShutdown();
    service_->AwaitProbeAnswers(kShutdownProbe);
    service_->EndJob();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
    server_.reset();
  }
}

std::vector<std::string> CoordinatorServer::LostMembers() const {
  return service_->LostMembers();
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
    absl::Duration connect_timeout, const CoordinatorClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel = grpc::CreateCustomChannel(
      target, ChannelCredentialsFor(options.security.tls), args);
  if (!channel->WaitForConnected(
          absl::ToChronoTime(absl::Now() + connect_timeout))) {
    return absl::DeadlineExceededError(absl::StrCat(
        Name(role, rank), ": no coordinator answered at ", target, " within ",
        absl::FormatDuration(connect_timeout),
        " (worker 0 hosts it on MASTER_ADDR:MASTER_PORT; is it running, and "
        "are MASTER_ADDR/MASTER_PORT the same for every process?",
        options.security.tls.enabled()
            ? " With TLS, does the coordinator's certificate name this "
              "address, and do both sides use the same --tls_ca?"
            : "",
        ")"));
  }
  // Worker 0's coordinator warns for itself when it listens beyond this
  // host; every other process of a tokenless job across hosts says so too,
  // so that each log shows it (a warning, not a refusal: a private cluster
  // network may be trusted; docs/reliability.md says when it is not).
  const bool loopback = absl::StartsWith(target, "127.") ||
                        absl::StartsWith(target, "localhost:") ||
                        absl::StartsWith(target, "[::1]:");
  if (options.security.job_token.empty() && !loopback &&
      !(role == Role::kWorker && rank == 0)) {
    GS_LOG(WARNING) << Name(role, rank) << ": no job token (--job_token_file "
                    << "or GRADSYNC_JOB_TOKEN) in a job across hosts: any "
                       "process that reaches "
                    << target
                    << " may join it or pose as one of its members; give "
                       "every process the same token";
  }
  std::unique_ptr<CoordinatorClient> client(new CoordinatorClient);
  client->stub_ = std::make_unique<Stub>(channel);
  client->target_ = target;
  client->job_id_ = job_id;
  client->role_ = role;
  client->rank_ = rank;
  client->options_ = options;
  if (client->job_id_.empty()) {
    // No launcher named the job: worker 0's coordinator did.
    ASSIGN_OR_RETURN(client->job_id_,
                     client->Get(CoordinatorService::kJobIdKey,
                                 connect_timeout));
  }
  return client;
}

CoordinatorClient::~CoordinatorClient() {
  Leave();
  {
    absl::MutexLock lock(&mu_);
    leaving_ = true;  // also when Leave had nothing to do
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
}

std::string CoordinatorClient::self() const { return Name(role_, rank_); }

template <typename Request>
void CoordinatorClient::FillSender(Request& request) const {
  proto::Sender* sender = request.mutable_sender();
  sender->set_job_id(job_id_);
  sender->set_role(ToProto(role_));
  sender->set_rank(rank_);
}

void CoordinatorClient::Prepare(grpc::ClientContext& context) const {
  AttachJobToken(context, options_.security.job_token);
}

// The server enforces `timeout`; the RPC deadline leaves it time to say why.
//
// These calls also wait for a connection: after the keepalive watchdog has
// cut a connection (or right after Connect) the channel may sit in
// TRANSIENT_FAILURE for a moment, and without wait_for_ready gRPC would fail
// the call at once, with the error of an old connection attempt, although
// the coordinator is up. A member that watches the job hears of a
// coordinator that is really gone from the watch (OnLoss) long before the
// deadline; WaitedCallStatus says when a deadline passed with no connection.
void CoordinatorClient::PrepareWaitingCall(grpc::ClientContext& context,
                                           absl::Duration timeout) const {
  Prepare(context);
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(5)));
  context.set_wait_for_ready(true);
}

absl::Status CoordinatorClient::WaitedCallStatus(const grpc::Status& status,
                                                 absl::string_view what) const {
  absl::Status result = FromGrpc(status, what);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      stub_->channel_->GetState(/*try_to_connect=*/false) !=
          GRPC_CHANNEL_READY) {
    result = absl::Status(
        result.code(),
        absl::StrCat(result.message(), " (no connection to the coordinator at ",
                     target_,
                     ": worker 0, which hosts it, has stopped or "
                     "cannot be reached)"));
  }
  return result;
}

absl::Status CoordinatorClient::StartWatch(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (watch_started_) return absl::OkStatus();
  watch_started_ = true;
  watch_context_ = std::make_unique<grpc::ClientContext>();
  Prepare(*watch_context_);
  // The coordinator may still be starting (worker 0 may come up after us).
  watch_context_->set_wait_for_ready(true);
  watch_thread_ = std::thread([this] { WatchLoop(); });
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return watch_registered_ || watch_over_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) {
    watch_context_->TryCancel();
    return absl::DeadlineExceededError(
        absl::StrCat(self(), ": the coordinator at ", target_,
                     " did not register its "
                     "watch within ",
                     absl::FormatDuration(timeout)));
  }
  if (!watch_registered_) return watch_error_;
  return absl::OkStatus();
}

void CoordinatorClient::WatchLoop() {
  proto::WatchRequest request;
  FillSender(request);
  grpc::ClientContext* context;
  {
    absl::MutexLock lock(&mu_);
    context = watch_context_.get();
  }
  std::unique_ptr<grpc::ClientReader<proto::WatchEvent>> reader =
      stub_->stub_->Watch(context, request);
  proto::WatchEvent event;
  while (reader->Read(&event)) {
    if (event.watching()) {
      absl::MutexLock lock(&mu_);
      watch_registered_ = true;
    } else if (event.job_ended()) {
      bool still_in = false;
      {
        absl::MutexLock lock(&mu_);
        job_ended_ = true;
        still_in = !leaving_;
      }
      if (still_in && options_.on_job_ended) options_.on_job_ended();
    } else if (event.probe() > 0) {
      Answer(event.probe());
    } else if (event.has_lost()) {
      const proto::MemberInfo& lost = event.lost();
      std::string where;
      if (!lost.address().empty() || !lost.host().empty()) {
        where = absl::StrCat(" (", lost.address(),
                             lost.host().empty() ? "" : " on host ",
                             lost.host(), ")");
      }
      OnLoss(absl::UnavailableError(absl::StrCat(
          "the job lost ", Name(FromProto(lost.role()), lost.rank()), where,
          ": ", event.reason())));
    }
  }
  const grpc::Status status = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    watch_over_ = true;
    if (!watch_registered_) {
      watch_error_ = FromGrpc(
          status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                     "watch ended before it was registered")
                      : status,
          absl::StrCat(self(), " watching job ", job_id_, " at ", target_));
      return;
    }
    if (leaving_ || job_ended_) return;
  }
  OnLoss(absl::UnavailableError(absl::StrCat(
      "the job lost its coordinator, hosted by worker 0 at ", target_,
      ": the connection broke (", status.error_message(),
      "): worker 0 was killed or crashed, or its host became unreachable")));
}

void CoordinatorClient::OnLoss(const absl::Status& loss) {
  {
    absl::MutexLock listeners_lock(&listeners_mu_);
    {
      absl::MutexLock lock(&mu_);
      // The first loss is the cause; later ones follow from it.
      if (!lost_.ok()) return;
      lost_ = loss;
      has_lost_.store(true, std::memory_order_release);
    }
    GS_LOG(ERROR) << self() << ": " << loss.message();
    for (auto& [id, listener] : listeners_) listener(loss);
  }
  // The process's own error handling usually ends it first, with this cause
  // in its message (ExplainFailure, the listeners); the exit only catches a
  // process that would otherwise wait out a timeout.
  mu_.Lock();
  const bool stays =
      !options_.exit_when_member_lost ||
      mu_.AwaitWithTimeout(absl::Condition(&leaving_), options_.grace);
  mu_.Unlock();
  if (stays) return;
  GS_LOG(ERROR) << self() << ": ending this process (exit code 1) because "
                << loss.message();
  // This process goes because of another's loss, so it is not lost itself.
  Leave();
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(1);
}

void CoordinatorClient::Leave(const absl::Status& outcome) {
  {
    absl::MutexLock lock(&mu_);
    // Only a member that watches can be counted lost, so only it leaves.
    if (!watch_registered_ || leaving_ || watch_over_) return;
    // From here on, the end of the watch stream is no loss.
    leaving_ = true;
  }
  proto::LeaveRequest request;
  FillSender(request);
  if (!outcome.ok()) {
    // Bounded: the coordinator refuses longer reasons.
    request.set_error(std::string(outcome.message().substr(0, 8000)));
  }
  proto::LeaveResponse response;
  grpc::ClientContext context;
  Prepare(context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + kLeaveTimeout));
  const grpc::Status status = stub_->stub_->Leave(&context, request, &response);
  if (!status.ok()) {
    GS_LOG(DEBUG) << self() << ": leaving job " << job_id_ << ": "
                  << status.error_message();
  }
}

void CoordinatorClient::Answer(int64_t round) {
  proto::AliveRequest request;
  FillSender(request);
  request.set_round(round);
  proto::AliveResponse response;
  grpc::ClientContext context;
  Prepare(context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + kLeaveTimeout));
  const grpc::Status status = stub_->stub_->Alive(&context, request, &response);
  if (!status.ok()) {
    GS_LOG(DEBUG) << self() << ": answering the coordinator's probe: "
                  << status.error_message();
  }
}

absl::Status CoordinatorClient::lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

int CoordinatorClient::AddLossListener(
    std::function<void(const absl::Status&)> listener) {
  absl::MutexLock listeners_lock(&listeners_mu_);
  const int id = next_listener_++;
  absl::Status lost_already;
  {
    absl::MutexLock lock(&mu_);
    lost_already = lost_;
  }
  // OnLoss holds listeners_mu_ from setting lost_ to the last call, so a
  // listener is either called here or there, never both.
  if (!lost_already.ok()) {
    listener(lost_already);
  } else {
    listeners_.emplace(id, std::move(listener));
  }
  return id;
}

void CoordinatorClient::RemoveLossListener(int id) {
  absl::MutexLock listeners_lock(&listeners_mu_);
  listeners_.erase(id);
}

absl::Status CoordinatorClient::ExplainFailure(const absl::Status& symptom,
                                               absl::Duration wait) const {
  if (symptom.ok()) return symptom;
  absl::MutexLock lock(&mu_);
  if (!watch_registered_) return symptom;
  // A watch that is over without the job having ended or this member
  // leaving is a loss about to be reported (WatchLoop): wait for it.
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !lost_.ok() || leaving_ || (watch_over_ && job_ended_);
  };
  mu_.AwaitWithTimeout(absl::Condition(&settled), wait);
  // A symptom a loss listener made already names the cause.
  if (lost_.ok() || absl::StrContains(symptom.message(), lost_.message()))
    return symptom;
  return absl::Status(symptom.code(), absl::StrCat(lost_.message(), "; so ",
                                                   symptom.message()));
}

absl::StatusOr<std::vector<Member>> CoordinatorClient::Join(
    const std::string& address, absl::Duration timeout) {
  // Watch first: a member that dies while the others are still joining is
  // lost like any other, and their Join fails naming it.
  RETURN_IF_ERROR(StartWatch(timeout));
  proto::JoinRequest request;
  FillSender(request);
  request.set_address(address);
  request.set_host(Hostname());
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  if (options_.num_workers >= 1) {
    request.set_states_shape(true);
    request.set_num_workers(options_.num_workers);
    request.set_num_servers(options_.num_servers);
    request.set_shape_source(options_.shape_source);
  }
  for (const auto& [name, value] : options_.settings.values) {
    proto::Setting* setting = request.add_settings();
    setting->set_name(name);
    setting->set_value(value);
  }
  proto::JoinResponse response;
  grpc::ClientContext context;
  PrepareWaitingCall(context, timeout);
  const absl::Status joined =
      WaitedCallStatus(stub_->stub_->Join(&context, request, &response),
                       absl::StrCat(self(), " joining job at ", target_));
  // A closed connection is the symptom; the watch says what happened. A
  // refusal of this member (another shape, other settings) is the cause
  // itself, already naming both sides.
  if (absl::IsFailedPrecondition(joined)) return joined;
  if (!joined.ok()) return ExplainFailure(joined, absl::Seconds(2));
  std::vector<Member> members;
  for (const auto& info : response.members()) {
    members.push_back(Member{FromProto(info.role()), info.rank(),
                             info.address(), info.host()});
  }
  return members;
}

absl::Status CoordinatorClient::Barrier(const std::string& name,
                                        BarrierGroup group,
                                        absl::Duration timeout) {
  proto::BarrierRequest request;
  FillSender(request);
  request.set_name(name);
  request.set_everyone(group == BarrierGroup::kEveryone);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::BarrierResponse response;
  grpc::ClientContext context;
  PrepareWaitingCall(context, timeout);
  return WaitedCallStatus(stub_->stub_->Barrier(&context, request, &response),
                          absl::StrCat(self(), " in barrier '", name, "'"));
}

absl::Status CoordinatorClient::Set(const std::string& key,
                                    const std::string& value) {
  proto::SetRequest request;
  FillSender(request);
  request.set_key(key);
  request.set_value(value);
  proto::SetResponse response;
  grpc::ClientContext context;
  PrepareWaitingCall(context, absl::Seconds(30));
  return WaitedCallStatus(stub_->stub_->Set(&context, request, &response),
                          absl::StrCat(self(), " setting key '", key, "'"));
}

absl::StatusOr<std::string> CoordinatorClient::Get(const std::string& key,
                                                   absl::Duration timeout) {
  proto::GetRequest request;
  FillSender(request);
  request.set_key(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::GetResponse response;
  grpc::ClientContext context;
  PrepareWaitingCall(context, timeout);
  RETURN_IF_ERROR(
      WaitedCallStatus(stub_->stub_->Get(&context, request, &response),
                       absl::StrCat(self(), " getting key '", key, "'")));
  return response.value();
}

}  // namespace gradsync
