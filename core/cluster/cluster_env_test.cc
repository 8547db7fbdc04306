// ClusterEnvFromEnvironment over tables of environments: the ones it accepts
// with what it must read from them, and the ones it refuses with the words
// the error must contain. Every case starts from an environment without any
// of the variables it reads.
#include "core/cluster/cluster_env.h"

#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using Variables = std::vector<std::pair<std::string, std::string>>;

// Every variable ClusterEnvFromEnvironment reads.
constexpr const char* kVariables[] = {"RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "SLURM_PROCID",
                                      "SLURM_NTASKS",
                                      "SLURM_LOCALID",
                                      "OMPI_COMM_WORLD_RANK",
                                      "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "GRADSYNC_ROLE",
                                      "GRADSYNC_SERVER_RANK",
                                      "GRADSYNC_NUM_SERVERS",
                                      "GRADSYNC_JOB_ID",
                                      "GRADSYNC_LAUNCHER",
                                      "GRADSYNC_ADVERTISE_HOST",
                                      "LOCAL_WORLD_SIZE",
                                      "GRADSYNC_NUM_WORKERS",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE",
                                      "DMLC_ROLE",
                                      "DMLC_NUM_WORKER",
                                      "DMLC_NUM_SERVER",
                                      "DMLC_PS_ROOT_URI",
                                      "DMLC_PS_ROOT_PORT",
                                      "DMLC_WORKER_ID"};

// The environment of `variables` alone.
void SetEnvironment(const Variables& variables) {
  for (const char* name : kVariables) unsetenv(name);
  for (const auto& [name, value] : variables) {
    setenv(name.c_str(), value.c_str(), 1);
  }
}

Variables With(Variables base, const Variables& more) {
  for (const auto& variable : more) base.push_back(variable);
  return base;
}

// A BytePS / ps-lite worker's variables.
const Variables& DmlcWorker() {
  static const Variables* const variables =
      new Variables{{"DMLC_ROLE", "worker"},
                    {"DMLC_NUM_WORKER", "3"},
                    {"DMLC_NUM_SERVER", "2"},
                    {"DMLC_PS_ROOT_URI", "10.213.0.1"},
                    {"DMLC_PS_ROOT_PORT", "9000"}};
  return *variables;
}

// The same job's second server (no DMLC_WORKER_ID).
Variables DmlcServer() {
  Variables variables = DmlcWorker();
  variables[0].second = "server";
  variables.push_back({"GRADSYNC_SERVER_RANK", "1"});
  return variables;
}

// Task `task` of `mpirun -np 6` with GRADSYNC_NUM_SERVERS=2: tasks 0..3
// work, 4..5 serve.
Variables OpenMpiTask(int task) {
  return {{"GRADSYNC_NUM_SERVERS", "2"},
          {"OMPI_COMM_WORLD_SIZE", "6"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "6"},
          {"OMPI_COMM_WORLD_RANK", std::to_string(task)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(task)}};
}

// Three Slurm tasks with GRADSYNC_NUM_SERVERS=1: task 2 serves.
const Variables& SlurmServerTask() {
  static const Variables* const variables =
      new Variables{{"GRADSYNC_NUM_SERVERS", "1"},
                    {"SLURM_NTASKS", "3"},
                    {"SLURM_PROCID", "2"},
                    {"SLURM_LOCALID", "0"}};
  return *variables;
}

struct Accepted {
  std::string name;
  Variables variables;
  // Unset: not checked.
  std::optional<std::string> source;
  Role role = Role::kWorker;
  int rank = 0;
  int world_size = 1;
  int num_servers = 0;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::optional<std::string> coordinator;
  std::optional<std::string> shape;
};

std::ostream& operator<<(std::ostream& out, const Accepted& c) {
  return out << c.name;
}

Accepted OpenMpiTaskCase(int task) {
  Accepted c{"OpenMpiTask" + std::to_string(task), OpenMpiTask(task),
             "openmpi"};
  c.role = task < 4 ? Role::kWorker : Role::kServer;
  c.rank = task < 4 ? task : task - 4;
  c.world_size = 4;
  c.num_servers = 2;
  c.local_rank = task;
  c.local_world_size = 6;
  return c;
}

std::vector<Accepted> AcceptedCases() {
  std::vector<Accepted> cases;
  {
    Accepted c{"DefaultsToOneWorker", {}, "default"};
    c.coordinator = "127.0.0.1:29500";
    cases.push_back(c);
  }
  {
    Accepted c{"Torchrun",
               {{"RANK", "3"},
                {"WORLD_SIZE", "8"},
                {"LOCAL_RANK", "1"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", "4321"}},
               "torchrun"};
    c.rank = 3;
    c.world_size = 8;
    c.local_rank = 1;
    c.coordinator = "127.0.0.1:4321";
    cases.push_back(c);
  }
  const Variables slurm = {
      {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}};
  {
    Accepted c{"Slurm", slurm, "slurm"};
    c.rank = 5;
    c.world_size = 6;
    c.local_rank = 1;
    cases.push_back(c);
  }
  {
    Accepted c{"OpenMpiOverSlurm",
               With(slurm, {{"OMPI_COMM_WORLD_RANK", "2"},
                            {"OMPI_COMM_WORLD_SIZE", "4"}}),
               "openmpi"};
    c.rank = 2;
    c.world_size = 4;
    cases.push_back(c);
  }
  {
    Accepted c{"ServerRole",
               {{"GRADSYNC_ROLE", "server"},
                {"GRADSYNC_SERVER_RANK", "1"},
                {"GRADSYNC_NUM_SERVERS", "2"},
                {"WORLD_SIZE", "4"},
                {"RANK", "0"}},
               "torchrun"};
    c.role = Role::kServer;
    c.rank = 1;
    c.world_size = 4;
    c.num_servers = 2;
    cases.push_back(c);
  }
  {
    // The case of issue 15: servers given only the documented variables
    // beside torchrun's WORLD_SIZE, without RANK, used to believe in one
    // worker.
    Accepted c{"ServerReadsWorldSizeWithoutRank",
               {{"GRADSYNC_ROLE", "server"},
                {"GRADSYNC_SERVER_RANK", "7"},
                {"GRADSYNC_NUM_SERVERS", "8"},
                {"WORLD_SIZE", "8"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", "4000"}}};
    c.role = Role::kServer;
    c.rank = 7;
    c.world_size = 8;
    c.num_servers = 8;
    c.shape = "8 workers (WORLD_SIZE), 8 servers (GRADSYNC_NUM_SERVERS)";
    cases.push_back(c);
  }
  {
    Accepted c{
        "GradsyncWorkersAgreeWithTorchrun",
        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"GRADSYNC_NUM_WORKERS", "4"}},
        "torchrun"};
    c.rank = 1;
    c.world_size = 4;
    cases.push_back(c);
  }
  for (int task = 0; task < 6; ++task) cases.push_back(OpenMpiTaskCase(task));
  {
    Accepted c{"SlurmTasksSplitIntoWorkersThenServers", SlurmServerTask(),
               "slurm"};
    c.role = Role::kServer;
    c.rank = 0;
    c.world_size = 2;
    c.num_servers = 1;
    cases.push_back(c);
  }
  {
    // torchrun inside the allocation: RANK/WORLD_SIZE describe the job.
    Accepted c{"TorchrunInsideSlurmWins",
               With(SlurmServerTask(), {{"RANK", "2"}, {"WORLD_SIZE", "4"}}),
               "torchrun"};
    c.rank = 2;
    c.world_size = 4;
    c.num_servers = 1;
    cases.push_back(c);
  }
  {
    Accepted c{"DmlcWorker", With(DmlcWorker(), {{"DMLC_WORKER_ID", "2"}}),
               "dmlc"};
    c.rank = 2;
    c.world_size = 3;
    c.num_servers = 2;
    c.coordinator = "10.213.0.1:9000";
    cases.push_back(c);
  }
  {
    Accepted c{"DmlcServer", DmlcServer(), "dmlc"};
    c.role = Role::kServer;
    c.rank = 1;
    c.world_size = 3;
    c.num_servers = 2;
    cases.push_back(c);
  }
  return cases;
}

class AcceptedEnvironmentTest : public ::testing::TestWithParam<Accepted> {};

TEST_P(AcceptedEnvironmentTest, ReadsTheProcessAndTheJob) {
  const Accepted& c = GetParam();
  SetEnvironment(c.variables);
  const absl::StatusOr<ClusterEnv> env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  if (c.source) EXPECT_EQ(env->source, *c.source);
  EXPECT_EQ(env->role, c.role);
  EXPECT_EQ(env->rank, c.rank);
  EXPECT_EQ(env->world_size, c.world_size);
  EXPECT_EQ(env->num_servers, c.num_servers);
  if (c.local_rank) EXPECT_EQ(env->local_rank, *c.local_rank);
  if (c.local_world_size) {
    EXPECT_EQ(env->local_world_size, *c.local_world_size);
  }
  if (c.coordinator) EXPECT_EQ(env->coordinator_target(), *c.coordinator);
  if (c.shape) EXPECT_EQ(env->shape, *c.shape);
}

INSTANTIATE_TEST_SUITE_P(ClusterEnv, AcceptedEnvironmentTest,
                         ::testing::ValuesIn(AcceptedCases()),
                         [](const ::testing::TestParamInfo<Accepted>& info) {
                           return info.param.name;
                         });

struct Refused {
  std::string name;
  Variables variables;
  std::string error;  // a part of the message
};

std::ostream& operator<<(std::ostream& out, const Refused& c) {
  return out << c.name;
}

std::vector<Refused> RefusedCases() {
  return {
      {"RankOutsideTheWorld",
       {{"RANK", "4"}, {"WORLD_SIZE", "4"}},
       "rank 4 is outside the world of 4"},
      {"RankNotANumber", {{"RANK", "x"}, {"WORLD_SIZE", "4"}}, "RANK='x'"},
      {"RankWithoutWorldSize", {{"RANK", "0"}}, "WORLD_SIZE is not"},
      {"ServerWithoutServerRank",
       {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"GRADSYNC_ROLE", "server"}},
       "GRADSYNC_SERVER_RANK"},
      {"GradsyncWorkersDisagreeWithTorchrun",
       {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"GRADSYNC_NUM_WORKERS", "2"}},
       "the number of workers is 2 by GRADSYNC_NUM_WORKERS but 4 by "
       "WORLD_SIZE"},
      // A stated N must add up with K to the task count.
      {"OpenMpiTasksDisagreeWithWorkersAndServers",
       With(OpenMpiTask(5), {{"GRADSYNC_NUM_WORKERS", "3"}}),
       "OMPI_COMM_WORLD_SIZE=6 tasks, but GRADSYNC_NUM_WORKERS=3 workers + "
       "GRADSYNC_NUM_SERVERS=2 servers make 5"},
      // A task that names itself a worker where the split makes it a server.
      {"SlurmServerTaskNamedWorker",
       With(SlurmServerTask(), {{"GRADSYNC_ROLE", "worker"}}),
       "tasks 0..1 are the workers"},
      {"TooFewTasksForTheServers",
       {{"GRADSYNC_NUM_SERVERS", "2"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_PROCID", "0"}},
       "SLURM_NTASKS=2 tasks leave no worker"},
      {"DmlcWorkerWithoutWorkerId", DmlcWorker(),
       "DMLC_ROLE=worker needs DMLC_WORKER_ID"},
      {"DmlcServerWithoutServerRank",
       With(DmlcWorker(), {{"DMLC_ROLE", "server"}}),
       "DMLC_ROLE=server needs GRADSYNC_SERVER_RANK"},
      {"DmlcScheduler", With(DmlcServer(), {{"DMLC_ROLE", "scheduler"}}),
       "gradsync has no scheduler process"},
      {"DmlcRootDisagreesWithMasterAddr",
       With(DmlcServer(), {{"MASTER_ADDR", "10.213.0.2"}}),
       "MASTER_ADDR=10.213.0.2 but DMLC_PS_ROOT_URI=10.213.0.1"},
      {"DmlcPortDisagreesWithMasterPort",
       With(DmlcServer(), {{"MASTER_PORT", "9001"}}),
       "9001 by MASTER_PORT but 9000 by DMLC_PS_ROOT_PORT"},
      {"DmlcServersDisagreeWithGradsync",
       With(DmlcServer(), {{"GRADSYNC_NUM_SERVERS", "3"}}),
       "3 by GRADSYNC_NUM_SERVERS but 2 by DMLC_NUM_SERVER"},
  };
}

class RefusedEnvironmentTest : public ::testing::TestWithParam<Refused> {};

TEST_P(RefusedEnvironmentTest, NamesTheVariables) {
  const Refused& c = GetParam();
  SetEnvironment(c.variables);
  const absl::StatusOr<ClusterEnv> env = ClusterEnvFromEnvironment();
  ASSERT_FALSE(env.ok()) << "accepted as " << env->Describe();
  EXPECT_THAT(std::string(env.status().message()), HasSubstr(c.error));
}

INSTANTIATE_TEST_SUITE_P(ClusterEnv, RefusedEnvironmentTest,
                         ::testing::ValuesIn(RefusedCases()),
                         [](const ::testing::TestParamInfo<Refused>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace gradsync
