#include "core/cluster/cluster_env.h"

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_id.h"

namespace gradsync {
namespace {

const char* Env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

// Integer variable `name`, if set; an unparsable or negative value is an
// error naming the variable.
absl::StatusOr<std::optional<int>> ReadInt(const char* name) {
  const char* value = Env(name);
  if (value == nullptr) return std::optional<int>();
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", value,
                     "' is not a non-negative integer"));
  }
  return std::optional<int>(parsed);
}

// A count the job's shape takes from the first of several variables; every
// other one that is set must agree with it.
struct Count {
  int value = 0;
  std::string variable;  // empty: none was set
};

absl::StatusOr<Count> FirstAgreeing(const std::vector<const char*>& names,
                                    const char* what) {
  Count count;
  for (const char* name : names) {
    ASSIGN_OR_RETURN(std::optional<int> value, ReadInt(name));
    if (!value.has_value()) continue;
    if (count.variable.empty()) {
      count.value = *value;
      count.variable = name;
    } else if (*value != count.value) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is ", count.value, " by ", count.variable, " but ", *value,
          " by ", name, "; give every process one value (unset one of them)"));
    }
  }
  return count;
}

// A launcher that numbers every task of the job, servers included.
struct TaskNumbering {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: the launcher has none
};

constexpr TaskNumbering kTaskLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

struct Tasks {
  const TaskNumbering* launcher = nullptr;  // nullptr: none
  int index = 0;
  int count = 0;
};

absl::StatusOr<Tasks> ReadTasks() {
  Tasks tasks;
  for (const TaskNumbering& launcher : kTaskLaunchers) {
    ASSIGN_OR_RETURN(std::optional<int> index, ReadInt(launcher.rank));
    if (!index.has_value()) continue;
    ASSIGN_OR_RETURN(std::optional<int> count, ReadInt(launcher.size));
    if (!count.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(launcher.rank, " is set but ", launcher.size,
                       " is not; set both (the number of tasks)"));
    }
    if (*index >= *count) {
      return absl::InvalidArgumentError(
          absl::StrCat(launcher.rank, "=", *index, " is outside ",
                       launcher.size, "=", *count));
    }
    tasks.launcher = &launcher;
    tasks.index = *index;
    tasks.count = *count;
    break;
  }
  return tasks;
}

// GRADSYNC_ROLE, else DMLC_ROLE; nullopt when neither says.
absl::StatusOr<std::optional<Role>> ExplicitRole() {
  for (const char* name : {"GRADSYNC_ROLE", "DMLC_ROLE"}) {
    const char* role = Env(name);
    if (role == nullptr) continue;
    const std::string value = role;
    if (value == "worker") return std::optional<Role>(Role::kWorker);
    if (value == "server") return std::optional<Role>(Role::kServer);
    if (value == "scheduler") {
      return absl::InvalidArgumentError(absl::StrCat(
          name,
          "=scheduler: gradsync has no scheduler process; worker 0 hosts the "
          "coordinator at MASTER_ADDR:MASTER_PORT (or "
          "DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT), so start only workers and "
          "servers"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", value, "' is neither 'worker' nor 'server'"));
  }
  return std::optional<Role>();
}

std::string Plural(int n, const char* what) {
  return absl::StrCat(n, " ", what, n == 1 ? "" : "s");
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
  ASSIGN_OR_RETURN(const Count servers,
                   FirstAgreeing({"GRADSYNC_NUM_SERVERS", "DMLC_NUM_SERVER"},
                                 "the number of servers"));
  ASSIGN_OR_RETURN(
      const Count workers,
      FirstAgreeing({"GRADSYNC_NUM_WORKERS", "WORLD_SIZE", "DMLC_NUM_WORKER"},
                    "the number of workers"));
  ASSIGN_OR_RETURN(std::optional<int> torchrun_rank, ReadInt("RANK"));
  ASSIGN_OR_RETURN(std::optional<Role> role, ExplicitRole());
  // torchrun (or gradsync launch) numbering the workers inside a Slurm
  // allocation: its variables, not the allocation's, describe the job.
  if (torchrun_rank.has_value() && workers.variable.empty()) {
    return absl::InvalidArgumentError(
        "RANK is set but WORLD_SIZE is not; set both (WORLD_SIZE is the "
        "number of workers)");
  }
  Tasks tasks;
  if (!torchrun_rank.has_value()) {
    ASSIGN_OR_RETURN(tasks, ReadTasks());
  }

  env.num_servers = servers.value;
  std::string workers_from = workers.variable;
  if (!workers.variable.empty()) {
    env.world_size = workers.value;
  } else if (tasks.launcher != nullptr) {
    env.world_size = tasks.count - env.num_servers;
    workers_from = absl::StrCat(tasks.launcher->size, "=", tasks.count,
                                " tasks less ", env.num_servers, " servers");
    if (env.world_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(tasks.launcher->size, "=", tasks.count,
                       " tasks leave no worker "
                       "beside ",
                       env.num_servers, " servers (", servers.variable,
                       "); the job needs at least one worker"));
    }
  } else {
    workers_from = "no variable: one worker";
  }
  if (tasks.launcher != nullptr && !workers.variable.empty() &&
      env.world_size + env.num_servers != tasks.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        tasks.launcher->size, "=", tasks.count, " tasks, but ",
        workers.variable, "=", env.world_size, " workers + ",
        servers.variable.empty() ? std::string("no")
                                 : absl::StrCat(servers.variable, "="),
        env.num_servers, " servers make ", env.world_size + env.num_servers,
        "; every task is a worker or a server: make them agree"));
  }
  env.shape = absl::StrCat(
      Plural(env.world_size, "worker"), " (", workers_from, "), ",
      Plural(env.num_servers, "server"), " (",
      servers.variable.empty() ? std::string("no variable") : servers.variable,
      ")");

  // The role: named, or by the task's place in a task-numbered job.
  if (role.has_value()) {
    env.role = *role;
  } else if (tasks.launcher != nullptr) {
    env.role = tasks.index < env.world_size ? Role::kWorker : Role::kServer;
  }
  if (tasks.launcher != nullptr) env.source = tasks.launcher->source;
  if (Env("DMLC_ROLE") != nullptr) env.source = "dmlc";
  if (torchrun_rank.has_value()) env.source = "torchrun";
  if (Env("GRADSYNC_LAUNCHER") != nullptr) env.source = "gradsync";

  if (env.role == Role::kWorker) {
    ASSIGN_OR_RETURN(std::optional<int> dmlc_rank, ReadInt("DMLC_WORKER_ID"));
    if (torchrun_rank.has_value()) {
      env.rank = *torchrun_rank;
    } else if (dmlc_rank.has_value()) {
      env.rank = *dmlc_rank;
    } else if (tasks.launcher != nullptr) {
      env.rank = tasks.index;
      if (tasks.index >= env.world_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "this process is a worker (",
            Env("GRADSYNC_ROLE") ? "GRADSYNC_ROLE" : "DMLC_ROLE", ") but task ",
            tasks.index, " (", tasks.launcher->rank, "); tasks 0..",
            env.world_size - 1, " are the workers and the rest the servers"));
      }
    } else if (Env("DMLC_ROLE") != nullptr) {
      return absl::InvalidArgumentError(
          "DMLC_ROLE=worker needs DMLC_WORKER_ID (or RANK): ps-lite numbers "
          "workers at its scheduler, gradsync needs each worker's rank up "
          "front");
    }
    if (env.rank >= env.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", env.rank, " is outside the world of ", env.world_size,
          " workers (", env.shape, "; ", env.source, " variables)"));
    }
  } else {
    ASSIGN_OR_RETURN(std::optional<int> server_rank,
                     ReadInt("GRADSYNC_SERVER_RANK"));
    if (server_rank.has_value()) {
      env.rank = *server_rank;
    } else if (tasks.launcher != nullptr) {
      env.rank = tasks.index - env.world_size;
      if (env.rank < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "this process is a server but task ", tasks.index, " (",
            tasks.launcher->rank, "); tasks 0..", env.world_size - 1,
            " are the workers, tasks ", env.world_size, "..", tasks.count - 1,
            " the servers"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(Env("GRADSYNC_ROLE") ? "GRADSYNC_ROLE" : "DMLC_ROLE",
                       "=server needs GRADSYNC_SERVER_RANK (0..servers-1)"));
    }
    if (env.rank >= env.num_servers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server rank ", env.rank, " is outside the job's ",
          Plural(env.num_servers, "server"), " (", env.shape,
          "); set GRADSYNC_NUM_SERVERS (or DMLC_NUM_SERVER) for every "
          "process"));
    }
  }

  // Where this process sits on its host.
  if (torchrun_rank.has_value() || tasks.launcher == nullptr) {
    ASSIGN_OR_RETURN(std::optional<int> local, ReadInt("LOCAL_RANK"));
    if (local.has_value()) env.local_rank = *local;
  } else {
    ASSIGN_OR_RETURN(std::optional<int> local,
                     ReadInt(tasks.launcher->local_rank));
    if (local.has_value()) env.local_rank = *local;
    if (tasks.launcher->local_size != nullptr) {
      ASSIGN_OR_RETURN(std::optional<int> size,
                       ReadInt(tasks.launcher->local_size));
      if (size.has_value()) env.local_world_size = *size;
    }
  }
  ASSIGN_OR_RETURN(std::optional<int> local_size, ReadInt("LOCAL_WORLD_SIZE"));
  if (local_size.has_value()) env.local_world_size = *local_size;
  if (env.local_world_size < 1) env.local_world_size = 1;

  // torchrun's and ps-lite's names for the coordinator's address: either,
  // or both when they agree.
  const char* master = Env("MASTER_ADDR");
  const char* root = Env("DMLC_PS_ROOT_URI");
  if (master != nullptr && root != nullptr && std::string(master) != root) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_ADDR=", master, " but DMLC_PS_ROOT_URI=", root,
        "; both name worker 0's host, where the coordinator runs: unset one"));
  }
  if (master != nullptr) {
    env.master_addr = master;
  } else if (root != nullptr) {
    env.master_addr = root;
  }
  ASSIGN_OR_RETURN(const Count port,
                   FirstAgreeing({"MASTER_PORT", "DMLC_PS_ROOT_PORT"},
                                 "the coordinator's port"));
  if (!port.variable.empty()) env.master_port = port.value;
  env.job_id = JobIdFromEnvironment();
  if (const char* host = Env("GRADSYNC_ADVERTISE_HOST")) {
    env.advertise_host = host;
  } else if (env.master_addr != "localhost" &&
             env.master_addr.rfind("127.", 0) != 0) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) == 0) env.advertise_host = name;
  }

  if (env.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job needs at least one worker (", env.shape, ")"));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", env.master_port, " is not a TCP port"));
  }
  return env;
}

}  // namespace gradsync
