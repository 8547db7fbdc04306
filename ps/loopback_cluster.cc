// In-process PS job on loopback (see loopback_cluster.h).
#include "ps/loopback_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace gradsync {

absl::StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::Start(
    const LoopbackClusterOptions& options) {
  std::unique_ptr<LoopbackCluster> cluster(new LoopbackCluster());
  cluster->options_ = options;
  ASSIGN_OR_RETURN(
      cluster->coordinator_,
      CoordinatorServer::Start("127.0.0.1:0", options.job_id,
                               options.num_workers, options.num_servers));
  const std::string target =
      absl::StrCat("127.0.0.1:", cluster->coordinator_->port());
  for (int k = 0; k < options.num_servers; ++k) {
    ParameterServerOptions server_options;
    server_options.job_id = options.job_id;
    server_options.server_rank = k;
    server_options.num_servers = options.num_servers;
    server_options.num_workers = options.num_workers;
    server_options.bind_address = "127.0.0.1:0";
    server_options.message_bytes = options.message_bytes;
    ASSIGN_OR_RETURN(std::unique_ptr<ParameterServer> server,
                     ParameterServer::Start(server_options));
    ASSIGN_OR_RETURN(
        std::unique_ptr<CoordinatorClient> client,
        CoordinatorClient::Connect(target, options.job_id, Role::kServer, k,
                                   options.timeout));
    cluster->servers_.push_back(std::move(server));
    cluster->server_clients_.push_back(std::move(client));
  }
  cluster->worker_clients_.resize(options.num_workers);
  cluster->server_join_.assign(options.num_servers, absl::OkStatus());
  LoopbackCluster* self = cluster.get();
  for (int k = 0; k < options.num_servers; ++k) {
    self->server_threads_.emplace_back([self, k] {
      const std::string address =
          absl::StrCat("127.0.0.1:", self->servers_[k]->port());
      self->server_join_[k] = self->server_clients_[k]
                                  ->Join(address, self->options_.timeout)
                                  .status();
    });
  }
  return cluster;
}

LoopbackCluster::~LoopbackCluster() {
  for (std::thread& thread : server_threads_) thread.join();
  for (auto& server : servers_) server->Stop();
  if (coordinator_ != nullptr) coordinator_->Shutdown();
}

absl::StatusOr<SyncContext> LoopbackCluster::JoinWorker(int rank) {
  ASSIGN_OR_RETURN(worker_clients_[rank],
                   CoordinatorClient::Connect(
                       absl::StrCat("127.0.0.1:", coordinator_->port()),
                       options_.job_id, Role::kWorker, rank, options_.timeout));
  SyncContext context;
  context.rank = rank;
  context.world_size = options_.num_workers;
  context.local_rank = rank;
  context.job_id = options_.job_id;
  context.coordinator = worker_clients_[rank].get();
  ASSIGN_OR_RETURN(context.members,
                   worker_clients_[rank]->Join("127.0.0.1", options_.timeout));
  context.num_servers = options_.num_servers;
  context.advertise_host = "127.0.0.1";
  context.timeout = options_.timeout;
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
  for (std::thread& thread : server_threads_) thread.join();
  server_threads_.clear();
  absl::Status status;
  for (int k = 0; k < options_.num_servers; ++k) {
    if (status.ok()) status = server_join_[k];
    absl::Status wait = servers_[k]->WaitForShutdown(options_.timeout);
    if (status.ok()) status = wait;
    servers_[k]->Stop();
  }
  return status;
}

}  // namespace gradsync
