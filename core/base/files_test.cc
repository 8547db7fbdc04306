// WriteFileAtomically: a reader sees the old file or the new one, never half
// of one, and a failed write leaves nothing behind.
#include "core/base/files.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// Every name in `folder` other than `keep`: temporary files left behind.
std::vector<std::string> Others(const std::string& folder,
                                const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().filename() != keep) {
      names.push_back(entry.path().filename());
    }
  }
  return names;
}

std::string Folder(const std::string& name) {
  const std::string folder =
      std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(folder);
  return folder;
}

TEST(WriteFileAtomicallyTest, ReplacesTheWholeFileAndLeavesNoTemporary) {
  const std::string folder = Folder("replace");
  const std::string path = folder + "/summary.json";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(100000, 'a')).ok());
  ASSERT_TRUE(WriteFileAtomically(path, "short").ok());
  EXPECT_EQ(Read(path), "short");
  EXPECT_THAT(Others(folder, "summary.json"), IsEmpty());
}

// The rename fails (a folder is in the way): the error names the path, what
// was there stays, and no temporary file remains.
TEST(WriteFileAtomicallyTest, FailedWriteLeavesNothingBehind) {
  const std::string folder = Folder("failed");
  const std::string path = folder + "/params.worker0";
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  const absl::Status status = WriteFileAtomically(path, "new");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_TRUE(IsDirectory(path));
  EXPECT_THAT(Others(folder, "params.worker0"), IsEmpty());
  // A folder that does not exist: refused, nothing made.
  EXPECT_FALSE(WriteFileAtomically(folder + "/missing/x", "new").ok());
  EXPECT_FALSE(std::filesystem::exists(folder + "/missing"));
}

}  // namespace
}  // namespace gradsync
