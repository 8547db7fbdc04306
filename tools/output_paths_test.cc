#include "tools/output_paths.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

void Touch(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr) << path;
  std::fclose(file);
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

TEST(OutputPathsTest, AFileInAWritableFolderIsAccepted) {
  const std::string dir = TempDir("ok");
  EXPECT_TRUE(CheckOutputFile("--dump_params", "").ok());
  EXPECT_TRUE(CheckOutputFile("--dump_params", dir + "/params.worker0").ok());
  Touch(dir + "/existing");
  EXPECT_TRUE(CheckOutputFile("--dump_params", dir + "/existing").ok());
  EXPECT_FALSE(Exists(dir + "/params.worker0")) << "the check wrote a file";
}

TEST(OutputPathsTest, AFileThatCannotBeWrittenIsRefusedNamingFlagAndPath) {
  const std::string dir = TempDir("bad_file");
  mkdir((dir + "/t.worker1.json").c_str(), 0755);
  const absl::Status folder =
      CheckOutputFile("--trace", dir + "/t.worker1.json");
  EXPECT_THAT(std::string(folder.message()),
              AllOf(HasSubstr("--trace="), HasSubstr("it is a folder")));
  Touch(dir + "/plain");
  const absl::Status under_file =
      CheckOutputFile("--trace", dir + "/plain/t.json");
  EXPECT_THAT(std::string(under_file.message()),
              HasSubstr(dir + "/plain is a file, not a folder"));
}

TEST(OutputPathsTest, AFolderToCreateNeedsAWritableAncestorAndNoFile) {
  const std::string dir = TempDir("folders");
  EXPECT_TRUE(CheckOutputFolder("--metrics_dir", dir + "/a/b/c").ok());
  EXPECT_FALSE(Exists(dir + "/a")) << "the check created a folder";
  EXPECT_TRUE(CheckOutputFolder("--metrics_dir", dir).ok());
  Touch(dir + "/file");
  const absl::Status status =
      CheckOutputFolder("--metrics_dir", dir + "/file/run");
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("--metrics_dir=" + dir + "/file/run"),
                    HasSubstr(dir + "/file is a file, not a folder")));
  EXPECT_FALSE(CheckOutputFolder("--metrics_dir", dir + "/file").ok());
}

// A folder that does not exist yet may be named (on one machine another
// worker may make it): the check creates nothing, and the preparation
// before the run creates it, so the files written at the end have one.
TEST(OutputPathsTest, MissingFoldersAreCreatedBeforeTheRunNotByTheCheck) {
  const std::string dir = TempDir("created");
  WorkerOutputs outputs;
  outputs.metrics_dir = dir + "/run/";
  outputs.dump_params = dir + "/params/p";
  outputs.trace = dir + "/trace/t.json";
  EXPECT_TRUE(CheckWorkerOutputs(0, outputs).ok());
  EXPECT_FALSE(Exists(dir + "/run"));
  EXPECT_FALSE(Exists(dir + "/params"));
  ASSERT_TRUE(PrepareWorkerOutputs(0, outputs).ok());
  EXPECT_TRUE(Exists(dir + "/run"));
  EXPECT_TRUE(Exists(dir + "/params"));
  EXPECT_TRUE(Exists(dir + "/trace"));
  Touch(dir + "/plain");
  outputs.dump_params = dir + "/plain/sub/p";
  const absl::Status status = PrepareWorkerOutputs(1, outputs);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("--dump_params=" + dir + "/plain/sub/p.worker1"),
                    HasSubstr(dir + "/plain is a file, not a folder")));
}

TEST(OutputPathsTest, PreparingAFileMakesItsFolderOnly) {
  const std::string dir = TempDir("prepare_file");
  ASSERT_TRUE(PrepareOutputFile("--trace", dir + "/a/b/t.server0.json").ok());
  EXPECT_TRUE(Exists(dir + "/a/b"));
  EXPECT_FALSE(Exists(dir + "/a/b/t.server0.json"));
  EXPECT_TRUE(PrepareOutputFile("--trace", "").ok());
}

}  // namespace
}  // namespace gradsync
