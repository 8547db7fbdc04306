#include "core/checkpoint.h"

#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR")) + "/" + name;
}

Checkpoint Sample() {
  Checkpoint c;
  c.model = "mlp-4-3-2";
  c.epoch = 2;
  c.step = 17;
  c.optimizer_step = 17;
  c.params = {1.5f, -2.0f, 3.25f};
  c.optimizer_state = {{0.1f, 0.2f, 0.3f}, {4, 5, 6}};
  return c;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

TEST(CheckpointTest, RoundTrip) {
  const std::string path = TempPath("roundtrip.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  auto read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->model, "mlp-4-3-2");
  EXPECT_EQ(read->epoch, 2);
  EXPECT_EQ(read->step, 17);
  EXPECT_EQ(read->params, Sample().params);
  EXPECT_EQ(read->optimizer_state, Sample().optimizer_state);
}

TEST(CheckpointTest, CorruptOrTruncatedIsRefusedNamingTheFile) {
  const std::string path = TempPath("corrupt.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  const std::string good = ReadAll(path);

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x40;
  WriteAll(path, flipped);
  auto read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("CRC"));

  WriteAll(path, good.substr(0, good.size() - 9));
  EXPECT_FALSE(ReadCheckpoint(path).ok());
  WriteAll(path, "not a checkpoint at all");
  read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("bad magic"));
  EXPECT_EQ(ReadCheckpoint(TempPath("absent.ckpt")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, FailedWriteLeavesThePreviousCheckpoint) {
  const std::string path = TempPath("keep.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  // A folder that does not exist: the temporary file cannot be created.
  EXPECT_FALSE(WriteCheckpoint(TempPath("no/such/dir/x.ckpt"), Sample()).ok());
  EXPECT_TRUE(ReadCheckpoint(path).ok());
}

}  // namespace
}  // namespace gradsync
