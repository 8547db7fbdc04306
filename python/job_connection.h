// A Python worker's place in a gradsync job: what `gradsync train` does before
// its trainer starts, for a process whose training loop is PyTorch's.
//
// Reads who this process is from the environment (torchrun's variables, as
// gradsync launch sets them; core/cluster/cluster_env.h), hosts the
// coordinator when it is worker 0, joins the job with the job's token and
// deadlines, and creates the strategy --sync names from the registry. One
// difference from a native worker: PyTorch's own c10d store (which DDP needs
// for its process group) listens on MASTER_PORT, so gradsync's coordinator
// listens on GRADSYNC_COORDINATOR_PORT, by default MASTER_PORT + 1.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/cluster_env.h"
#include "core/cluster/coordinator.h"
#include "core/device/device.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {

struct JobConnectionOptions {
  std::string sync = "ring";  // a registered --sync name
  // Every wait on a peer (coordinator, ring neighbour, server) gives up after
  // this and names the peer: --timeout_s of a native worker.
  absl::Duration timeout = absl::Seconds(60);
  // Strategy flags ("--allreduce_chunk_kb=256", "--ps_partition=..."), applied
  // before the strategy is created, as a native worker's command line would.
  std::vector<std::string> flags;
};

// Where gradsync's coordinator listens when torch's store has MASTER_PORT:
// GRADSYNC_COORDINATOR_PORT, else MASTER_PORT + 1. Errors name the variable.
absl::StatusOr<int> CoordinatorPortBesideTorch(int master_port);

class JobConnection {
 public:
  // Joins the job. Blocks until every worker and server has joined (or the
  // timeout names who is missing).
  static absl::StatusOr<std::unique_ptr<JobConnection>> Join(
      const JobConnectionOptions& options);
  ~JobConnection();

  const ClusterEnv& env() const { return env_; }
  const JobConnectionOptions& options() const { return options_; }
  Device& device() { return *device_; }
  Rendezvous* rendezvous() { return context_.rendezvous; }
  // A fresh strategy of options().sync for this job.
  absl::StatusOr<std::unique_ptr<GradientSync>> CreateStrategy() const;

  // This worker ends because of `error`: every other member hears of it at
  // once rather than waiting out its deadlines.
  void Fail(const absl::Status& error);
  // The normal end: waits for every worker to reach it (so worker 0's
  // coordinator outlives the others' last steps), leaves, and on worker 0
  // stops the coordinator. Idempotent.
  absl::Status Close();

 private:
  JobConnection() = default;

  JobConnectionOptions options_;
  ClusterEnv env_;
  SyncContext context_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<CoordinatorServer> coordinator_server_;
  std::unique_ptr<CoordinatorClient> coordinator_;
  bool closed_ = false;
};

}  // namespace gradsync
