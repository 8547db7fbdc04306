// The `gradsync server` command (see server_command.h).
#include "ps/server_command.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/cluster_env.h"
#include "core/cluster/coordinator.h"
#include "nlohmann/json.hpp"
#include "ps/flags.h"
#include "ps/server.h"
#include "tools/cluster_flags.h"

namespace gradsync {
namespace {

// The local address of the route to `host`: what the coordinator's and the
// workers' side of a connection to us would see. No packet is sent (UDP
// connect only picks the route).
absl::StatusOr<std::string> LocalAddressToward(const std::string& host,
                                               int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  const int error =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (error != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve MASTER_ADDR=", host, ": ", gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(result,
                                                           &freeaddrinfo);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  const bool ok =
      connect(fd, result->ai_addr, result->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  const int saved_errno = errno;
  close(fd);
  if (!ok) {
    return absl::UnavailableError(absl::StrCat(
        "no route to MASTER_ADDR=", host, ": ", std::strerror(saved_errno)));
  }
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

absl::Status Serve(const ClusterEnv& env) {
  const absl::Duration idle =
      absl::Seconds(absl::GetFlag(FLAGS_ps_idle_timeout_s));
  ParameterServerOptions options;
  options.job_id = env.job_id;
  options.server_rank = env.rank;
  options.num_servers = env.num_servers;
  options.num_workers = env.world_size;
  options.bind_address = absl::GetFlag(FLAGS_ps_bind);
  ASSIGN_OR_RETURN(options.message_bytes, MessageBytesFromFlags());
  ASSIGN_OR_RETURN(options.stream_window_bytes, StreamWindowBytesFromFlags());
  ASSIGN_OR_RETURN(options.max_shard_bytes, MaxShardBytesFromFlags());
  ASSIGN_OR_RETURN(std::unique_ptr<ParameterServer> server,
                   ParameterServer::Start(options));

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
  CoordinatorClientOptions client_options;
  ASSIGN_OR_RETURN(client_options.security, CoordinatorSecurityFromFlags());
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> coordinator,
                   CoordinatorClient::Connect(env.coordinator_target(),
                                              env.job_id, Role::kServer,
                                              env.rank, idle, client_options));
  ASSIGN_OR_RETURN(std::vector<Member> members,
                   coordinator->Join(address, idle));
  GS_LOG(INFO) << "serving at " << address << " for " << env.world_size
               << " workers (" << members.size() << " members joined)";

  // Once the job has lost a member the workers can never finish: stop now
  // with the loss as the error rather than after the coordinator's grace.
  const int listener = coordinator->AddLossListener(
      [&server](const absl::Status& loss) { server->Abort(loss); });
  absl::Status status = server->WaitForShutdown(idle);
  coordinator->RemoveLossListener(listener);
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
                  << env->Describe() << "; set GRADSYNC_ROLE=server";
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
