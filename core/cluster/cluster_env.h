// Who this process is within the job, read from the environment a launcher
// sets: gradsync launch and torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID) or Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK).
// gradsync's own variables: GRADSYNC_JOB_ID, GRADSYNC_NUM_SERVERS, and for a
// parameter server GRADSYNC_ROLE=server with GRADSYNC_SERVER_RANK.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

// This process's identity and where the job's coordinator listens.
struct ClusterEnv : ProcessIdentity {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source =
      "default";  // "gradsync", "torchrun", "slurm", "openmpi", "default"

  // "worker 2/4 (torchrun)".
  std::string Describe() const;
  std::string coordinator_target() const;
};

// Reads the environment. advertise_host is GRADSYNC_ADVERTISE_HOST, else
// 127.0.0.1 when the coordinator is on loopback, else the host name.
// Inconsistent values (rank >= world size, negative
// or non-numeric) are an error naming the variable.
absl::StatusOr<ClusterEnv> ClusterEnvFromEnvironment();

}  // namespace gradsync
