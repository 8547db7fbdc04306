// Test support: N ranks of one job as threads of the test process, each with
// its own CoordinatorClient talking to a real CoordinatorServer on 127.0.0.1,
// so that tests exercise the same rendezvous and loopback TCP as a real job.
// Like Gloo's test fixture that spawns one rank per thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/ring_transport.h"
#include "core/coordinator.h"

namespace gradsync {

class RingTestCluster {
 public:
  // Starts the coordinator for `world_size` workers and connects one client
  // per rank.
  static absl::StatusOr<std::unique_ptr<RingTestCluster>> Start(
      int world_size, const std::string& job_id = "ring-test",
      absl::Duration timeout = absl::Seconds(30));
  ~RingTestCluster();

  int world_size() const { return world_size_; }
  const std::string& job_id() const { return job_id_; }
  CoordinatorClient* client(int rank) { return clients_[rank].get(); }
  // Transport options for `rank` of this job on 127.0.0.1.
  RingTransportOptions TransportOptions(int rank) const;

  // Runs body(rank) on one thread per rank, joins them all and returns each
  // rank's status, in rank order.
  std::vector<absl::Status> RunOnEveryRank(
      const std::function<absl::Status(int rank)>& body);

  // Creates every rank's transport concurrently (as a real job does).
  absl::StatusOr<std::vector<std::unique_ptr<RingTransport>>> ConnectRing(
      const RingTransportOptions& overrides = RingTransportOptions());

 private:
  RingTestCluster() = default;
  int world_size_ = 0;
  std::string job_id_;
  absl::Duration timeout_;
  std::unique_ptr<CoordinatorServer> server_;
  std::vector<std::unique_ptr<CoordinatorClient>> clients_;
};

}  // namespace gradsync
