// Tests for ReadIdxFile: round trips of plain and gzip files the test writes
// itself, and one test per kind of corrupt file, each checking that the error
// names the file.
#include "core/data/idx_reader.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  ASSERT_EQ(std::fclose(file), 0);
}

void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), bytes.size()),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// An IDX file's bytes: magic (0, 0, type, #dims), big-endian sizes, data.
std::vector<uint8_t> IdxBytes(const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& data,
                              uint8_t type = 0x08) {
  std::vector<uint8_t> bytes = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    bytes.push_back(d >> 24);
    bytes.push_back((d >> 16) & 0xff);
    bytes.push_back((d >> 8) & 0xff);
    bytes.push_back(d & 0xff);
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::vector<uint8_t> Ramp(int n) {
  std::vector<uint8_t> data(n);
  for (int i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  return data;
}

// Expects `path` to fail with `code` and a message naming the file and
// containing `detail`.
void ExpectError(const std::string& path, absl::StatusCode code,
                 const std::string& detail) {
  absl::StatusOr<IdxArray> result = ReadIdxFile(path);
  ASSERT_FALSE(result.ok()) << path << " was accepted";
  EXPECT_EQ(result.status().code(), code) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(detail));
}

TEST(IdxReaderTest, ReadsPlainFileExactly) {
  const std::string path = TempPath("plain-idx3");
  const std::vector<uint8_t> data = Ramp(3 * 4 * 5);
  WritePlain(path, IdxBytes({3, 4, 5}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(3, 4, 5));
  EXPECT_EQ(array->data, data);
}

TEST(IdxReaderTest, ReadsGzipFileExactlyWhateverItsName) {
  // No ".gz" in the name: gzip must be recognised by content.
  const std::string path = TempPath("gzip-idx1");
  const std::vector<uint8_t> data = Ramp(300);
  WriteGzip(path, IdxBytes({300}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(300));
  EXPECT_EQ(array->data, data);
}

TEST(IdxReaderTest, ReadsFourDimensionsAndLargerThanOneReadChunk) {
  // 2·3·512·1024 bytes = 3 MiB spans several of the reader's 1 MiB chunks.
  const std::string path = TempPath("big-idx4.gz");
  const std::vector<uint8_t> data = Ramp(2 * 3 * 512 * 1024);
  WriteGzip(path, IdxBytes({2, 3, 512, 1024}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(2, 3, 512, 1024));
  EXPECT_EQ(array->data, data);
}

TEST(IdxReaderTest, MissingFile) {
  const std::string path = TempPath("does-not-exist-idx3-ubyte.gz");
  ExpectError(path, absl::StatusCode::kNotFound, "No such file");
  EXPECT_THAT(std::string(ReadIdxFile(path).status().message()),
              HasSubstr("cannot open"));
}

TEST(IdxReaderTest, BadMagic) {
  const std::string path = TempPath("bad-magic");
  std::vector<uint8_t> bytes = IdxBytes({4}, Ramp(4));
  bytes[1] = 0x2a;
  WritePlain(path, bytes);
  ExpectError(path, absl::StatusCode::kInvalidArgument, "not an IDX file");
}

TEST(IdxReaderTest, WrongTypeByteIsNamed) {
  const std::string path = TempPath("float-type");
  WritePlain(path, IdxBytes({4}, Ramp(16), /*type=*/0x0D));
  ExpectError(path, absl::StatusCode::kInvalidArgument, "0x0d (float32)");
}

TEST(IdxReaderTest, ZeroDimensionCount) {
  const std::string path = TempPath("zero-dim-count");
  WritePlain(path, IdxBytes({}, {}));
  ExpectError(path, absl::StatusCode::kInvalidArgument, "0 dimensions");
}

TEST(IdxReaderTest, TooManyDimensions) {
  const std::string path = TempPath("five-dims");
  WritePlain(path, IdxBytes({1, 1, 1, 1, 1}, {9}));
  ExpectError(path, absl::StatusCode::kInvalidArgument, "5 dimensions");
}

TEST(IdxReaderTest, ZeroSizedDimension) {
  const std::string path = TempPath("zero-size");
  WritePlain(path, IdxBytes({5, 0, 3}, {}));
  ExpectError(path, absl::StatusCode::kInvalidArgument,
              "dimension 1 has size 0");
}

TEST(IdxReaderTest, TruncatedMagic) {
  const std::string path = TempPath("short-magic");
  WritePlain(path, {0, 0});
  ExpectError(path, absl::StatusCode::kDataLoss, "truncated header");
}

TEST(IdxReaderTest, TruncatedDimensionSizes) {
  const std::string path = TempPath("short-dims");
  std::vector<uint8_t> bytes = IdxBytes({60000, 28, 28}, {});
  bytes.resize(4 + 6);  // the 3 sizes need 12 bytes; keep 6
  WritePlain(path, bytes);
  ExpectError(path, absl::StatusCode::kDataLoss,
              "3 dimensions need 12 bytes of sizes, file has 6");
}

TEST(IdxReaderTest, TruncatedDataSaysHowMuch) {
  const std::string path = TempPath("short-data.gz");
  WriteGzip(path, IdxBytes({60000, 28, 28}, Ramp(1000)));
  ExpectError(path, absl::StatusCode::kDataLoss,
              "truncated: header declares 47040000 bytes of data, file has "
              "1000");
}

TEST(IdxReaderTest, TrailingBytes) {
  const std::string path = TempPath("trailing");
  std::vector<uint8_t> bytes = IdxBytes({2, 2}, Ramp(4));
  bytes.push_back(1);
  bytes.push_back(2);
  bytes.push_back(3);
  WritePlain(path, bytes);
  ExpectError(path, absl::StatusCode::kDataLoss, "3 trailing bytes");
}

TEST(IdxReaderTest, HugeDeclaredSizeIsRefusedBeforeAllocating) {
  // 65535^3 ≈ 2.8e14 elements: attempting the allocation would abort the test
  // with std::bad_alloc, so passing shows the check comes first.
  const std::string path = TempPath("huge");
  WritePlain(path, IdxBytes({65535, 65535, 65535}, Ramp(10)));
  ExpectError(path, absl::StatusCode::kInvalidArgument, "more than the limit");
  // Each size alone is legal: the product is what the limit catches, and the
  // check must not overflow for the largest 32-bit sizes either.
  const std::string max_path = TempPath("huge-max");
  WritePlain(
      max_path,
      IdxBytes({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  ExpectError(max_path, absl::StatusCode::kInvalidArgument,
              "more than the limit");
}

TEST(IdxReaderTest, HeaderUnderTheLimitButFileShortCostsOnlyWhatIsRead) {
  // 2^31 declared bytes is allowed by the limit, but the file holds 10: the
  // reader grows its buffer as data arrives, so this is a quick truncation
  // error instead of a 2 GiB allocation.
  const std::string path = TempPath("large-declared");
  WritePlain(path, IdxBytes({1u << 15, 1u << 16}, Ramp(10)));
  ExpectError(path, absl::StatusCode::kDataLoss,
              "header declares 2147483648 bytes of data, file has 10");
}

TEST(IdxReaderTest, GzipCutBeforeItsTrailer) {
  // A complete array whose gzip CRC/length trailer is missing still fails: the
  // file is damaged even if the bytes we need are there.
  const std::string full = TempPath("cut-trailer-full.gz");
  WriteGzip(full, IdxBytes({8}, Ramp(8)));
  FILE* in = std::fopen(full.c_str(), "rb");
  ASSERT_NE(in, nullptr);
  std::vector<uint8_t> bytes(4096);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), in));
  std::fclose(in);
  ASSERT_GT(bytes.size(), 8u);
  bytes.resize(bytes.size() - 8);  // drop CRC32 and ISIZE
  const std::string path = TempPath("cut-trailer.gz");
  WritePlain(path, bytes);
  ExpectError(path, absl::StatusCode::kDataLoss, "gzip stream is truncated");
}

TEST(IdxReaderTest, DirectoryIsRefused) {
  const std::string path = TempPath("");
  absl::StatusOr<IdxArray> result = ReadIdxFile(path);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("directory"));
}

}  // namespace
}  // namespace gradsync
