// A whole parameter-server job on 127.0.0.1 inside one process: a real
// coordinator, K ParameterServers that joined it, and the SyncContext each of
// the N workers gets from joining. For the tests and the benchmark, which run
// workers as threads over real gRPC.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/coordinator.h"
#include "core/gradient_sync.h"
#include "ps/server.h"

namespace gradsync {

struct LoopbackClusterOptions {
  int num_workers = 1;
  int num_servers = 1;
  std::string job_id = "loopback";
  absl::Duration timeout = absl::Seconds(20);
  int64_t message_bytes = int64_t{1} << 20;
};

class LoopbackCluster {
 public:
  // Starts the coordinator and the servers; the servers join in the
  // background (Join returns once the workers have joined too).
  static absl::StatusOr<std::unique_ptr<LoopbackCluster>> Start(
      const LoopbackClusterOptions& options);
  // Stops whatever is still running.
  ~LoopbackCluster();

  // Joins worker `rank` and returns its context. Blocks until all workers
  // and servers have joined: call it from N threads at once.
  absl::StatusOr<SyncContext> JoinWorker(int rank);

  ParameterServer& server(int k) { return *servers_[k]; }
  std::vector<std::string> server_addresses() const;

  // Checks that every server joined, waits (up to the timeout) until each
  // has heard Shutdown from every worker, and stops the servers.
  absl::Status Finish();

 private:
  LoopbackCluster() = default;

  LoopbackClusterOptions options_;
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<CoordinatorClient>> server_clients_;
  std::vector<std::unique_ptr<CoordinatorClient>> worker_clients_;
  std::vector<absl::Status> server_join_;
  std::vector<std::thread> server_threads_;
};

}  // namespace gradsync
