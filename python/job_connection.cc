// Joining a gradsync job from a PyTorch worker (see job_connection.h).
#include "python/job_connection.h"

#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/files.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_token.h"
#include "tools/job_settings.h"
#include "tools/ps_flags.h"

namespace gradsync {
namespace {

// "--name=value" into the flag the strategy's library defines.
absl::Status ApplyStrategyFlag(const std::string& argument) {
  if (!absl::StartsWith(argument, "--") ||
      argument.find('=') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradsync flag '", argument, "' must have the form --name=value"));
  }
  const size_t equals = argument.find('=');
  const std::string name = argument.substr(2, equals - 2);
  const std::string value = argument.substr(equals + 1);
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradsync flag --", name,
        " is not a strategy flag of this build (see `gradsync train --help`: "
        "the ring's --ring_*, the parameter server's --ps_*)"));
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradsync flag --", name, "=", value, ": ", error));
  }
  return absl::OkStatus();
}

std::string CoordinatorBindAddress(const ClusterEnv& env) {
  const bool local =
      env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
  return absl::StrCat(local ? "127.0.0.1" : "0.0.0.0", ":", env.master_port);
}

// What every PyTorch worker of the job must agree on, compared by worker 0's
// coordinator at Join (core/cluster/coordinator.h): the strategy, and its
// flags as applied (the same per-process exceptions as a native worker's,
// tools/job_settings.h). A worker given another strategy fails the job at
// Join, naming both workers, instead of waiting for peers that will never
// connect to it.
// With parameter servers, the streams' sizes each process derives from the
// job's link too (tools/job_settings.h).
absl::StatusOr<WorkerSettings> SettingsOf(const JobConnectionOptions& options,
                                          const ClusterEnv& env) {
  WorkerSettings settings = WorkerSettingsFromFlags();
  settings.values["--sync"] = options.sync;
  settings.advice =
      "give every worker the same gradsync.torch.connect(sync=...) and "
      "strategy flags (GRADSYNC_FLAGS)";
  if (options.sync == "ps" || options.sync == "hybrid" || env.num_servers > 0) {
    ASSIGN_OR_RETURN(const int colocated,
                     ColocatedServersFromFlags(env.world_size));
    ASSIGN_OR_RETURN(const PsStreamSettings streams,
                     StreamSettingsOfThisProcess(env.world_size,
                                                 colocated + env.num_servers));
    StateDerivedStreamSettings(streams, &settings);
  }
  return settings;
}

}  // namespace

absl::StatusOr<int> CoordinatorPortBesideTorch(int master_port) {
  const char* given = std::getenv("GRADSYNC_COORDINATOR_PORT");
  if (given == nullptr || *given == '\0') {
    if (master_port + 1 > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MASTER_PORT=", master_port,
          " leaves no port above it for gradsync's coordinator; set "
          "GRADSYNC_COORDINATOR_PORT"));
    }
    return master_port + 1;
  }
  int port = 0;
  if (!absl::SimpleAtoi(given, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("GRADSYNC_COORDINATOR_PORT='", given,
                     "' is not a port number (1..65535)"));
  }
  return port;
}

absl::StatusOr<std::unique_ptr<JobConnection>> JobConnection::Join(
    const JobConnectionOptions& options) {
  // `gradsync launch` asks each worker command to record that it called
  // connect(): a worker that ends without doing so would leave the job's
  // servers waiting for it, and the launcher stops the job naming it
  // instead (tools/launch_command.cc). Recorded first, so that a connect()
  // that fails is a failure of its own, not one of never connecting.
  if (const char* record = std::getenv("GRADSYNC_CONNECT_RECORD");
      record != nullptr && *record != '\0') {
    RETURN_IF_ERROR(Annotate(
        WriteFileAtomically(record, "gradsync.torch.connect() called\n"),
        "recording connect() for gradsync launch (GRADSYNC_CONNECT_RECORD)"));
  }
  std::unique_ptr<JobConnection> job(new JobConnection());
  job->options_ = options;
  for (const std::string& flag : options.flags) {
    RETURN_IF_ERROR(ApplyStrategyFlag(flag));
  }
  ASSIGN_OR_RETURN(job->env_, ClusterEnvFromEnvironment());
  ClusterEnv& env = job->env_;
  if (env.role != Role::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this process is ", env.Describe(),
        ": a PyTorch program is a worker; start servers with `gradsync "
        "server` (gradsync launch --servers=K does)"));
  }
  ASSIGN_OR_RETURN(env.master_port,
                   CoordinatorPortBesideTorch(env.master_port));
  SetLogTag(absl::StrCat("worker ", env.rank));
  ASSIGN_OR_RETURN(job->device_, CreateDevice(DeviceOptions()));

  SyncContext& context = job->context_;
  context.identity = env;
  context.timeout = options.timeout;
  if (env.world_size > 1 || env.num_servers > 0) {
    CoordinatorSecurity security;
    security.job_token = JobTokenOfThisProcess();
    ASSIGN_OR_RETURN(const WorkerSettings settings, SettingsOf(options, env));
    if (env.rank == 0) {
      ASSIGN_OR_RETURN(
          job->coordinator_server_,
          CoordinatorServer::Start(CoordinatorBindAddress(env), env.job_id,
                                   env.world_size, env.num_servers, security,
                                   env.shape, settings));
    }
    CoordinatorClientOptions client_options;
    client_options.security = security;
    client_options.num_workers = env.world_size;
    client_options.num_servers = env.num_servers;
    client_options.shape_source = env.shape;
    client_options.settings = settings;
    ASSIGN_OR_RETURN(job->coordinator_,
                     CoordinatorClient::Connect(
                         env.coordinator_target(), env.job_id, Role::kWorker,
                         env.rank, options.timeout, client_options));
    context.rendezvous = job->coordinator_.get();
    absl::StatusOr<std::vector<Member>> members =
        job->coordinator_->Join(env.advertise_host, options.timeout);
    if (!members.ok()) {
      job->Fail(members.status());
      return members.status();
    }
    context.members = *std::move(members);
  }
  GS_LOG(INFO) << "joined as " << env.Describe() << " (" << env.shape
               << "), --sync=" << options.sync << ", coordinator "
               << env.coordinator_target();
  return job;
}

JobConnection::~JobConnection() {
  if (!closed_ && coordinator_ != nullptr) {
    coordinator_->Leave(absl::AbortedError(
        "the PyTorch worker ended without closing gradsync (state.close())"));
  }
}

absl::StatusOr<std::unique_ptr<GradientSync>> JobConnection::CreateStrategy()
    const {
  return GradientSyncRegistry::Create(options_.sync, context_);
}

void JobConnection::Fail(const absl::Status& error) {
  if (coordinator_ != nullptr) coordinator_->Leave(error);
  closed_ = true;
}

absl::Status JobConnection::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  if (coordinator_ == nullptr) return absl::OkStatus();
  // Worker 0 hosts the coordinator: it must not stop it while another
  // worker still needs the rendezvous (its last step, its Shutdown).
  absl::Status status = coordinator_->Barrier(
      "gradsync-torch/close", BarrierGroup::kWorkers, options_.timeout);
  coordinator_->Leave(status);
  if (coordinator_server_ != nullptr) coordinator_server_->Shutdown();
  return status;
}

}  // namespace gradsync
