#include "core/cluster/cluster_env.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

const char* Env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

// Reads integer variable `name` into *out if it is set; an unparsable or
// negative value is an error naming the variable.
absl::Status ReadInt(const char* name, int* out, bool* found) {
  const char* value = Env(name);
  if (found != nullptr) *found = value != nullptr;
  if (value == nullptr) return absl::OkStatus();
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", value,
                     "' is not a non-negative integer"));
  }
  *out = parsed;
  return absl::OkStatus();
}

}  // namespace

std::string ClusterEnv::Describe() const {
  return absl::StrCat(RoleName(role), " ", rank, "/",
                      role == Role::kServer ? num_servers : world_size, " (",
                      source, ")");
}

std::string ClusterEnv::coordinator_target() const {
  return absl::StrCat(master_addr, ":", master_port);
}

absl::StatusOr<ClusterEnv> ClusterEnvFromEnvironment() {
  ClusterEnv env;
  bool found = false;
  // The launcher families, most specific first. Only the first family that
  // names a rank is used, so a torchrun job inside a Slurm allocation works.
  struct Family {
    const char* source;
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  const Family families[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Family& family : families) {
    RETURN_IF_ERROR(ReadInt(family.rank, &env.rank, &found));
    if (!found) continue;
    bool has_size = false;
    RETURN_IF_ERROR(ReadInt(family.size, &env.world_size, &has_size));
    if (!has_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(family.rank, " is set but ", family.size,
                       " is not; set both (the number of workers)"));
    }
    RETURN_IF_ERROR(ReadInt(family.local_rank, &env.local_rank, nullptr));
    env.source = family.source;
    break;
  }
  if (Env("GRADSYNC_LAUNCHER") != nullptr) env.source = "gradsync";

  RETURN_IF_ERROR(ReadInt("GRADSYNC_NUM_SERVERS", &env.num_servers, nullptr));
  const char* role = Env("GRADSYNC_ROLE");
  if (role != nullptr) {
    if (std::string(role) == "server") {
      env.role = Role::kServer;
      bool has_rank = false;
      RETURN_IF_ERROR(ReadInt("GRADSYNC_SERVER_RANK", &env.rank, &has_rank));
      if (!has_rank) {
        return absl::InvalidArgumentError(
            "GRADSYNC_ROLE=server needs GRADSYNC_SERVER_RANK (0..servers-1)");
      }
    } else if (std::string(role) != "worker") {
      return absl::InvalidArgumentError(absl::StrCat(
          "GRADSYNC_ROLE='", role, "' is neither 'worker' nor 'server'"));
    }
  }
  if (const char* addr = Env("MASTER_ADDR")) env.master_addr = addr;
  RETURN_IF_ERROR(ReadInt("MASTER_PORT", &env.master_port, nullptr));
  if (const char* job = Env("GRADSYNC_JOB_ID")) env.job_id = job;
  RETURN_IF_ERROR(ReadInt("LOCAL_WORLD_SIZE", &env.local_world_size, nullptr));
  if (env.local_world_size < 1) env.local_world_size = 1;
  if (const char* host = Env("GRADSYNC_ADVERTISE_HOST")) {
    env.advertise_host = host;
  } else if (env.master_addr != "localhost" &&
             env.master_addr.rfind("127.", 0) != 0) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) == 0) env.advertise_host = name;
  }

  if (env.world_size < 1) {
    return absl::InvalidArgumentError(
        "the world size (WORLD_SIZE or equivalent) must be at least 1");
  }
  if (env.role == Role::kWorker && env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", env.rank, " is outside the world of ",
                     env.world_size, " workers (", env.source, " variables)"));
  }
  if (env.role == Role::kServer && env.rank >= env.num_servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("GRADSYNC_SERVER_RANK=", env.rank,
                     " but GRADSYNC_NUM_SERVERS=", env.num_servers));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", env.master_port, " is not a TCP port"));
  }
  return env;
}

}  // namespace gradsync
