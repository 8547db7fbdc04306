#include "core/cluster/coordinator_service.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/cluster/grpc_job_token.h"

#define RETURN_GRPC_IF_ERROR(expr)                     \
  do {                                                 \
    grpc::Status gs_grpc_status_ = (expr);             \
    if (!gs_grpc_status_.ok()) return gs_grpc_status_; \
  } while (0)

namespace gradsync {
namespace {

// Blocking handlers wake up this often to notice a client that went away:
// the sync API has no cancellation callback.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(200);

std::string Name(Role role, int rank) {
  return absl::StrCat(RoleName(role), " ", rank);
}

// Text from a request, made safe to put in an error or a log line: escaped,
// and cut short when a hostile peer sends megabytes.
std::string Shown(absl::string_view text, size_t shown = 64) {
  if (text.size() <= shown) return absl::CHexEscape(text);
  return absl::StrCat(absl::CHexEscape(text.substr(0, shown)), "...(",
                      text.size(), " bytes)");
}

// A setting's name or value in an error: escaped, and cut at 128 characters
// of the escaped text, so that a real flag's value is shown whole and a
// hostile one cannot blow up the message (4 times its bytes when escaped).
std::string ShownSetting(absl::string_view text) {
  constexpr size_t kShown = 128;
  const std::string escaped = absl::CHexEscape(text);
  if (escaped.size() <= kShown) return escaped;
  return absl::StrCat(escaped.substr(0, kShown), "...(", text.size(),
                      " bytes)");
}

grpc::Status TooLong(absl::string_view what, size_t size, size_t limit) {
  return grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrCat(what, " has ", size,
                   " bytes; the coordinator accepts at most ", limit));
}

}  // namespace

std::string CoordinatorService::Loss::Describe() const {
  std::string where;
  if (!address.empty() || !host.empty()) {
    where = absl::StrCat(" (", address.empty() ? "" : address,
                         !address.empty() && !host.empty() ? " on " : "",
                         host.empty() ? "" : absl::StrCat("host ", host), ")");
  }
  return absl::StrCat(Name(member.first, member.second), where, ": ", reason);
}

CoordinatorService::CoordinatorService(CoordinatorServiceOptions options)
    : options_(std::move(options)) {}

grpc::Status CoordinatorService::CheckCaller(
    const grpc::ServerContextBase& context, const proto::Sender& sender) const {
  if (grpc::Status token = CheckJobToken(context, options_.job_token,
                                         "coordinator of job " + options_.job_id);
      !token.ok()) {
    // Kept for the timeout of whoever waits on the refused process: "timed
    // out waiting for worker 1" alone would hide why it never joined.
    absl::MutexLock lock(&refusal_mu_);
    last_refusal_ = token.error_message();
    return token;
  }
  // An empty id is a member that has not learnt the job's id yet (no
  // launcher gave one): it may ask, and the token, if any, still applies.
  if (!sender.job_id().empty() && sender.job_id() != options_.job_id) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("request from job '", Shown(sender.job_id()),
                     "' refused: this coordinator serves job '",
                     options_.job_id, "'"));
  }
  return grpc::Status::OK;
}

std::string CoordinatorService::ShapeLocked() const {
  return options_.shape_source.empty()
             ? absl::StrCat(options_.num_workers, " workers and ",
                            options_.num_servers, " servers")
             : options_.shape_source;
}

std::string CoordinatorService::SettingsDifference(
    const proto::JoinRequest& request, std::string* name) const {
  const std::map<std::string, std::string>& ours =
      options_.worker_settings.values;
  if (ours.empty() || request.settings().empty()) return "";
  std::map<std::string, std::string> theirs;
  for (const proto::Setting& setting : request.settings()) {
    theirs[setting.name()] = setting.value();
  }
  // Both sorted by name: the first difference is the same whichever side
  // is walked, and the same on every run.
  auto mine = ours.begin();
  auto other = theirs.begin();
  while (mine != ours.end() || other != theirs.end()) {
    if (other == theirs.end() ||
        (mine != ours.end() && mine->first < other->first)) {
      *name = mine->first;
      return absl::StrCat("it does not state ", ShownSetting(mine->first),
                          ", which worker 0 sets to ",
                          ShownSetting(mine->second),
                          " (another version of gradsync?)");
    }
    if (mine == ours.end() || other->first < mine->first) {
      *name = other->first;
      return absl::StrCat("its ", ShownSetting(other->first), "=",
                          ShownSetting(other->second),
                          " is unknown to worker 0 (another version of "
                          "gradsync?)");
    }
    if (mine->second != other->second) {
      *name = mine->first;
      return absl::StrCat(
          "its ", ShownSetting(other->first), "=", ShownSetting(other->second),
          " differs from worker 0's ", ShownSetting(mine->first), "=",
          ShownSetting(mine->second));
    }
    ++mine;
    ++other;
  }
  return "";
}

std::string CoordinatorService::ServerSettingsDifference(
    const proto::JoinRequest& request, std::string* name) const {
  const std::map<std::string, std::string>& ours =
      options_.worker_settings.values;
  if (ours.empty()) return "";
  // By name, so that the first difference is the same on every run.
  std::map<std::string, std::string> theirs;
  for (const proto::Setting& setting : request.settings()) {
    theirs[setting.name()] = setting.value();
  }
  for (const auto& [setting, value] : theirs) {
    const auto mine = ours.find(setting);
    if (mine == ours.end()) {
      *name = setting;
      return absl::StrCat("its ", ShownSetting(setting), "=",
                          ShownSetting(value),
                          " is unknown to worker 0 (another version of "
                          "gradsync?)");
    }
    if (mine->second != value) {
      *name = setting;
      return absl::StrCat("its ", ShownSetting(setting), "=",
                          ShownSetting(value), " differs from worker 0's ",
                          ShownSetting(setting), "=",
                          ShownSetting(mine->second));
    }
  }
  return "";
}

std::string CoordinatorService::WithAdvice(
    const std::string& difference, const std::string& setting,
    const std::string& flag_advice) const {
  return absl::StrCat(difference, "; ",
                      IsDerivedSetting(setting)
                          ? options_.worker_settings.derived_advice
                          : flag_advice);
}

grpc::Status CoordinatorService::CheckCall(
    const grpc::ServerContextBase& context, const proto::Sender& sender) const {
  RETURN_GRPC_IF_ERROR(CheckCaller(context, sender));
  int limit = 0;
  switch (sender.role()) {
    case proto::ROLE_WORKER:
      limit = options_.num_workers;
      break;
    case proto::ROLE_SERVER:
      limit = options_.num_servers;
      break;
    default:
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("unknown role ", static_cast<int>(sender.role()),
                       " (a member is a worker or a server)"));
  }
  if (sender.rank() < 0 || sender.rank() >= limit) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("unknown ",
                     Name(sender.role() == proto::ROLE_SERVER ? Role::kServer
                                                              : Role::kWorker,
                          sender.rank()),
                     ": the job has ", options_.num_workers, " workers and ",
                     options_.num_servers,
                     " servers (as worker 0, which hosts "
                     "the coordinator, sees it: ",
                     ShapeLocked(), ")"));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CheckMember(
    const grpc::ServerContextBase& context, const proto::Sender& sender,
    const std::string& peer) {
  RETURN_GRPC_IF_ERROR(CheckCaller(context, sender));
  grpc::Status status = CheckCall(context, sender);
  if (status.ok() || (sender.role() != proto::ROLE_WORKER &&
                      sender.role() != proto::ROLE_SERVER)) {
    return status;
  }
  // One of this job's processes with a rank the job does not have: it was
  // given another idea of the job's shape, and the job cannot start.
  const std::string reason = absl::StrCat(
      "it was refused: ", status.error_message(),
      "; every process must be given the same number of workers and servers");
  absl::MutexLock lock(&mu_);
  RecordLossLocked(
      {sender.role() == proto::ROLE_SERVER ? Role::kServer : Role::kWorker,
       sender.rank()},
      peer, "", reason);
  return grpc::Status(status.error_code(), reason);
}

namespace {

Role RoleOf(const proto::Sender& sender) {
  return sender.role() == proto::ROLE_SERVER ? Role::kServer : Role::kWorker;
}

}  // namespace

grpc::Status CoordinatorService::Join(grpc::ServerContext* context,
                                      const proto::JoinRequest* request,
                                      proto::JoinResponse* response) {
  RETURN_GRPC_IF_ERROR(
      CheckMember(*context, request->sender(), request->address()));
  if (request->address().size() > kMaxAddressBytes) {
    return TooLong("the joining member's address", request->address().size(),
                   kMaxAddressBytes);
  }
  if (request->host().size() > kMaxAddressBytes) {
    return TooLong("the joining member's host name", request->host().size(),
                   kMaxAddressBytes);
  }
  if (request->settings_size() > kMaxSettings) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("the joining member states ", request->settings_size(),
                     " settings; the coordinator accepts at most ",
                     kMaxSettings));
  }
  std::set<std::string> named;
  for (const proto::Setting& setting : request->settings()) {
    if (setting.name().size() + setting.value().size() > kMaxSettingBytes) {
      return TooLong(absl::StrCat("setting ", Shown(setting.name())),
                     setting.name().size() + setting.value().size(),
                     kMaxSettingBytes);
    }
    if (!named.insert(setting.name()).second) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("the joining member states setting ",
                                       Shown(setting.name()), " twice"));
    }
  }
  const Role role = RoleOf(request->sender());
  const int rank = request->sender().rank();
  absl::MutexLock lock(&mu_);
  const MemberKey key(role, rank);
  if (request->states_shape() &&
      (request->num_workers() != options_.num_workers ||
       request->num_servers() != options_.num_servers)) {
    // Both sides named, so whoever reads it sees which variables to fix.
    const std::string reason = absl::StrCat(
        "it was refused at Join: it sees a job of ", request->num_workers(),
        " workers and ", request->num_servers(), " servers (",
        Shown(request->shape_source(), 512),
        "), but worker 0, which hosts the coordinator, sees ",
        options_.num_workers, " workers and ", options_.num_servers,
        " servers (", ShapeLocked(),
        "); give every process the same number of workers and servers");
    RecordLossLocked(key, request->address(), request->host(), reason);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, reason);
  }
  // A worker whose settings differ from worker 0's would train another
  // model beside it (and end "successfully" with other parameters): the job
  // fails now, as for another shape, naming both and the setting.
  std::string setting;
  if (role == Role::kWorker) {
    if (const std::string difference = SettingsDifference(*request, &setting);
        !difference.empty()) {
      const std::string why =
          WithAdvice(difference, setting, options_.worker_settings.advice);
      const std::string reason = absl::StrCat("it was refused at Join: ", why);
      RecordLossLocked(key, request->address(), request->host(), reason);
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat(Name(role, rank), " was refused at Join: ", why));
    }
  }
  // A parameter server given other --ps_* flags than the workers would
  // take another rank among the servers or size its streams apart from
  // them: refused the same way, naming it, worker 0 and the flag.
  if (role == Role::kServer) {
    if (const std::string difference =
            ServerSettingsDifference(*request, &setting);
        !difference.empty()) {
      const std::string why = WithAdvice(
          difference, setting,
          "give every parameter server the --ps_* flags the workers have");
      const std::string reason = absl::StrCat("it was refused at Join: ", why);
      RecordLossLocked(key, request->address(), request->host(), reason);
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat(Name(role, rank), " was refused at Join: ", why));
    }
  }
  auto it = members_.find(key);
  if (it != members_.end()) {
    return grpc::Status(
        grpc::StatusCode::ALREADY_EXISTS,
        absl::StrCat(Name(role, rank), " joined twice (first from ",
                     Shown(it->second.host), " ", Shown(it->second.address),
                     ", now from ", Shown(request->host()), " ",
                     Shown(request->address()),
                     "); two processes were given the same rank"));
  }
  members_[key] = Member{role, rank, request->address(), request->host()};
  const size_t expected = options_.num_workers + options_.num_servers;
  RETURN_GRPC_IF_ERROR(WaitLocked(
      context, request->timeout_ms(),
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return members_.size() == expected;
      },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return absl::StrCat("waiting for ", MissingMembersLocked(), " to join");
      }));
  for (const auto& entry : members_) {
    proto::MemberInfo* info = response->add_members();
    info->set_role(entry.second.role == Role::kServer ? proto::ROLE_SERVER
                                                      : proto::ROLE_WORKER);
    info->set_rank(entry.second.rank);
    info->set_address(entry.second.address);
    info->set_host(entry.second.host);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Barrier(grpc::ServerContext* context,
                                         const proto::BarrierRequest* request,
                                         proto::BarrierResponse*) {
  RETURN_GRPC_IF_ERROR(CheckCall(*context, request->sender()));
  const Role role = RoleOf(request->sender());
  if (request->name().size() > kMaxKeyBytes) {
    return TooLong("the barrier's name", request->name().size(), kMaxKeyBytes);
  }
  if (!request->everyone() && role != Role::kWorker) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(Name(role, request->sender().rank()),
                                     " entered workers-only barrier '",
                                     Shown(request->name()), "'"));
  }
  absl::MutexLock lock(&mu_);
  if (barriers_.size() >= options_.max_barriers &&
      !barriers_.count(request->name())) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the job already used ", options_.max_barriers,
                     " barriers; refusing barrier '", Shown(request->name()),
                     "'"));
  }
  auto& arrived = barriers_[request->name()];
  arrived.insert({role, request->sender().rank()});
  const size_t expected =
      options_.num_workers + (request->everyone() ? options_.num_servers : 0);
  return WaitLocked(
      context, request->timeout_ms(),
      [&] { return arrived.size() >= expected; },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return absl::StrCat("barrier '", Shown(request->name()),
                            "' waiting for ",
                            MissingLocked(arrived, request->everyone()));
      });
}

grpc::Status CoordinatorService::Set(grpc::ServerContext* context,
                                     const proto::SetRequest* request,
                                     proto::SetResponse*) {
  RETURN_GRPC_IF_ERROR(CheckCall(*context, request->sender()));
  if (request->key().size() > kMaxKeyBytes) {
    return TooLong("the key", request->key().size(), kMaxKeyBytes);
  }
  absl::MutexLock lock(&mu_);
  auto it = store_.find(request->key());
  const int64_t old_bytes =
      it == store_.end()
          ? 0
          : static_cast<int64_t>(it->first.size() + it->second.size());
  const int64_t new_bytes =
      static_cast<int64_t>(request->key().size() + request->value().size());
  if (it == store_.end() && store_.size() >= options_.max_store_keys) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the store already holds ", options_.max_store_keys,
                     " keys; refusing key '", Shown(request->key()), "'"));
  }
  if (store_bytes_ - old_bytes + new_bytes > options_.max_store_bytes) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("setting key '", Shown(request->key()),
                                     "' (", request->value().size(),
                                     " bytes) would take the store "
                                     "past its ",
                                     options_.max_store_bytes, " bytes"));
  }
  store_bytes_ += new_bytes - old_bytes;
  store_[request->key()] = request->value();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Get(grpc::ServerContext* context,
                                     const proto::GetRequest* request,
                                     proto::GetResponse* response) {
  RETURN_GRPC_IF_ERROR(CheckCall(*context, request->sender()));
  if (request->key().size() > kMaxKeyBytes) {
    return TooLong("the key", request->key().size(), kMaxKeyBytes);
  }
  // Members started without a job id learn it here (CoordinatorClient);
  // it is no entry of the store, which holds only what members set.
  if (request->key() == kJobIdKey) {
    response->set_value(options_.job_id);
    return grpc::Status::OK;
  }
  absl::MutexLock lock(&mu_);
  grpc::Status status = WaitLocked(
      context, request->timeout_ms(),
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return store_.count(request->key()) > 0;
      },
      [&] {
        return absl::StrCat("waiting for key '", Shown(request->key()), "'");
      });
  if (status.ok()) response->set_value(store_[request->key()]);
  return status;
}

// One member's watch. Its state is guarded by the service's mutex; gRPC
// never runs a reaction inline from StartWrite or Finish on the server, so
// they may be called with the mutex held. At most one write is in flight;
// the next event is chosen when it completes.
class CoordinatorService::Watcher final
    : public grpc::ServerWriteReactor<proto::WatchEvent> {
 public:
  Watcher(CoordinatorService* service, MemberKey key, std::string peer)
      : service_(service), key_(key), peer_(std::move(peer)) {}

  // Writes the next event if none is in flight, or finishes.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (writing_ || finished_) return;
    event_.Clear();
    if (!registered_) {
      registered_ = true;
      event_.set_watching(true);
    } else if (next_loss_ < service_->losses_.size()) {
      const Loss& loss = service_->losses_[next_loss_++];
      proto::MemberInfo* lost = event_.mutable_lost();
      lost->set_role(loss.member.first == Role::kServer ? proto::ROLE_SERVER
                                                        : proto::ROLE_WORKER);
      lost->set_rank(loss.member.second);
      lost->set_address(loss.address);
      lost->set_host(loss.host);
      event_.set_reason(loss.reason);
    } else if (service_->left_.count(key_)) {
      // It said goodbye; its client closes the stream anyway.
      FinishLocked(grpc::Status::OK);
      return;
    } else if (probed_ < service_->probe_round_) {
      probed_ = service_->probe_round_;
      event_.set_probe(probed_);
    } else if (service_->job_ended_) {
      if (ended_sent_) {
        FinishLocked(grpc::Status::OK);
        return;
      }
      ended_sent_ = true;
      event_.set_job_ended(true);
    } else {
      return;  // nothing new
    }
    writing_ = true;
    StartWrite(&event_);
  }

  // For the service's own calls, made with its mutex held: clang cannot see
  // that service_->mu_ is the caller's mu_, so this says so (and checks it).
  void AssertServiceLocked() const ABSL_ASSERT_EXCLUSIVE_LOCK(service_->mu_) {
    service_->mu_.AssertHeld();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&service_->mu_);
    writing_ = false;
    if (finished_) {
      // Finish waited for this write.
      if (finish_pending_) {
        finish_pending_ = false;
        Finish(finish_status_);
      }
      return;
    }
    if (!ok) {
      BrokenLocked();
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&service_->mu_);
    BrokenLocked();
  }

  void OnDone() override { delete this; }

  // Finishes a watch that is still open, with `status` (after the write in
  // flight, if any). From then on it is no longer among the watchers.
  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finished_) return;
    finished_ = true;
    auto it = service_->watching_.find(key_);
    if (it != service_->watching_.end() && it->second == this) {
      service_->watching_.erase(it);
    }
    if (writing_) {
      finish_pending_ = true;
      finish_status_ = status;
      return;
    }
    Finish(status);
  }

 private:
  // The stream broke: the member is gone, unless it said goodbye first or
  // the job is over.
  void BrokenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finished_) return;
    const bool lost = !service_->left_.count(key_) && !service_->job_ended_;
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch ended"));
    if (lost) service_->RecordLossLocked(key_, BrokenWatch(peer_));
  }

  CoordinatorService* const service_;
  const MemberKey key_;
  const std::string peer_;
  proto::WatchEvent event_;
  bool registered_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool finish_pending_ = false;
  grpc::Status finish_status_;
  bool ended_sent_ = false;
  size_t next_loss_ = 0;  // a late watcher hears of earlier losses too
  int64_t probed_ = 0;    // the last probe round sent
};

grpc::ServerWriteReactor<proto::WatchEvent>* CoordinatorService::Watch(
    grpc::CallbackServerContext* context, const proto::WatchRequest* request) {
  const std::string peer = context->peer();
  const grpc::Status checked = CheckMember(*context, request->sender(), peer);
  if (!checked.ok()) {
    return new job_token_internal::RefusedWrite<proto::WatchEvent>(checked);
  }
  const MemberKey key(RoleOf(request->sender()), request->sender().rank());
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    return new job_token_internal::RefusedWrite<proto::WatchEvent>(grpc::Status(
        grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down"));
  }
  auto it = watching_.find(key);
  if (it != watching_.end()) {
    return new job_token_internal::RefusedWrite<proto::WatchEvent>(grpc::Status(
        grpc::StatusCode::ALREADY_EXISTS,
        absl::StrCat(Name(key.first, key.second), " is already watched; now ",
                     peer,
                     " claims that rank too: two processes were given "
                     "the same rank")));
  }
  // A process that claims the rank of one that has left: its Join says
  // whether that is allowed; until then it is a member like any other.
  left_.erase(key);
  watched_ever_.insert(key);
  auto* watcher = new Watcher(this, key, peer);
  watching_[key] = watcher;
  watcher->AssertServiceLocked();
  watcher->PumpLocked();  // "watching": the member may now join
  return watcher;
}

void CoordinatorService::PumpWatchersLocked() {
  // A watcher may finish (and leave the map) while pumped.
  std::vector<Watcher*> watchers;
  for (const auto& entry : watching_) watchers.push_back(entry.second);
  for (Watcher* watcher : watchers) {
    watcher->AssertServiceLocked();
    watcher->PumpLocked();
  }
}

grpc::Status CoordinatorService::Alive(grpc::ServerContext* context,
                                       const proto::AliveRequest* request,
                                       proto::AliveResponse*) {
  RETURN_GRPC_IF_ERROR(CheckCall(*context, request->sender()));
  absl::MutexLock lock(&mu_);
  if (request->round() == probe_round_ && probe_round_ > 0) {
    answered_.insert({RoleOf(request->sender()), request->sender().rank()});
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext* context,
                                       const proto::LeaveRequest* request,
                                       proto::LeaveResponse*) {
  RETURN_GRPC_IF_ERROR(CheckCall(*context, request->sender()));
  if (request->error().size() > kMaxAddressBytes * 16) {
    return TooLong("the leaving member's error", request->error().size(),
                   kMaxAddressBytes * 16);
  }
  absl::MutexLock lock(&mu_);
  const MemberKey key(RoleOf(request->sender()), request->sender().rank());
  left_.insert(key);
  // A member that ends with an error ends the job; when a loss is already
  // known, the error follows from it and the first loss stays the cause.
  if (!request->error().empty() && losses_.empty()) {
    RecordLossLocked(key, absl::StrCat("it failed: ", request->error()));
  }
  PumpWatchersLocked();
  return grpc::Status::OK;
}

void CoordinatorService::BeginShutdown() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  shutting_down_ = true;
  ++probe_round_;
  answered_.clear();
  PumpWatchersLocked();
}

void CoordinatorService::AwaitLateMembers(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const size_t expected = options_.num_workers + options_.num_servers;
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return losses_.empty() || watched_ever_.size() >= expected;
  };
  mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
}

void CoordinatorService::AwaitProbeAnswers(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!losses_.empty()) return true;  // the others hear of it first anyway
    for (const auto& entry : watching_) {
      if (!left_.count(entry.first) && !answered_.count(entry.first)) {
        return false;
      }
    }
    return true;
  };
  if (mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) return;
  std::vector<MemberKey> silent;
  for (const auto& entry : watching_) {
    if (!left_.count(entry.first) && !answered_.count(entry.first)) {
      silent.push_back(entry.first);
    }
  }
  for (const MemberKey& key : silent) {
    RecordLossLocked(
        key,
        absl::StrCat("it did not answer within ", absl::FormatDuration(timeout),
                     " while the coordinator was shutting down, its "
                     "watch still open: it hangs, or its connection is "
                     "dead without having been closed"));
  }
}

void CoordinatorService::EndJob() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  job_ended_ = true;
  PumpWatchersLocked();
}

std::vector<std::string> CoordinatorService::LostMembers() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> lost;
  for (const Loss& loss : losses_) lost.push_back(loss.Describe());
  return lost;
}

int64_t CoordinatorService::StoreBytes() const {
  absl::MutexLock lock(&mu_);
  return store_bytes_;
}

std::string CoordinatorService::BrokenWatch(const std::string& peer) {
  return absl::StrCat(
      "its connection to the coordinator (from ", peer, ") broke at ",
      absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()),
      " before it left the job: the process was killed or crashed, or its "
      "host became unreachable");
}

void CoordinatorService::RecordLossLocked(const MemberKey& member,
                                          const std::string& reason) {
  auto it = members_.find(member);
  RecordLossLocked(member, it != members_.end() ? it->second.address : "",
                   it != members_.end() ? it->second.host : "", reason);
}

void CoordinatorService::RecordLossLocked(const MemberKey& member,
                                          const std::string& address,
                                          const std::string& host,
                                          const std::string& reason) {
  if (!lost_.insert(member).second) return;
  Loss loss;
  loss.member = member;
  loss.address = Shown(address);
  loss.host = Shown(host);
  loss.reason = reason;
  GS_LOG(ERROR) << "coordinator of job " << options_.job_id << ": lost "
                << loss.Describe();
  losses_.push_back(std::move(loss));
  PumpWatchersLocked();
}

// Waits (mu_ held) until done() or the timeout; the error names what is
// still missing. A lost member or a shutdown ends the wait at once: nothing
// the caller waits for can happen any more.
template <typename Done, typename Describe>
grpc::Status CoordinatorService::WaitLocked(grpc::ServerContext* context,
                                            int64_t timeout_ms, Done done,
                                            Describe describe) {
  timeout_ms = std::clamp<int64_t>(timeout_ms, 0, kMaxTimeoutMs);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  auto condition = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done() || !losses_.empty() || shutting_down_;
  };
  while (!done()) {
    if (!losses_.empty()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("the job lost ", losses_[0].Describe(),
                                       " (while ", describe(), ")"));
    }
    if (shutting_down_) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("the coordinator is shutting down (while ", describe(),
                       ")"));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      std::string refusal;
      {
        absl::MutexLock lock(&refusal_mu_);
        refusal = last_refusal_;
      }
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("timed out after ", timeout_ms / 1000.0, " s ",
                       describe(),
                       refusal.empty()
                           ? ""
                           : absl::StrCat("; meanwhile the ", refusal)));
    }
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    mu_.AwaitWithDeadline(absl::Condition(&condition),
                          std::min(deadline, now + kCancelPoll));
  }
  return grpc::Status::OK;
}

std::string CoordinatorService::MissingLocked(
    const std::set<MemberKey>& present, bool everyone) const {
  std::vector<std::string> missing;
  for (int r = 0; r < options_.num_workers; ++r) {
    if (!present.count({Role::kWorker, r})) {
      missing.push_back(Name(Role::kWorker, r));
    }
  }
  for (int r = 0; everyone && r < options_.num_servers; ++r) {
    if (!present.count({Role::kServer, r})) {
      missing.push_back(Name(Role::kServer, r));
    }
  }
  // A job of thousands would make an unreadable message.
  if (missing.size() > 16) {
    const size_t total = missing.size();
    missing.resize(16);
    missing.push_back(absl::StrCat("... (", total, " in all)"));
  }
  return absl::StrJoin(missing, ", ");
}

std::string CoordinatorService::MissingMembersLocked() const {
  std::set<MemberKey> present;
  for (const auto& entry : members_) present.insert(entry.first);
  return MissingLocked(present, /*everyone=*/true);
}

}  // namespace gradsync
