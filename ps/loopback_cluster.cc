// In-process PS job on loopback (see loopback_cluster.h).
#include "ps/loopback_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {

absl::StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::Start(
    const LoopbackClusterOptions& options) {
  std::unique_ptr<LoopbackCluster> cluster(new LoopbackCluster());
  cluster->options_ = options;
  cluster->job_ =
      std::make_shared<InMemoryJob>(options.num_workers, options.num_servers);
  for (int k = 0; k < options.num_servers; ++k) {
    ParameterServerOptions server_options;
    server_options.job_id = options.job_id;
    // After the workers' own servers, as in `gradsync server`.
    server_options.server_rank = options.colocated_servers + k;
    server_options.num_servers =
        options.colocated_servers + options.num_servers;
    server_options.num_workers = options.num_workers;
    server_options.bind_address = "127.0.0.1:0";
    server_options.message_bytes = options.message_bytes;
    ASSIGN_OR_RETURN(std::unique_ptr<ParameterServer> server,
                     ParameterServer::Start(server_options));
    cluster->servers_.push_back(std::move(server));
  }
  for (int rank = 0; rank < options.num_workers; ++rank) {
    cluster->worker_rendezvous_.push_back(std::make_unique<InMemoryRendezvous>(
        cluster->job_, Role::kWorker, rank));
  }
  return cluster;
}

LoopbackCluster::~LoopbackCluster() {
  for (auto& server : servers_) server->Stop();
}

absl::StatusOr<SyncContext> LoopbackCluster::JoinWorker(int rank) {
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", rank, " joining a loopback job of ",
                     options_.num_workers, " workers"));
  }
  SyncContext context;
  context.identity.rank = rank;
  context.identity.world_size = options_.num_workers;
  context.identity.num_servers = options_.num_servers;
  context.identity.local_rank = rank;
  context.identity.job_id = options_.job_id;
  context.identity.advertise_host = "127.0.0.1";
  context.rendezvous = worker_rendezvous_[rank].get();
  context.timeout = options_.timeout;
  // The roster the coordinator's Join would return: workers, then servers.
  for (int r = 0; r < options_.num_workers; ++r) {
    context.members.push_back({Role::kWorker, r, "127.0.0.1", "localhost"});
  }
  const std::vector<std::string> servers = server_addresses();
  for (int k = 0; k < options_.num_servers; ++k) {
    context.members.push_back({Role::kServer, k, servers[k], "localhost"});
  }
  return context;
}

std::vector<std::string> LoopbackCluster::server_addresses() const {
  std::vector<std::string> addresses;
  for (const auto& server : servers_) {
    addresses.push_back(absl::StrCat("127.0.0.1:", server->port()));
  }
  return addresses;
}

absl::Status LoopbackCluster::Finish() {
  absl::Status status;
  for (int k = 0; k < options_.num_servers; ++k) {
    absl::Status wait = servers_[k]->WaitForShutdown(options_.timeout);
    if (status.ok()) status = wait;
    servers_[k]->Stop();
  }
  return status;
}

}  // namespace gradsync
