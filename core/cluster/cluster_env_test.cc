#include "core/cluster/cluster_env.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

class ClusterEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"RANK",
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
                             "DMLC_WORKER_ID"}) {
      unsetenv(name);
    }
  }
};

TEST_F(ClusterEnvTest, DefaultsToOneWorker) {
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->source, "default");
  EXPECT_EQ(env->coordinator_target(), "127.0.0.1:29500");
}

TEST_F(ClusterEnvTest, Torchrun) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "4321", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->coordinator_target(), "127.0.0.1:4321");
}

TEST_F(ClusterEnvTest, SlurmAndOpenMpi) {
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "6", 1);
  setenv("SLURM_LOCALID", "1", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->rank, 5);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "openmpi");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
}

TEST_F(ClusterEnvTest, ServerRole) {
  setenv("GRADSYNC_ROLE", "server", 1);
  setenv("GRADSYNC_SERVER_RANK", "1", 1);
  setenv("GRADSYNC_NUM_SERVERS", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "0", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->role, Role::kServer);
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->num_servers, 2);
}

TEST_F(ClusterEnvTest, InconsistentValuesNameTheVariable) {
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "4", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("rank 4 is outside the world of 4"));
  setenv("RANK", "x", 1);
  env = ClusterEnvFromEnvironment();
  EXPECT_THAT(std::string(env.status().message()), HasSubstr("RANK='x'"));
  unsetenv("WORLD_SIZE");
  setenv("RANK", "0", 1);  // RANK without WORLD_SIZE
  env = ClusterEnvFromEnvironment();
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("WORLD_SIZE is not"));
  setenv("WORLD_SIZE", "1", 1);
  setenv("GRADSYNC_ROLE", "server", 1);
  env = ClusterEnvFromEnvironment();
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("GRADSYNC_SERVER_RANK"));
}

std::string Error(const absl::StatusOr<ClusterEnv>& env) {
  return env.ok() ? "no error" : std::string(env.status().message());
}

// The case of issue 15: servers given only the documented variables beside
// torchrun's WORLD_SIZE, without RANK, used to believe in one worker.
TEST_F(ClusterEnvTest, ServerReadsWorldSizeWithoutRank) {
  setenv("GRADSYNC_ROLE", "server", 1);
  setenv("GRADSYNC_SERVER_RANK", "7", 1);
  setenv("GRADSYNC_NUM_SERVERS", "8", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "4000", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->role, Role::kServer);
  EXPECT_EQ(env->rank, 7);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->num_servers, 8);
  EXPECT_EQ(env->shape,
            "8 workers (WORLD_SIZE), 8 servers (GRADSYNC_NUM_SERVERS)");
}

TEST_F(ClusterEnvTest, GradsyncVariablesAgreeWithTorchrunOrFail) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("GRADSYNC_NUM_WORKERS", "4", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->world_size, 4);
  setenv("GRADSYNC_NUM_WORKERS", "2", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("the number of workers is 2 by GRADSYNC_NUM_WORKERS "
                        "but 4 by WORLD_SIZE"));
}

// mpirun -np 6 with GRADSYNC_NUM_SERVERS=2: tasks 0..3 work, 4..5 serve.
TEST_F(ClusterEnvTest, OpenMpiTasksSplitIntoWorkersThenServers) {
  setenv("GRADSYNC_NUM_SERVERS", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "6", 1);
  for (int task = 0; task < 6; ++task) {
    setenv("OMPI_COMM_WORLD_RANK", std::to_string(task).c_str(), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(task).c_str(), 1);
    auto env = ClusterEnvFromEnvironment();
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_EQ(env->source, "openmpi");
    EXPECT_EQ(env->world_size, 4);
    EXPECT_EQ(env->num_servers, 2);
    EXPECT_EQ(env->local_rank, task);
    EXPECT_EQ(env->local_world_size, 6);
    EXPECT_EQ(env->role, task < 4 ? Role::kWorker : Role::kServer) << task;
    EXPECT_EQ(env->rank, task < 4 ? task : task - 4);
  }
  // Stated N must add up with K to the task count.
  setenv("GRADSYNC_NUM_WORKERS", "3", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("OMPI_COMM_WORLD_SIZE=6 tasks, but "
                        "GRADSYNC_NUM_WORKERS=3 workers + "
                        "GRADSYNC_NUM_SERVERS=2 servers make 5"));
}

TEST_F(ClusterEnvTest, SlurmTasksSplitAndTorchrunInsideSlurmWins) {
  setenv("GRADSYNC_NUM_SERVERS", "1", 1);
  setenv("SLURM_NTASKS", "3", 1);
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_LOCALID", "0", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->role, Role::kServer);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 2);
  // A task that names itself a worker where the split makes it a server.
  setenv("GRADSYNC_ROLE", "worker", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("tasks 0..1 are the workers"));
  unsetenv("GRADSYNC_ROLE");
  // torchrun inside the allocation: RANK/WORLD_SIZE describe the job.
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->role, Role::kWorker);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
}

TEST_F(ClusterEnvTest, TooFewTasksForTheServers) {
  setenv("GRADSYNC_NUM_SERVERS", "2", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_PROCID", "0", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("SLURM_NTASKS=2 tasks leave no worker"));
}

// BytePS / ps-lite users' variables.
TEST_F(ClusterEnvTest, DmlcVariables) {
  setenv("DMLC_ROLE", "worker", 1);
  setenv("DMLC_NUM_WORKER", "3", 1);
  setenv("DMLC_NUM_SERVER", "2", 1);
  setenv("DMLC_PS_ROOT_URI", "10.213.0.1", 1);
  setenv("DMLC_PS_ROOT_PORT", "9000", 1);
  setenv("DMLC_WORKER_ID", "2", 1);
  auto env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "dmlc");
  EXPECT_EQ(env->role, Role::kWorker);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 3);
  EXPECT_EQ(env->num_servers, 2);
  EXPECT_EQ(env->coordinator_target(), "10.213.0.1:9000");
  unsetenv("DMLC_WORKER_ID");
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("DMLC_ROLE=worker needs DMLC_WORKER_ID"));
  setenv("DMLC_ROLE", "server", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("DMLC_ROLE=server needs GRADSYNC_SERVER_RANK"));
  setenv("GRADSYNC_SERVER_RANK", "1", 1);
  env = ClusterEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->role, Role::kServer);
  EXPECT_EQ(env->rank, 1);
  setenv("DMLC_ROLE", "scheduler", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("gradsync has no scheduler process"));
  setenv("DMLC_ROLE", "server", 1);
  setenv("MASTER_ADDR", "10.213.0.2", 1);
  EXPECT_THAT(
      Error(ClusterEnvFromEnvironment()),
      HasSubstr("MASTER_ADDR=10.213.0.2 but DMLC_PS_ROOT_URI=10.213.0.1"));
  unsetenv("MASTER_ADDR");
  setenv("MASTER_PORT", "9001", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("9001 by MASTER_PORT but 9000 by DMLC_PS_ROOT_PORT"));
  unsetenv("MASTER_PORT");
  setenv("DMLC_ROLE", "server", 1);
  setenv("GRADSYNC_NUM_SERVERS", "3", 1);
  EXPECT_THAT(Error(ClusterEnvFromEnvironment()),
              HasSubstr("3 by GRADSYNC_NUM_SERVERS but 2 by DMLC_NUM_SERVER"));
}

}  // namespace
}  // namespace gradsync
