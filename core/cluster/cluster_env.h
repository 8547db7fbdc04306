// Who this process is within the job, and the job's shape (N workers, K
// servers), read from the environment whatever launcher started it. One rule,
// quantity by quantity, the first source that is set winning:
//
//   servers K     GRADSYNC_NUM_SERVERS, DMLC_NUM_SERVER, else 0
//   workers N     GRADSYNC_NUM_WORKERS, WORLD_SIZE (torchrun: it counts the
//                 workers, for servers too), DMLC_NUM_WORKER; else, in a job
//                 whose launcher numbers every task (Open MPI:
//                 OMPI_COMM_WORLD_*, Slurm: SLURM_PROCID/SLURM_NTASKS), the
//                 tasks less the K servers; else 1
//   role          GRADSYNC_ROLE, DMLC_ROLE; else in such a task-numbered job
//                 tasks 0..N-1 work and tasks N..N+K-1 serve (worker 0 is task
//                 0, on the first node, where MASTER_ADDR points); else worker
//   worker rank   RANK (torchrun), DMLC_WORKER_ID, the task index
//   server rank   GRADSYNC_SERVER_RANK, else the task index less N
//   job id        GRADSYNC_JOB_ID, the launcher's job (core/cluster/job_id.h),
//                 else "": worker 0's coordinator makes one and the others
//                 learn it when they connect
//   coordinator   MASTER_ADDR/MASTER_PORT, DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT
//                 (both set: they must agree), else 127.0.0.1:29500 (worker
//                 0 hosts it)
//
// RANK set means torchrun (or gradsync launch) numbered the workers, and the
// task variables of an enclosing Slurm allocation are ignored. Two sources of
// one quantity that disagree (GRADSYNC_NUM_WORKERS=4 beside WORLD_SIZE=8, or
// N + K differing from the task count) are an error naming both. What one
// process cannot see — another process believing in another shape — the
// coordinator catches at Join (ClusterEnv::shape travels with the Join).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

// This process's identity and where the job's coordinator listens.
struct ClusterEnv : ProcessIdentity {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Who numbered this process: "gradsync", "torchrun", "dmlc", "openmpi",
  // "slurm" or "default".
  std::string source = "default";
  // Where N and K came from, for errors that compare shapes: "4 workers
  // (WORLD_SIZE), 2 servers (GRADSYNC_NUM_SERVERS)".
  std::string shape;

  // "worker 2/4 (torchrun)".
  std::string Describe() const;
  std::string coordinator_target() const;
};

// Reads the environment by the rule above. advertise_host is
// GRADSYNC_ADVERTISE_HOST, else 127.0.0.1 when the coordinator is on
// loopback, else the host name. Inconsistent values (rank >= world size,
// negative or non-numeric, two sources disagreeing) are an error naming the
// variables.
absl::StatusOr<ClusterEnv> ClusterEnvFromEnvironment();

}  // namespace gradsync
