// Test support: N ranks of one job as threads of the test process, sharing an
// in-memory rendezvous (core/cluster/in_memory_rendezvous.h) and talking over
// loopback TCP, as a real job's ring does. Like Gloo's test fixture that
// spawns one rank per thread; allreduce/ring_multiprocess_test.cc runs real
// processes with the gRPC coordinator.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/transport/peer_transport.h"
#include "core/cluster/in_memory_rendezvous.h"

namespace gradsync {

class TransportTestCluster {
 public:
  // A job of `world_size` workers, with one rendezvous handle per rank.
  static absl::StatusOr<std::unique_ptr<TransportTestCluster>> Start(
      int world_size, const std::string& job_id = "ring-test",
      absl::Duration timeout = absl::Seconds(30));
  ~TransportTestCluster();

  int world_size() const { return world_size_; }
  const std::string& job_id() const { return job_id_; }
  Rendezvous* client(int rank) { return clients_[rank].get(); }
  // Makes the job lose `member`, as the coordinator would report it.
  void Lose(const std::string& member, const std::string& reason) {
    job_->Lose(member, reason);
  }
  // Transport options for `rank` of this job on 127.0.0.1.
  PeerTransportOptions TransportOptions(int rank) const;

  // Runs body(rank) on one thread per rank, joins them all and returns each
  // rank's status, in rank order.
  std::vector<absl::Status> RunOnEveryRank(
      const std::function<absl::Status(int rank)>& body);

  // Creates every rank's transport concurrently (as a real job does), each
  // with the peer connections peers_of(rank) when given.
  absl::StatusOr<std::vector<std::unique_ptr<PeerTransport>>> ConnectPeers(
      const PeerTransportOptions& overrides = PeerTransportOptions(),
      const std::function<std::vector<int>(int rank)>& peers_of = nullptr);

 private:
  TransportTestCluster() = default;
  int world_size_ = 0;
  std::string job_id_;
  absl::Duration timeout_;
  std::shared_ptr<InMemoryJob> job_;
  std::vector<std::unique_ptr<InMemoryRendezvous>> clients_;
};

}  // namespace gradsync
