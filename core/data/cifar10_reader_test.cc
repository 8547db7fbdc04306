// Tests for the CIFAR-10 binary reader on small batch files the test writes:
// the flat and the archive's nested layout, the normalisation, and every way
// a file can be missing or corrupt.
#include "core/data/cifar10_reader.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(root != nullptr ? root : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

// The fake set's pixel byte p of global image i, and its label. Every byte
// value occurs, so the whole lookup table is exercised.
uint8_t PixelByte(int64_t i, int p) {
  return static_cast<uint8_t>((i * 97 + p * 13) % 256);
}
uint8_t LabelOf(int64_t i) { return static_cast<uint8_t>((i * 7) % 10); }

std::vector<uint8_t> Records(int64_t first, int count) {
  std::vector<uint8_t> bytes;
  for (int64_t i = first; i < first + count; ++i) {
    bytes.push_back(LabelOf(i));
    for (int p = 0; p < kCifar10PixelBytes; ++p) {
      bytes.push_back(PixelByte(i, p));
    }
  }
  return bytes;
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  // fwrite must not see the null data() of an empty vector.
  if (!bytes.empty()) {
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  }
  ASSERT_EQ(std::fclose(file), 0);
}

// Training batches of 2, 3, 1, 2 and 2 images (global indices 0..9 in file
// order) and a test batch of 4 (indices 100..103).
constexpr int kBatchSizes[] = {2, 3, 1, 2, 2};
constexpr int kTrainSize = 10;
constexpr int kTestSize = 4;
constexpr int64_t kFirstTestImage = 100;

void WriteFakeCifar(const std::string& dir) {
  int64_t first = 0;
  for (int b = 0; b < 5; ++b) {
    WriteBytes(absl::StrCat(dir, "/data_batch_", b + 1, ".bin"),
               Records(first, kBatchSizes[b]));
    first += kBatchSizes[b];
  }
  WriteBytes(dir + "/test_batch.bin", Records(kFirstTestImage, kTestSize));
}

float Expected(int64_t image, int p) {
  const int channel = p / (kCifar10Height * kCifar10Width);
  return (PixelByte(image, p) / 255.0f - kCifar10Mean[channel]) /
         kCifar10Std[channel];
}

void ExpectFakeCifar(const DatasetPair& pair) {
  const Dataset& train = pair.train;
  EXPECT_EQ(train.name, "cifar10");
  EXPECT_EQ(train.size, kTrainSize);
  EXPECT_EQ(train.channels, 3);
  EXPECT_EQ(train.height, 32);
  EXPECT_EQ(train.width, 32);
  EXPECT_EQ(train.feature_dim, 3072);
  EXPECT_EQ(train.num_classes, 10);
  ASSERT_EQ(train.features.size(), size_t{kTrainSize} * 3072);
  ASSERT_EQ(train.labels.size(), size_t{kTrainSize});
  for (int64_t i = 0; i < kTrainSize; ++i) {
    EXPECT_EQ(train.labels[i], LabelOf(i)) << "image " << i;
    for (int p = 0; p < kCifar10PixelBytes; ++p) {
      ASSERT_FLOAT_EQ(train.row(i)[p], Expected(i, p))
          << "image " << i << " pixel byte " << p;
    }
  }
  const Dataset& test = pair.test;
  EXPECT_EQ(test.size, kTestSize);
  EXPECT_EQ(test.channels, 3);
  for (int64_t i = 0; i < kTestSize; ++i) {
    EXPECT_EQ(test.labels[i], LabelOf(kFirstTestImage + i));
    EXPECT_FLOAT_EQ(test.row(i)[2500], Expected(kFirstTestImage + i, 2500));
  }
  EXPECT_THAT(train.channel_mean, ::testing::ElementsAreArray(kCifar10Mean));
  EXPECT_THAT(train.channel_std, ::testing::ElementsAreArray(kCifar10Std));
}

TEST(Cifar10ReaderTest, ReadsTheBatchesInOrderAndNormalises) {
  const std::string dir = TempDir("flat");
  WriteFakeCifar(dir);
  absl::StatusOr<DatasetPair> pair = LoadCifar10(dir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  ExpectFakeCifar(*pair);
}

TEST(Cifar10ReaderTest, AcceptsTheArchivesSubfolder) {
  const std::string dir = TempDir("archive");
  const std::string nested = dir + "/cifar-10-batches-bin";
  mkdir(nested.c_str(), 0755);
  WriteFakeCifar(nested);
  absl::StatusOr<DatasetPair> pair = LoadCifar10(dir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  ExpectFakeCifar(*pair);
}

TEST(Cifar10ReaderTest, NormalisationConstantsAreTheTrainingSetStatistics) {
  // fb.resnet.torch's datasets/cifar10.lua, in 0..255 units.
  const float mean255[] = {125.3f, 123.0f, 113.9f};
  const float std255[] = {63.0f, 62.1f, 66.7f};
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(kCifar10Mean[c] * 255, mean255[c], 0.06) << "channel " << c;
    EXPECT_NEAR(kCifar10Std[c] * 255, std255[c], 0.06) << "channel " << c;
  }
  // A black and a white pixel of each channel, as stored.
  const std::string dir = TempDir("extremes");
  std::vector<uint8_t> record(kCifar10RecordBytes, 0);
  record[0] = 3;
  for (int c = 0; c < 3; ++c) record[1 + c * 1024 + 1] = 255;  // pixel (0, 1)
  for (int b = 1; b <= 5; ++b) {
    WriteBytes(absl::StrCat(dir, "/data_batch_", b, ".bin"), record);
  }
  WriteBytes(dir + "/test_batch.bin", record);
  absl::StatusOr<DatasetPair> pair = LoadCifar10(dir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  for (int c = 0; c < 3; ++c) {
    const float* plane = pair->train.row(0) + c * 1024;
    EXPECT_FLOAT_EQ(plane[0], -kCifar10Mean[c] / kCifar10Std[c]);
    EXPECT_FLOAT_EQ(plane[1], (1.0f - kCifar10Mean[c]) / kCifar10Std[c]);
  }
  // Red's black is about -1.99 and white about 2.06: inputs of unit scale.
  EXPECT_NEAR(pair->train.row(0)[0], -1.989, 0.01);
}

TEST(Cifar10ReaderTest, MissingFolderSaysWhereToGetTheBinaryVersion) {
  const std::string dir = TempDir("nothing_here");
  const absl::Status status = LoadCifar10(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(dir + "/data_batch_1.bin"),
                    HasSubstr(dir + "/cifar-10-batches-bin/data_batch_1.bin"),
                    HasSubstr("https://www.cs.toronto.edu/~kriz/cifar.html"),
                    HasSubstr("cifar-10-binary.tar.gz"),
                    HasSubstr("tools/fetch_cifar10.py"),
                    HasSubstr("test_batch.bin"), HasSubstr("3073-byte")));

  const absl::Status absent = LoadCifar10(dir + "/does_not_exist").status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(absent.message(), AllOf(HasSubstr(dir + "/does_not_exist"),
                                      HasSubstr("cs.toronto.edu")));
}

TEST(Cifar10ReaderTest, MissingTestBatchIsNamed) {
  const std::string dir = TempDir("no_test_batch");
  WriteFakeCifar(dir);
  ASSERT_EQ(std::remove((dir + "/test_batch.bin").c_str()), 0);
  const absl::Status status = LoadCifar10(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(dir + "/test_batch.bin"));
}

TEST(Cifar10ReaderTest, TruncatedFileNamesTheIncompleteRecord) {
  const std::string dir = TempDir("truncated");
  WriteFakeCifar(dir);
  std::vector<uint8_t> bytes = Records(0, 3);
  bytes.resize(2 * kCifar10RecordBytes + 100);  // record 2 cut short
  const std::string path = dir + "/data_batch_4.bin";
  WriteBytes(path, bytes);
  const absl::Status status = LoadCifar10(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(path), HasSubstr("record 2 has only 100 bytes"),
                    HasSubstr("not a multiple")));
}

TEST(Cifar10ReaderTest, WrongSizeAndEmptyFilesAreRefused) {
  const std::string dir = TempDir("wrong_size");
  WriteFakeCifar(dir);
  // A file of another format: a few bytes more than one record.
  const std::string test_path = dir + "/test_batch.bin";
  WriteBytes(test_path, std::vector<uint8_t>(kCifar10RecordBytes + 7, 1));
  absl::Status status = LoadCifar10(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(test_path),
                                      HasSubstr("record 1 has only 7 bytes")));

  WriteBytes(test_path, {});
  status = LoadCifar10(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(test_path), HasSubstr("empty")));
}

TEST(Cifar10ReaderTest, LabelAboveNineNamesFileAndRecord) {
  const std::string dir = TempDir("bad_label");
  WriteFakeCifar(dir);
  std::vector<uint8_t> bytes = Records(3, 3);
  bytes[1 * kCifar10RecordBytes] = 10;  // record 1's label byte
  const std::string path = dir + "/data_batch_2.bin";
  WriteBytes(path, bytes);
  const absl::Status status = LoadCifar10(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(path), HasSubstr("record 1 "),
                    HasSubstr("label 10"), HasSubstr("0..9")));
}

}  // namespace
}  // namespace gradsync
