// The `gradsync server` command (see commands.h): the edge where the
// --ps_* flags and the environment become a ParameterServer's options.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/cluster_env.h"
#include "core/cluster/coordinator.h"
#include "core/cluster/local_address.h"
#include "core/telemetry/trace.h"
#include "nlohmann/json.hpp"
#include "ps/server/server.h"
#include "ps/settings.h"
#include "tools/cluster_flags.h"
#include "tools/commands.h"
#include "tools/job_settings.h"
#include "tools/output_paths.h"
#include "tools/ps_flags.h"
#include "tools/trace_flags.h"

namespace gradsync {
namespace {

// How long a server still serving waits, once worker 0 has ended the job,
// for the remaining workers' Shutdown calls (they may still be on their way)
// before it stops with an error: the job is over and nobody else will call.
constexpr absl::Duration kAfterJobEnd = absl::Seconds(3);

// Turns the coordinator's "the job has ended" into the end of this server
// when the workers did not all say goodbye: a job that failed before its
// first step (a worker refused, a crash at start-up) ends its servers too.
class JobEndWatch {
 public:
  void JobEnded() {
    absl::MutexLock lock(&mu_);
    ended_at_ = absl::Now();
  }
  // Waits until Done() (returns false) or until kAfterJobEnd after the job
  // ended (returns true).
  bool WaitForStrandedServer() {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return done_ || ended_at_ != absl::InfiniteFuture();
    };
    mu_.Await(absl::Condition(&ready));
    if (done_) return false;
    return !mu_.AwaitWithDeadline(absl::Condition(&done_),
                                  ended_at_ + kAfterJobEnd);
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

 private:
  absl::Mutex mu_;
  absl::Time ended_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status Serve(const ClusterEnv& env) {
  const absl::Duration idle =
      absl::Seconds(absl::GetFlag(FLAGS_ps_idle_timeout_s));
  // The workers' --timeout_s, for start-up (see PeerTimeoutFromFlags).
  ASSIGN_OR_RETURN(const absl::Duration start_timeout, PeerTimeoutFromFlags());
  // With --ps_colocated_servers=k workers 0..k-1 hold servers 0..k-1 and
  // this process is server k + its rank among the separate ones.
  RETURN_IF_ERROR(CheckServerPlacement(env.world_size, env.num_servers));
  ASSIGN_OR_RETURN(const int colocated,
                   ColocatedServersFromFlags(env.world_size));
  JobEndWatch job_end;  // outlives the coordinator client, which calls it
  CoordinatorClientOptions client_options;
  ASSIGN_OR_RETURN(client_options.security, CoordinatorSecurityFromFlags());
  client_options.num_workers = env.world_size;
  client_options.num_servers = env.num_servers;
  client_options.shape_source = env.shape;
  client_options.on_job_ended = [&job_end] { job_end.JobEnded(); };
  // The flags this server reads that the workers read too: worker 0's
  // coordinator refuses a server whose values differ (tools/job_settings.h).
  client_options.settings = ServerSettingsFromFlags();
  // The same stream settings the workers derive (ps/settings.h): the push
  // streams' window, N workers' streams converging on this port, and the
  // results' messages, which travel on the pull streams (K servers' converge
  // on a worker's port) and so follow that window. Stated at Join too: a
  // server given another link than the workers is refused there.
  ASSIGN_OR_RETURN(
      const PsStreamSettings streams,
      StreamSettingsOfThisProcess(env.world_size, colocated + env.num_servers));
  StateDerivedStreamSettings(streams, &client_options.settings);
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> coordinator,
                   CoordinatorClient::Connect(
                       env.coordinator_target(), env.job_id, Role::kServer,
                       env.rank, start_timeout, client_options));
  ParameterServerOptions options;
  // The coordinator's: without a launcher's id, worker 0 named the job.
  options.job_id = coordinator->job_id();
  options.server_rank = colocated + env.rank;
  options.num_servers = colocated + env.num_servers;
  options.num_workers = env.world_size;
  options.bind_address = absl::GetFlag(FLAGS_ps_bind);
  // A server that advertises a loopback address is reached from this host
  // only: by default it need not listen on every interface.
  if (options.bind_address == "0.0.0.0:0" &&
      absl::GetFlag(FLAGS_ps_advertise_host).empty() &&
      env.advertise_host.rfind("127.", 0) == 0) {
    options.bind_address = "127.0.0.1:0";
  }
  options.stream_window_bytes = streams.push_window.bytes;
  options.bdp_probe = streams.push_window.bdp_probe;
  GS_LOG(INFO) << "push stream window " << streams.push_window.bytes / 1024
               << " KiB (" << streams.push_window.source << ")";
  options.message_bytes = streams.pull_message.bytes;
  GS_LOG(INFO) << "result messages of at most "
               << streams.pull_message.bytes / 1024 << " KiB ("
               << streams.pull_message.source << ")";
  ASSIGN_OR_RETURN(options.max_shard_bytes, MaxShardBytesFromFlags());
  // The workers' --trace: a server writes its own timeline beside theirs,
  // <trace>.server<k>.json. Pids 1000 + k keep servers apart from the
  // workers in the merged view.
  ASSIGN_OR_RETURN(const TraceSettings trace_settings,
                   TraceSettingsFromFlags());
  std::unique_ptr<TraceRecorder> trace;
  if (const std::string& path = trace_settings.path; !path.empty()) {
    trace = std::make_unique<TraceRecorder>(
        1000 + options.server_rank,
        absl::StrCat("server ", options.server_rank));
    trace->NameTrack(kTrackCommunication, "pushes in, results out");
    options.trace = trace.get();
    options.trace_steps = trace_settings.steps;
    options.trace_path = RankTracePath(path, "server", options.server_rank);
  }
  absl::StatusOr<std::unique_ptr<ParameterServer>> started =
      ParameterServer::Start(options);
  if (!started.ok()) {
    // Connected already: the job hears why (a taken port) at once.
    coordinator->Leave(started.status());
    return started.status();
  }
  std::unique_ptr<ParameterServer> server = std::move(*started);

  // --ps_advertise_host, else GRADSYNC_ADVERTISE_HOST, else the address of
  // the route to the coordinator: unlike the host name it is right in a
  // network namespace of an emulated cluster too.
  std::string host = absl::GetFlag(FLAGS_ps_advertise_host);
  if (host.empty() && std::getenv("GRADSYNC_ADVERTISE_HOST") != nullptr) {
    host = env.advertise_host;
  }
  if (host.empty()) {
    ASSIGN_OR_RETURN(host,
                     LocalAddressToward(env.master_addr, env.master_port));
  }
  const std::string address = absl::StrCat(host, ":", server->port());
  absl::StatusOr<std::vector<Member>> members =
      coordinator->Join(address, start_timeout);
  if (!members.ok()) {
    coordinator->Leave(members.status());
    return members.status();
  }
  // The timeline is written when the job ends: a path that cannot take it
  // is said now, before any step. After Join, because only a member that
  // has joined can end the job at once by leaving with an error.
  if (absl::Status writable = PrepareOutputFile("--trace", options.trace_path);
      !writable.ok()) {
    writable = Annotate(writable, absl::StrCat("server ", env.rank));
    coordinator->Leave(writable);
    server->Stop();
    return writable;
  }
  GS_LOG(INFO) << "serving at " << address << " (listening on "
               << options.bind_address << ") for " << env.world_size
               << " workers (" << members->size() << " members joined)"
               << (colocated > 0
                       ? absl::StrCat(", as server ", options.server_rank,
                                      " of ", options.num_servers, " (",
                                      colocated, " in workers)")
                       : std::string());

  // Once the job has lost a member the workers can never finish: stop now
  // with the loss as the error rather than after the coordinator's grace.
  const int listener = coordinator->AddLossListener(
      [&server](const absl::Status& loss) { server->Abort(loss); });
  std::thread stranded([&] {
    if (job_end.WaitForStrandedServer()) {
      server->Abort(absl::FailedPreconditionError(absl::StrCat(
          "worker 0 ended the job (its coordinator shut down) ",
          absl::FormatDuration(kAfterJobEnd),
          " ago, but not every worker told this server that the job was "
          "over: the workers failed or stopped early (see their logs); "
          "stopping")));
    }
  });
  absl::Status status = server->WaitForShutdown(idle);
  job_end.Done();
  stranded.join();
  coordinator->RemoveLossListener(listener);
  if (!status.ok()) coordinator->Leave(status);
  server->Stop();
  // One JSON line on stdout for the launcher's logs and the plots.
  // A summary that does not parse is kept as a string rather than aborting
  // the server on its way out.
  const std::string summary_text = server->SummaryJson();
  const nlohmann::json summary =
      nlohmann::json::parse(summary_text, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json event = {
      {"event", "ps_server_summary"},
      {"ok", status.ok()},
      {"summary",
       summary.is_discarded() ? nlohmann::json(summary_text) : summary},
  };
  std::printf(
      "%s\n",
      event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          .c_str());
  std::fflush(stdout);
  return status;
}

}  // namespace

int RunServerCommand() {
  absl::StatusOr<ClusterEnv> env = ClusterEnvFromEnvironment();
  if (!env.ok()) {
    GS_LOG(ERROR) << "gradsync server: " << env.status().message();
    return 1;
  }
  if (env->role != Role::kServer) {
    GS_LOG(ERROR) << "gradsync server: the environment describes "
                  << env->Describe() << " (" << env->shape
                  << "); set GRADSYNC_ROLE=server, or start every task with "
                     "`gradsync run`, which takes the role the environment "
                     "gives";
    return 1;
  }
  SetLogTag(absl::StrCat("server ", env->rank));
  if (env->num_servers < 1 || env->rank >= env->num_servers) {
    GS_LOG(ERROR) << "gradsync server: server rank " << env->rank
                  << " needs GRADSYNC_NUM_SERVERS > " << env->rank;
    return 1;
  }
  absl::Status status = Serve(*env);
  if (!status.ok()) {
    GS_LOG(ERROR) << "gradsync server: " << status.message();
    return 1;
  }
  return 0;
}

}  // namespace gradsync
