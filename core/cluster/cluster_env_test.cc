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
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
          "OMPI_COMM_WORLD_LOCAL_RANK", "GRADSYNC_ROLE", "GRADSYNC_SERVER_RANK",
          "GRADSYNC_NUM_SERVERS", "GRADSYNC_JOB_ID", "GRADSYNC_LAUNCHER",
          "GRADSYNC_ADVERTISE_HOST", "LOCAL_WORLD_SIZE"}) {
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
  setenv("RANK", "0", 1);
  env = ClusterEnvFromEnvironment();
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("WORLD_SIZE is not"));
  setenv("WORLD_SIZE", "1", 1);
  setenv("GRADSYNC_ROLE", "server", 1);
  env = ClusterEnvFromEnvironment();
  EXPECT_THAT(std::string(env.status().message()),
              HasSubstr("GRADSYNC_SERVER_RANK"));
}

}  // namespace
}  // namespace gradsync
