// In-memory classification data sets: MNIST-format IDX files (Fashion-MNIST by
// default) and a seeded synthetic set of any shape. Features are float32 in
// [0, 1] for images, row-major [size × feature_dim]; labels are int32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct Dataset {
  std::string name;
  int64_t size = 0;
  int feature_dim = 0;
  // Image data sets: each row is one image, channels × height × width (CHW,
  // like a PyTorch tensor), with feature_dim = channels·height·width. All
  // three are 0 for data without a spatial shape (the synthetic set).
  int channels = 0;
  int height = 0;
  int width = 0;
  int num_classes = 0;
  // Per-channel normalisation applied after scaling pixels to [0, 1]: a
  // stored value is (x - channel_mean[c]) / channel_std[c]. Both empty when
  // none was applied (Fashion-MNIST keeps x / 255). Augmentation reads them to
  // pad with black, as torchvision pads before normalising.
  std::vector<float> channel_mean;
  std::vector<float> channel_std;
  std::vector<float> features;  // size × feature_dim
  std::vector<int32_t> labels;  // size

  const float* row(int64_t i) const {
    return features.data() + i * feature_dim;
  }
};

struct DatasetPair {
  Dataset train;
  Dataset test;
};

// Debian's dataset-fashion-mnist installs here.
inline constexpr char kDefaultFashionMnistDir[] =
    "/usr/share/datasets/fashion-mnist";

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`. A missing
// directory or file names the path and the Debian package to install.
absl::StatusOr<DatasetPair> LoadMnistFormat(const std::string& dir);

struct SyntheticOptions {
  int64_t train_size = 8192;
  int64_t test_size = 1024;
  int feature_dim = 784;
  // An image shape for models that need one (CHW; CIFAR-10's is 3×32×32):
  // all three positive with channels·height·width = feature_dim, or all 0
  // for flat samples.
  int channels = 0;
  int height = 0;
  int width = 0;
  int num_classes = 10;
  uint64_t seed = 1;
};

// A learnable synthetic set: each class has a random centre, and samples are
// the centre plus Gaussian noise, all from `seed`. With an image shape the
// rows are the same values read as CHW images (roughly zero mean and unit
// variance, like normalised pixels), with no spatial structure.
absl::StatusOr<DatasetPair> MakeSynthetic(const SyntheticOptions& options);

}  // namespace gradsync
