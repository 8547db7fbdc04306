// Issue 30's checkpoint defects, each reproduced: a directory as checkpoint
// (read threw std::ios_failure), a missing folder found only at the first
// write, an existing checkpoint silently overwritten without --resume, and
// a killed writer's <path>.tmp.<pid> never removed.
#include "core/optim/checkpoint_path.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/optim/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

void Touch(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr) << path;
  std::fputs("x", file);
  std::fclose(file);
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

TEST(CheckpointPathTest, ADirectoryIsRefusedAtStartAndByTheReader) {
  const std::string dir = TempDir("directory");
  const absl::Status status = CheckCheckpointPath(dir, {.resume = true});
  EXPECT_THAT(std::string(status.message()), HasSubstr("is a directory"));
  // Reading it returned an error instead of throwing.
  const auto read = ReadCheckpoint(dir);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("is a directory"));
}

TEST(CheckpointPathTest, AServerShardThatIsADirectoryIsRefused) {
  const std::string dir = TempDir("shards");
  const std::string path = dir + "/model.ckpt";
  mkdir((path + ".server1").c_str(), 0755);
  CheckpointPathOptions options;
  options.num_servers = 2;
  const absl::Status status = CheckCheckpointPath(path, options);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(path + ".server1 is a directory"));
  EXPECT_FALSE(CheckCheckpointFile(path + ".server1").ok());
  EXPECT_TRUE(CheckCheckpointFile(path + ".server0").ok());
}

TEST(CheckpointPathTest, AMissingFolderIsFoundAtStart) {
  const std::string path = TempDir("x") + "/missing/model.ckpt";
  const absl::Status status = CheckCheckpointPath(path, {});
  EXPECT_THAT(std::string(status.message()), HasSubstr("does not exist"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("/missing"));
}

TEST(CheckpointPathTest, AnExistingCheckpointNeedsResumeOrOverwrite) {
  const std::string path = TempDir("existing") + "/model.ckpt";
  EXPECT_TRUE(CheckCheckpointPath(path, {}).ok()) << "absent: a fresh run";
  Touch(path);
  const absl::Status status = CheckCheckpointPath(path, {});
  EXPECT_THAT(std::string(status.message()), HasSubstr("already exists"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--resume"));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--overwrite_checkpoint"));
  EXPECT_TRUE(CheckCheckpointPath(path, {.resume = true}).ok());
  EXPECT_TRUE(CheckCheckpointPath(path, {.overwrite = true}).ok());
}

TEST(CheckpointPathTest, StaleTempFilesOfDeadWritersAreRemoved) {
  const std::string dir = TempDir("stale");
  const std::string path = dir + "/model.ckpt";
  // A pid that is certainly gone: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const std::string stale = absl::StrCat(path, ".tmp.", child);
  const std::string stale_shard = absl::StrCat(path, ".server0.tmp.", child);
  const std::string stale_residual =
      absl::StrCat(path, ".residual12.tmp.", child);
  const std::string live = absl::StrCat(path, ".tmp.", getpid());
  const std::string live_residual =
      absl::StrCat(path, ".residual1.tmp.", getpid());
  const std::string other = absl::StrCat(dir, "/other.ckpt.tmp.", child);
  const std::string unrelated =
      absl::StrCat(path, ".residual_notes.tmp.", child);
  for (const std::string& file : {stale, stale_shard, stale_residual, live,
                                  live_residual, other, unrelated}) {
    Touch(file);
  }
  EXPECT_TRUE(CheckCheckpointPath(path, {}).ok());
  EXPECT_FALSE(Exists(stale));
  EXPECT_FALSE(Exists(stale_shard));
  EXPECT_FALSE(Exists(stale_residual))
      << "a killed worker's residual temporary file was left behind";
  EXPECT_TRUE(Exists(live)) << "a live writer's file was removed";
  EXPECT_TRUE(Exists(live_residual)) << "a live writer's file was removed";
  EXPECT_TRUE(Exists(other)) << "another checkpoint's file was removed";
  EXPECT_TRUE(Exists(unrelated)) << "a file gradsync never writes was removed";
}

// Residuals are a checkpoint's state: a resume keeps them, a run that
// starts over removes the earlier run's so that none outlives its checkpoint.
TEST(CheckpointPathTest, EarlierResidualsAreKeptOnlyForAResume) {
  const std::string dir = TempDir("residuals");
  const std::string path = dir + "/model.ckpt";
  const std::string residuals[] = {path + ".residual0",
                                   path + ".residual3.previous"};
  const std::string unrelated = path + ".residuals.txt";
  Touch(path);
  for (const std::string& file : residuals) Touch(file);
  Touch(unrelated);
  EXPECT_TRUE(CheckCheckpointPath(path, {.resume = true}).ok());
  for (const std::string& file : residuals) EXPECT_TRUE(Exists(file)) << file;
  EXPECT_TRUE(CheckCheckpointPath(path, {.overwrite = true}).ok());
  for (const std::string& file : residuals) EXPECT_FALSE(Exists(file)) << file;
  EXPECT_TRUE(Exists(unrelated));
}

}  // namespace
}  // namespace gradsync
