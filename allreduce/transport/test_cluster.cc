#include "allreduce/transport/test_cluster.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {

absl::StatusOr<std::unique_ptr<TransportTestCluster>>
TransportTestCluster::Start(int world_size, const std::string& job_id,
                            absl::Duration timeout) {
  std::unique_ptr<TransportTestCluster> cluster(new TransportTestCluster());
  cluster->world_size_ = world_size;
  cluster->job_id_ = job_id;
  cluster->timeout_ = timeout;
  cluster->job_ = std::make_shared<InMemoryJob>(world_size, /*num_servers=*/0);
  for (int rank = 0; rank < world_size; ++rank) {
    cluster->clients_.push_back(std::make_unique<InMemoryRendezvous>(
        cluster->job_, Role::kWorker, rank));
  }
  return cluster;
}

TransportTestCluster::~TransportTestCluster() = default;

PeerTransportOptions TransportTestCluster::TransportOptions(int rank) const {
  PeerTransportOptions options;
  options.rank = rank;
  options.world_size = world_size_;
  options.job_id = job_id_;
  options.advertise_host = "127.0.0.1";
  options.timeout = timeout_;
  return options;
}

std::vector<absl::Status> TransportTestCluster::RunOnEveryRank(
    const std::function<absl::Status(int rank)>& body) {
  std::vector<absl::Status> results(world_size_);
  std::vector<std::thread> threads;
  threads.reserve(world_size_);
  for (int rank = 0; rank < world_size_; ++rank) {
    threads.emplace_back([&, rank] { results[rank] = body(rank); });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

absl::StatusOr<std::vector<std::unique_ptr<PeerTransport>>>
TransportTestCluster::ConnectPeers(
    const PeerTransportOptions& overrides,
    const std::function<std::vector<int>(int rank)>& peers_of) {
  std::vector<std::unique_ptr<PeerTransport>> transports(world_size_);
  std::vector<absl::Status> results = RunOnEveryRank([&](int rank) {
    PeerTransportOptions options = TransportOptions(rank);
    options.key_prefix = overrides.key_prefix;
    options.socket_buffer_bytes = overrides.socket_buffer_bytes;
    if (peers_of) options.peers = peers_of(rank);
    ASSIGN_OR_RETURN(transports[rank],
                     PeerTransport::Create(options, client(rank)));
    return absl::OkStatus();
  });
  for (const absl::Status& status : results) RETURN_IF_ERROR(status);
  return transports;
}

}  // namespace gradsync
