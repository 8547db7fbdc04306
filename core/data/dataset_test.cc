// Tests for the data sets: a small MNIST-format directory written by the test,
// its error cases, the real Fashion-MNIST when Debian's package is installed,
// and the synthetic set's determinism and learnability.
#include "core/data/dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

// Writes an unsigned-byte IDX file, gzip-compressed or plain.
void WriteIdx(const std::string& path, const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& data, bool gzip) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    bytes.insert(bytes.end(),
                 {static_cast<uint8_t>(d >> 24), static_cast<uint8_t>(d >> 16),
                  static_cast<uint8_t>(d >> 8), static_cast<uint8_t>(d)});
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    ASSERT_NE(file, nullptr) << path;
    ASSERT_EQ(gzwrite(file, bytes.data(), bytes.size()),
              static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(file), Z_OK);
  } else {
    FILE* file = std::fopen(path.c_str(), "wb");
    ASSERT_NE(file, nullptr) << path;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
    ASSERT_EQ(std::fclose(file), 0);
  }
}

// Pixel j of image i, and the label of image i, in the fake data set.
uint8_t Pixel(int64_t i, int j) {
  return static_cast<uint8_t>((i * 31 + j * 17) % 256);
}
uint8_t Label(int64_t i) { return static_cast<uint8_t>(i % 10); }

std::vector<uint8_t> Images(int count, int rows, int cols) {
  std::vector<uint8_t> data;
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < rows * cols; ++j) data.push_back(Pixel(i, j));
  }
  return data;
}

std::vector<uint8_t> Labels(int count) {
  std::vector<uint8_t> data;
  for (int i = 0; i < count; ++i) data.push_back(Label(i));
  return data;
}

// A fake MNIST directory: 20 training and 7 test images of 4×4. The training
// files are gzip, the test files plain, to cover both lookups.
std::string WriteFakeMnist(const std::string& name, int train_labels = 20,
                           int test_label_override = -1) {
  const std::string dir = TempDir(name);
  WriteIdx(dir + "/train-images-idx3-ubyte.gz", {20, 4, 4}, Images(20, 4, 4),
           true);
  WriteIdx(dir + "/train-labels-idx1-ubyte.gz",
           {static_cast<uint32_t>(train_labels)}, Labels(train_labels), true);
  WriteIdx(dir + "/t10k-images-idx3-ubyte", {7, 4, 4}, Images(7, 4, 4), false);
  std::vector<uint8_t> test_labels = Labels(7);
  if (test_label_override >= 0) test_labels[5] = test_label_override;
  WriteIdx(dir + "/t10k-labels-idx1-ubyte", {7}, test_labels, false);
  return dir;
}

void ExpectFakeSplit(const Dataset& dataset, int64_t size) {
  EXPECT_EQ(dataset.size, size);
  EXPECT_EQ(dataset.feature_dim, 16);
  EXPECT_EQ(dataset.num_classes, 10);
  ASSERT_EQ(dataset.features.size(), size * 16);
  ASSERT_EQ(dataset.labels.size(), size);
  for (int64_t i = 0; i < size; ++i) {
    EXPECT_EQ(dataset.labels[i], Label(i)) << "sample " << i;
    for (int j = 0; j < 16; ++j) {
      // Row-major pixels scaled by 1/255, exactly as x / 255.0f.
      ASSERT_EQ(dataset.row(i)[j], Pixel(i, j) / 255.0f)
          << "sample " << i << " pixel " << j;
    }
  }
}

TEST(LoadMnistFormatTest, ReadsFakeDataSet) {
  const std::string dir = WriteFakeMnist("fake-mnist");
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  ExpectFakeSplit(pair->train, 20);
  ExpectFakeSplit(pair->test, 7);
  EXPECT_EQ(pair->train.name, "fake-mnist");
  // Scaling reaches both ends of [0, 1].
  WriteIdx(dir + "/t10k-images-idx3-ubyte", {7, 4, 4},
           std::vector<uint8_t>(7 * 16, 255), false);
  pair = LoadMnistFormat(dir + "/");
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->test.features.front(), 1.0f);
  EXPECT_EQ(pair->test.name, "fake-mnist");  // trailing slash ignored
}

TEST(LoadMnistFormatTest, PrefersGzipOverPlain) {
  const std::string dir = WriteFakeMnist("prefer-gz");
  // A broken plain twin of the gzip training images must not be read.
  WriteIdx(dir + "/train-images-idx3-ubyte", {3, 1, 1}, {1, 2, 3}, false);
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->train.size, 20);
}

TEST(LoadMnistFormatTest, FashionDirectoryGetsItsUsualName) {
  const std::string dir = WriteFakeMnist("Fashion_MNIST");
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->train.name, "fashion-mnist");
}

TEST(LoadMnistFormatTest, CountMismatchNamesBothFiles) {
  const std::string dir = WriteFakeMnist("count-mismatch", /*train_labels=*/19);
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_FALSE(pair.ok());
  const std::string message(pair.status().message());
  EXPECT_THAT(message, HasSubstr(dir + "/train-images-idx3-ubyte.gz has 20"));
  EXPECT_THAT(message, HasSubstr(dir + "/train-labels-idx1-ubyte.gz has 19"));
}

TEST(LoadMnistFormatTest, MissingDirectoryNamesThePackage) {
  const std::string dir = TempDir("no-such-parent") + "/missing";
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_FALSE(pair.ok());
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(pair.status().message()), HasSubstr(dir));
  EXPECT_THAT(std::string(pair.status().message()),
              HasSubstr("apt-get install dataset-fashion-mnist"));
}

TEST(LoadMnistFormatTest, MissingFileNamesPathAndPackage) {
  const std::string dir = TempDir("missing-file");
  WriteIdx(dir + "/train-images-idx3-ubyte.gz", {20, 4, 4}, Images(20, 4, 4),
           true);
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_FALSE(pair.ok());
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(pair.status().message()),
              HasSubstr(dir + "/train-labels-idx1-ubyte"));
  EXPECT_THAT(std::string(pair.status().message()),
              HasSubstr("dataset-fashion-mnist"));
}

TEST(LoadMnistFormatTest, TestLabelBeyondTrainingClassesNamesIndex) {
  // Training labels are 0..9, so 10 classes; test label 12 at index 5 is not
  // a class the model could output.
  const std::string dir =
      WriteFakeMnist("label-range", 20, /*test_label_override=*/12);
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_FALSE(pair.ok());
  EXPECT_THAT(std::string(pair.status().message()),
              HasSubstr(dir + "/t10k-labels-idx1-ubyte: label 12 at index 5"));
}

TEST(LoadMnistFormatTest, ImagesMustBeThreeDimensional) {
  const std::string dir = WriteFakeMnist("flat-images");
  WriteIdx(dir + "/t10k-images-idx3-ubyte", {7, 16}, Images(7, 4, 4), false);
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(dir);
  ASSERT_FALSE(pair.ok());
  EXPECT_THAT(std::string(pair.status().message()),
              HasSubstr("must have 3 dimensions"));
}

TEST(LoadMnistFormatTest, RealFashionMnistWhenInstalled) {
  struct stat info;
  if (stat(kDefaultFashionMnistDir, &info) != 0) {
    GTEST_SKIP() << kDefaultFashionMnistDir
                 << " is absent; apt-get install dataset-fashion-mnist to run "
                    "this test";
  }
  absl::StatusOr<DatasetPair> pair = LoadMnistFormat(kDefaultFashionMnistDir);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->train.name, "fashion-mnist");
  EXPECT_EQ(pair->train.size, 60000);
  EXPECT_EQ(pair->test.size, 10000);
  EXPECT_EQ(pair->train.feature_dim, 784);
  EXPECT_EQ(pair->train.num_classes, 10);
  EXPECT_EQ(pair->test.num_classes, 10);
  // Fashion-MNIST is balanced: 6000 training images per class.
  std::vector<int> per_class(10, 0);
  for (int32_t label : pair->train.labels) ++per_class[label];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 6000) << "class " << c;
  float low = 1, high = 0;
  for (float x : pair->train.features) {
    low = std::min(low, x);
    high = std::max(high, x);
  }
  EXPECT_EQ(low, 0.0f);
  EXPECT_EQ(high, 1.0f);
}

SyntheticOptions SmallSynthetic(uint64_t seed) {
  SyntheticOptions options;
  options.train_size = 2000;
  options.test_size = 500;
  options.feature_dim = 16;
  options.num_classes = 10;
  options.seed = seed;
  return options;
}

TEST(MakeSyntheticTest, ShapesAndLabelRange) {
  absl::StatusOr<DatasetPair> pair = MakeSynthetic(SmallSynthetic(3));
  ASSERT_TRUE(pair.ok()) << pair.status();
  for (const Dataset* d : {&pair->train, &pair->test}) {
    EXPECT_EQ(d->feature_dim, 16);
    EXPECT_EQ(d->num_classes, 10);
    EXPECT_EQ(d->features.size(), d->size * 16);
    EXPECT_EQ(d->labels.size(), d->size);
    std::vector<int> seen(10, 0);
    for (int32_t label : d->labels) {
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
      ++seen[label];
    }
    for (int c = 0; c < 10; ++c) EXPECT_GT(seen[c], 0) << "class " << c;
    for (float x : d->features) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_EQ(pair->train.size, 2000);
  EXPECT_EQ(pair->test.size, 500);
}

TEST(MakeSyntheticTest, DeterministicForASeedAndDifferentForAnother) {
  absl::StatusOr<DatasetPair> a = MakeSynthetic(SmallSynthetic(7));
  absl::StatusOr<DatasetPair> b = MakeSynthetic(SmallSynthetic(7));
  absl::StatusOr<DatasetPair> c = MakeSynthetic(SmallSynthetic(8));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->train.features, b->train.features);
  EXPECT_EQ(a->train.labels, b->train.labels);
  EXPECT_EQ(a->test.features, b->test.features);
  EXPECT_NE(a->train.features, c->train.features);
  EXPECT_NE(a->train.labels, c->train.labels);
  // The test split does not depend on the training split's size.
  SyntheticOptions bigger = SmallSynthetic(7);
  bigger.train_size = 3000;
  absl::StatusOr<DatasetPair> d = MakeSynthetic(bigger);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(a->test.features, d->test.features);
}

TEST(MakeSyntheticTest, LearnableByNearestCentroid) {
  // Class means of the training split classify the test split far above the
  // 10% chance level; an MLP, which can learn at least this rule, will too.
  absl::StatusOr<DatasetPair> pair = MakeSynthetic(SmallSynthetic(11));
  ASSERT_TRUE(pair.ok());
  const Dataset& train = pair->train;
  const int dim = train.feature_dim;
  std::vector<double> means(10 * dim, 0.0);
  std::vector<int> counts(10, 0);
  for (int64_t i = 0; i < train.size; ++i) {
    ++counts[train.labels[i]];
    for (int f = 0; f < dim; ++f)
      means[train.labels[i] * dim + f] += train.row(i)[f];
  }
  for (int c = 0; c < 10; ++c) {
    for (int f = 0; f < dim; ++f) means[c * dim + f] /= counts[c];
  }
  const Dataset& test = pair->test;
  int correct = 0;
  for (int64_t i = 0; i < test.size; ++i) {
    int best = 0;
    double best_distance = INFINITY;
    for (int c = 0; c < 10; ++c) {
      double distance = 0;
      for (int f = 0; f < dim; ++f) {
        const double d = test.row(i)[f] - means[c * dim + f];
        distance += d * d;
      }
      if (distance < best_distance) {
        best_distance = distance;
        best = c;
      }
    }
    correct += best == test.labels[i];
  }
  EXPECT_GT(correct, test.size / 2) << correct << " of " << test.size;
}

TEST(MakeSyntheticTest, ImageShapeIsCarriedAndChecked) {
  // CIFAR-shaped: the values are those of a flat set of 3072 features, read as
  // 3x32x32 images.
  SyntheticOptions options = SmallSynthetic(4);
  options.train_size = 64;
  options.test_size = 16;
  options.feature_dim = 3 * 32 * 32;
  absl::StatusOr<DatasetPair> flat = MakeSynthetic(options);
  options.channels = 3;
  options.height = 32;
  options.width = 32;
  absl::StatusOr<DatasetPair> images = MakeSynthetic(options);
  ASSERT_TRUE(flat.ok() && images.ok()) << images.status();
  for (const Dataset* d : {&images->train, &images->test}) {
    EXPECT_EQ(d->channels, 3);
    EXPECT_EQ(d->height, 32);
    EXPECT_EQ(d->width, 32);
    EXPECT_EQ(d->feature_dim, 3072);
    EXPECT_EQ(d->num_classes, 10);
  }
  EXPECT_EQ(flat->train.channels, 0);
  EXPECT_EQ(images->train.features, flat->train.features);
  EXPECT_EQ(images->train.labels, flat->train.labels);

  options.width = 31;  // 3*32*31 != 3072
  EXPECT_THAT(std::string(MakeSynthetic(options).status().message()),
              HasSubstr("image shape 3x32x31"));
  options.width = 32;
  options.channels = 0;
  EXPECT_EQ(MakeSynthetic(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MakeSyntheticTest, ValidatesOptions) {
  SyntheticOptions options = SmallSynthetic(1);
  options.train_size = 0;
  EXPECT_THAT(std::string(MakeSynthetic(options).status().message()),
              HasSubstr("train_size and test_size must be >= 1"));
  options = SmallSynthetic(1);
  options.test_size = -3;
  EXPECT_EQ(MakeSynthetic(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = SmallSynthetic(1);
  options.feature_dim = 0;
  EXPECT_THAT(std::string(MakeSynthetic(options).status().message()),
              HasSubstr("feature_dim must be >= 1, got 0"));
  options = SmallSynthetic(1);
  options.num_classes = 1;
  EXPECT_THAT(std::string(MakeSynthetic(options).status().message()),
              HasSubstr("num_classes must be >= 2, got 1"));
  options = SmallSynthetic(1);
  options.train_size = int64_t{1} << 40;
  EXPECT_THAT(std::string(MakeSynthetic(options).status().message()),
              HasSubstr("exceed the limit"));
}

}  // namespace
}  // namespace gradsync
