// The coordinator: a small gRPC service on MASTER_ADDR:MASTER_PORT, hosted by
// worker rank 0, through which the processes of one job find each other.
//
//   Join     every worker and server announces (role, rank, address); the call
//            returns the whole roster once everyone has joined.
//   Barrier  named barriers over the workers or over everyone.
//   Set/Get  a key-value store for small blobs (NCCL's unique id, summaries);
//            Get waits until the key is set.
//
// Every blocking call has a deadline; when it passes the error names the ranks
// (or key) still missing. Requests carry the job id and are refused for any
// other job.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
class Channel;
}  // namespace grpc

namespace gradsync {

enum class Role { kWorker, kServer };
const char* RoleName(Role role);  // "worker", "server"

struct Member {
  Role role = Role::kWorker;
  int rank = 0;
  std::string address;  // what the member advertised ("10.213.0.5:41000")
  std::string host;     // its host name
};

enum class BarrierGroup { kWorkers, kEveryone };

class CoordinatorServer {
 public:
  // Listens on `bind_address` ("0.0.0.0:29500"; port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const std::string& bind_address, const std::string& job_id,
      int num_workers, int num_servers);
  ~CoordinatorServer();

  int port() const { return port_; }
  void Shutdown();

 private:
  class Service;
  CoordinatorServer() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

class CoordinatorClient {
 public:
  // Connects to `target` ("host:port"), waiting up to `connect_timeout` for the
  // coordinator to come up (it is started by worker 0, possibly after us).
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& target, const std::string& job_id, Role role, int rank,
      absl::Duration connect_timeout);
  ~CoordinatorClient();

  Role role() const { return role_; }
  int rank() const { return rank_; }
  // "worker 3".
  std::string self() const;

  // Announces this process at `address` and returns every member once all
  // num_workers + num_servers have joined, workers first, by rank.
  absl::StatusOr<std::vector<Member>> Join(const std::string& address,
                                           absl::Duration timeout);
  absl::Status Barrier(const std::string& name, BarrierGroup group,
                       absl::Duration timeout);
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout);

 private:
  class Stub;
  CoordinatorClient() = default;
  std::unique_ptr<Stub> stub_;
  std::string target_;
  std::string job_id_;
  Role role_ = Role::kWorker;
  int rank_ = 0;
};

}  // namespace gradsync
