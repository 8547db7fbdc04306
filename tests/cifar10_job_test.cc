// `gradsync train --data=cifar10` on a tiny CIFAR-10 written by the test: it
// trains, a missing or corrupt set ends the job with one clear error, the
// default crop-and-flip augmentation keeps "2 workers with batch b equal one
// worker with batch 2b", and --data=synthetic gives image-shaped samples.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kRecordBytes = 3073;
constexpr int kImagesPerBatch = 16;  // 80 training images, 16 test images

// Labels cycle through the ten classes; each class has its own brightness
// pattern so an MLP has something to learn.
void WriteBatch(const std::string& path, int first) {
  std::vector<uint8_t> bytes;
  for (int i = first; i < first + kImagesPerBatch; ++i) {
    const int label = i % 10;
    bytes.push_back(static_cast<uint8_t>(label));
    for (int p = 0; p < 3072; ++p) {
      bytes.push_back(static_cast<uint8_t>((label * 25 + p * 7 + i) % 256));
    }
  }
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  ASSERT_EQ(std::fclose(file), 0);
}

// A tiny CIFAR-10 in <name>/cifar-10-batches-bin, as the archive unpacks.
std::string WriteTinyCifar(const std::string& name) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  const std::string batches = dir + "/cifar-10-batches-bin";
  mkdir(dir.c_str(), 0755);
  mkdir(batches.c_str(), 0755);
  for (int b = 1; b <= 5; ++b) {
    WriteBatch(absl::StrCat(batches, "/data_batch_", b, ".bin"),
               (b - 1) * kImagesPerBatch);
  }
  WriteBatch(batches + "/test_batch.bin", 1000);
  return dir;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<std::string> MlpFlags(const std::string& data_dir) {
  return {"--data=cifar10", "--data_dir=" + data_dir, "--layers=3072,16,10",
          "--epochs=2",     "--progress=false",       "--lr=0.01",
          "--timeout_s=60"};
}

void ExpectCleanFailure(const ProcessResult& result) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(result.exit_code, 128) << "crashed: " << result.output;
}

TEST(Cifar10JobTest, TrainsOnATinySet) {
  const std::string data = WriteTinyCifar("tiny");
  const std::string metrics = absl::StrCat(TestTempDir(), "/metrics");
  std::vector<std::string> args = {"train", "--batch_size=16",
                                   "--metrics_dir=" + metrics};
  for (const std::string& flag : MlpFlags(data)) args.push_back(flag);
  const ProcessResult result = RunGradsync(args);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream summary(metrics + "/summary.json");
  const std::string text((std::istreambuf_iterator<char>(summary)),
                         std::istreambuf_iterator<char>());
  // 80 images in batches of 16 for 2 epochs, and the manifest names the data
  // set and the augmentation it got by default.
  EXPECT_THAT(text, AllOf(HasSubstr("\"steps\": 10"), HasSubstr("cifar10"),
                          HasSubstr("\"augment\": \"crop_flip\"")))
      << text;
}

TEST(Cifar10JobTest, TwoWorkersMatchOneWorkerWithTwiceTheBatch) {
  const std::string data = WriteTinyCifar("equivalence");
  const std::string dir = absl::StrCat(TestTempDir(), "/equivalence_run");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  std::vector<std::string> local = {"train", "--batch_size=16", "--eval=false",
                                    "--dump_params=" + dir + "/local"};
  for (const std::string& flag : MlpFlags(data)) local.push_back(flag);
  const ProcessResult one = RunGradsync(local);
  ASSERT_EQ(one.exit_code, 0) << one.output;

  std::vector<std::string> job = {"launch",
                                  "--workers=2",
                                  "--run_dir=" + dir + "/run",
                                  "--job_deadline_s=200",
                                  "--",
                                  "--sync=ring",
                                  "--batch_size=8",
                                  "--eval=false",
                                  "--check_params_every=1",
                                  "--dump_params=" + dir + "/ring"};
  for (const std::string& flag : MlpFlags(data)) job.push_back(flag);
  const ProcessResult two = RunGradsync(job);
  ASSERT_EQ(two.exit_code, 0) << two.output;

  const std::vector<float> expected = ReadFloats(dir + "/local.worker0");
  ASSERT_EQ(expected.size(), size_t{3072 * 16 + 16 + 16 * 10 + 10});
  float scale = 0;
  for (float v : expected) scale = std::max(scale, std::fabs(v));
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<float> got =
        ReadFloats(absl::StrCat(dir, "/ring.worker", rank));
    ASSERT_EQ(got.size(), expected.size()) << "worker " << rank;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max<double>(worst, std::fabs(got[i] - expected[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << "worker " << rank;
  }
}

TEST(Cifar10JobTest, MissingSetSaysWhereToGetIt) {
  const std::string dir = absl::StrCat(TestTempDir(), "/no_cifar");
  mkdir(dir.c_str(), 0755);
  ProcessResult result =
      RunGradsync({"train", "--data=cifar10", "--data_dir=" + dir});
  ExpectCleanFailure(result);
  EXPECT_THAT(result.output,
              AllOf(HasSubstr(dir + "/data_batch_1.bin"),
                    HasSubstr("https://www.cs.toronto.edu/~kriz/cifar.html"),
                    HasSubstr("binary")));

  // Without --data_dir the default is Fashion-MNIST's folder: say so.
  result = RunGradsync({"train", "--data=cifar10"});
  ExpectCleanFailure(result);
  EXPECT_THAT(result.output, AllOf(HasSubstr("--data=cifar10 needs --data_dir"),
                                   HasSubstr("cs.toronto.edu")));
}

TEST(Cifar10JobTest, CorruptBatchIsRefusedNamingTheFile) {
  const std::string data = WriteTinyCifar("corrupt");
  const std::string path = data + "/cifar-10-batches-bin/data_batch_3.bin";
  ASSERT_EQ(truncate(path.c_str(), 5 * kRecordBytes + 11), 0);
  const ProcessResult result = RunGradsync(
      {"train", "--data=cifar10", "--data_dir=" + data, "--layers=3072,10"});
  ExpectCleanFailure(result);
  EXPECT_THAT(result.output,
              AllOf(HasSubstr(path), HasSubstr("record 5 has only 11 bytes")));
}

TEST(Cifar10JobTest, DoctorLooksForTheBatches) {
  const std::string data = WriteTinyCifar("doctor");
  ProcessResult result =
      RunGradsync({"doctor", "--data=cifar10", "--data_dir=" + data});
  EXPECT_THAT(result.output,
              HasSubstr("cifar10 " /* the row's label, then padding */));
  EXPECT_THAT(result.output, HasSubstr(data + "/cifar-10-batches-bin"));
  EXPECT_THAT(result.output, Not(HasSubstr("MISSING in " + data)));

  const std::string empty = absl::StrCat(TestTempDir(), "/doctor_empty");
  mkdir(empty.c_str(), 0755);
  result = RunGradsync({"doctor", "--data=cifar10", "--data_dir=" + empty});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, AllOf(HasSubstr("MISSING in " + empty),
                                   HasSubstr("cs.toronto.edu")));
}

TEST(Cifar10JobTest, SyntheticImagesAndTheAugmentFlag) {
  // CIFAR-shaped random images, augmented on request.
  ProcessResult result = RunGradsync(
      {"train", "--data=synthetic", "--synthetic_shape=3x32x32",
       "--synthetic_size=64", "--layers=3072,8,10", "--augment=crop_flip",
       "--batch_size=16", "--epochs=1", "--progress=false"});
  EXPECT_EQ(result.exit_code, 0) << result.output;

  // Flat synthetic samples cannot be cropped.
  result = RunGradsync({"train", "--data=synthetic", "--synthetic_size=64",
                        "--layers=32,8,10", "--augment=crop_flip"});
  ExpectCleanFailure(result);
  EXPECT_THAT(result.output, HasSubstr("needs images"));

  result = RunGradsync({"train", "--data=synthetic", "--synthetic_size=64",
                        "--layers=32,8,10", "--augment=rotate"});
  ExpectCleanFailure(result);
  EXPECT_THAT(result.output, HasSubstr("none or crop_flip"));

  result = RunGradsync({"train", "--data=synthetic", "--synthetic_shape=3x32",
                        "--layers=3072,10"});
  ExpectCleanFailure(result);
  EXPECT_THAT(result.output, HasSubstr("--synthetic_shape=3x32 must be CxHxW"));
}

}  // namespace
}  // namespace gradsync
