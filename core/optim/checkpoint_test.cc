#include "core/optim/checkpoint.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "zlib.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR")) + "/" + name;
}

Checkpoint Sample() {
  Checkpoint c;
  c.model = "mlp-4-3-2";
  c.step = 17;
  c.epoch = 2;
  c.epoch_step = 3;
  c.seed = 7;
  c.world_size = 2;
  c.batch_size = 16;
  c.optimizer = "adam";
  c.optimizer_step = 17;
  c.params = {1.5f, -2.0f, 3.25f};
  c.optimizer_state = {{0.1f, 0.2f, 0.3f}, {4, 5, 6}};
  c.buffers = {0.25f, -1.0f, 7.5f, 0.0f};
  c.compression = "topk:0.01";
  return c;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
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
  EXPECT_EQ(read->step, 17);
  EXPECT_EQ(read->epoch, 2);
  EXPECT_EQ(read->epoch_step, 3);
  EXPECT_EQ(read->seed, 7u);
  EXPECT_EQ(read->world_size, 2);
  EXPECT_EQ(read->batch_size, 16);
  EXPECT_EQ(read->optimizer, "adam");
  EXPECT_FALSE(read->optimizer_on_servers);
  EXPECT_EQ(read->optimizer_step, 17);
  EXPECT_EQ(read->params, Sample().params);
  EXPECT_EQ(read->optimizer_state, Sample().optimizer_state);
  EXPECT_TRUE(read->keys.empty());
  EXPECT_EQ(read->buffers, Sample().buffers);
  EXPECT_EQ(read->compression, "topk:0.01");
  EXPECT_EQ(read->format_version, 4);
}

// Gives `bytes` the format version `version`, its own size and CRC-32.
std::string Relabel(std::string bytes, char version) {
  bytes[7] = version;
  const uint64_t size = bytes.size();
  std::memcpy(&bytes[8], &size, sizeof(size));
  const uint64_t crc =
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), size - 8);
  std::memcpy(&bytes[size - 8], &crc, sizeof(crc));
  return bytes;
}

// The file a build before version 4 wrote for `c` (which records no
// compression): the same fields without the compression's length, magic
// "GSCKPT03".
std::string VersionThreeFile(const Checkpoint& c, const std::string& path) {
  EXPECT_TRUE(c.compression.empty());
  EXPECT_TRUE(WriteCheckpoint(path, c).ok());
  std::string bytes = ReadAll(path);
  // ..., buffers, compression's length (u64 0), CRC (u64).
  bytes.erase(bytes.size() - 16, 8);
  return Relabel(bytes, '3');
}

// The file a build before version 3 wrote for `c` (which has no buffers):
// the same fields without the buffers' length either, magic "GSCKPT02".
std::string VersionTwoFile(const Checkpoint& c, const std::string& path) {
  EXPECT_TRUE(c.buffers.empty());
  EXPECT_TRUE(c.compression.empty());
  EXPECT_TRUE(WriteCheckpoint(path, c).ok());
  std::string bytes = ReadAll(path);
  // ..., keys, buffers' length (u64 0), compression's length (u64 0), CRC.
  bytes.erase(bytes.size() - 24, 16);
  return Relabel(bytes, '2');
}

TEST(CheckpointTest, VersionThreeIsReadWithoutCompression) {
  const std::string path = TempPath("version3.ckpt");
  Checkpoint c = Sample();
  c.compression.clear();
  WriteAll(path, VersionThreeFile(c, path));
  auto read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->format_version, 3);
  EXPECT_EQ(read->params, c.params);
  EXPECT_EQ(read->buffers, c.buffers);
  EXPECT_TRUE(read->compression.empty());
}

TEST(CheckpointTest, VersionTwoIsReadWithoutBuffers) {
  const std::string path = TempPath("version2.ckpt");
  Checkpoint c = Sample();
  c.buffers.clear();
  c.compression.clear();
  WriteAll(path, VersionTwoFile(c, path));
  auto read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->format_version, 2);
  EXPECT_EQ(read->model, c.model);
  EXPECT_EQ(read->step, c.step);
  EXPECT_EQ(read->params, c.params);
  EXPECT_EQ(read->optimizer_state, c.optimizer_state);
  EXPECT_TRUE(read->buffers.empty());
  // A version 3 file relabelled as version 2 has bytes that version 2 does
  // not have: refused, not misread.
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  std::string relabelled = ReadAll(path);
  relabelled[7] = '2';
  const uint64_t crc =
      crc32(0L, reinterpret_cast<const Bytef*>(relabelled.data()),
            relabelled.size() - 8);
  std::memcpy(&relabelled[relabelled.size() - 8], &crc, sizeof(crc));
  WriteAll(path, relabelled);
  read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("unexpected trailing bytes"));
}

TEST(CheckpointTest, ServerShardRoundTrip) {
  const std::string path = TempPath("shard.ckpt");
  Checkpoint c = Sample();
  c.model = "ps shard: server 1 of 2";
  c.optimizer_on_servers = true;
  c.keys = {{4, 1}, {9, 2}};
  ASSERT_TRUE(WriteCheckpoint(path, c).ok());
  auto read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->optimizer_on_servers);
  EXPECT_EQ(read->keys, c.keys);
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

  // Every cut is refused as truncated, with the sizes.
  for (size_t keep :
       {size_t{0}, size_t{12}, good.size() / 2, good.size() - 1}) {
    WriteAll(path, good.substr(0, keep));
    read = ReadCheckpoint(path);
    ASSERT_FALSE(read.ok()) << keep;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
    if (keep >= 8) {
      EXPECT_THAT(std::string(read.status().message()), HasSubstr("truncated"))
          << keep;
    }
  }
  WriteAll(path, good + "x");
  read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("beyond"));

  // A file of the first format names its version.
  std::string old = good;
  old[7] = '1';
  WriteAll(path, old);
  read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("format version 01"));

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
