// A whole parameter-server job on 127.0.0.1 inside one process: K real
// ParameterServers over gRPC, an in-memory rendezvous in place of the
// coordinator (core/cluster/in_memory_rendezvous.h), and the SyncContext each
// of the N workers would get from joining. For the tests and the benchmark,
// which run workers as threads; ps/ps_process_test.cc runs real processes
// with the gRPC coordinator.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/in_memory_rendezvous.h"
#include "core/sync/gradient_sync.h"
#include "ps/server/server.h"

namespace gradsync {

struct LoopbackClusterOptions {
  int num_workers = 1;
  int num_servers = 1;  // separate servers, started here
  // Servers the workers run themselves (PsSyncOptions::colocated_servers):
  // the separate ones are then servers colocated_servers..K-1.
  int colocated_servers = 0;
  std::string job_id = "loopback";
  absl::Duration timeout = absl::Seconds(20);
  int64_t message_bytes = int64_t{1} << 20;
};

class LoopbackCluster {
 public:
  // Starts the servers.
  static absl::StatusOr<std::unique_ptr<LoopbackCluster>> Start(
      const LoopbackClusterOptions& options);
  // Stops whatever is still running.
  ~LoopbackCluster();

  // Worker `rank`'s context: the roster of the job (workers, then servers)
  // and its own rendezvous handle.
  absl::StatusOr<SyncContext> JoinWorker(int rank);
  // Makes the job lose `member`, as the coordinator would report it.
  void Lose(const std::string& member, const std::string& reason) {
    job_->Lose(member, reason);
  }

  ParameterServer& server(int k) { return *servers_[k]; }
  std::vector<std::string> server_addresses() const;

  // Runs `worker(rank)` for every worker, each on a thread of its own as a
  // worker process would run, and returns their results by rank once all
  // have returned.
  template <typename Worker>
  auto RunEveryWorker(Worker worker) -> std::vector<decltype(worker(0))> {
    std::vector<decltype(worker(0))> results(options_.num_workers);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < options_.num_workers; ++rank) {
      threads.emplace_back([&, rank] { results[rank] = worker(rank); });
    }
    for (std::thread& thread : threads) thread.join();
    return results;
  }

  // Waits (up to the timeout) until each server has heard Shutdown from
  // every worker, and stops the servers.
  absl::Status Finish();

 private:
  LoopbackCluster() = default;

  LoopbackClusterOptions options_;
  std::shared_ptr<InMemoryJob> job_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<InMemoryRendezvous>> worker_rendezvous_;
};

}  // namespace gradsync
