// Data sets: MNIST-format IDX files and a seeded synthetic set. Both produce
// the same in-memory layout, so the trainer and sampler do not care which.
#include "core/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"
#include "core/data/idx_reader.h"

namespace gradsync {
namespace {

constexpr char kInstallHint[] =
    "install Debian's dataset-fashion-mnist (apt-get install "
    "dataset-fashion-mnist) or pass --data_dir";

// "<dir>/<base>.gz" if present (that is how the data sets are distributed),
// else the uncompressed "<dir>/<base>".
absl::StatusOr<std::string> FindIdxFile(const std::string& dir,
                                        const std::string& base) {
  const std::string plain = absl::StrCat(dir, "/", base);
  const std::string gzipped = absl::StrCat(plain, ".gz");
  if (IsFile(gzipped)) return gzipped;
  if (IsFile(plain)) return plain;
  for (const std::string& path : {gzipped, plain}) {
    if (IsDirectory(path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a directory, not an IDX file; --data_dir must hold the "
                "files themselves"));
    }
  }
  return absl::NotFoundError(absl::StrCat("neither ", gzipped, " nor ", plain,
                                          " exists; ", kInstallHint));
}

// The name to report for a data directory: its last path component, with any
// Fashion-MNIST directory called by its usual name.
std::string DatasetName(const std::string& dir) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  std::string base =
      slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  if (base.empty()) base = trimmed;
  const std::string lower = absl::AsciiStrToLower(base);
  if (absl::StrContains(lower, "fashion") &&
      absl::StrContains(lower, "mnist")) {
    return "fashion-mnist";
  }
  return base;
}

// One split as read from disk, before the class count is known.
struct RawSplit {
  std::string images_path;
  std::string labels_path;
  IdxArray images;
  IdxArray labels;
};

absl::StatusOr<RawSplit> ReadSplit(const std::string& dir,
                                   const std::string& prefix) {
  RawSplit split;
  ASSIGN_OR_RETURN(
      split.images_path,
      FindIdxFile(dir, absl::StrCat(prefix, "-images-idx3-ubyte")));
  ASSIGN_OR_RETURN(
      split.labels_path,
      FindIdxFile(dir, absl::StrCat(prefix, "-labels-idx1-ubyte")));
  ASSIGN_OR_RETURN(split.images, ReadIdxFile(split.images_path));
  ASSIGN_OR_RETURN(split.labels, ReadIdxFile(split.labels_path));
  if (split.images.dims.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(split.images_path,
                     ": images must have 3 dimensions (count, rows, "
                     "columns), the file has [",
                     absl::StrJoin(split.images.dims, ", "), "]"));
  }
  if (split.labels.dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        split.labels_path, ": labels must have 1 dimension, the file has [",
        absl::StrJoin(split.labels.dims, ", "), "]"));
  }
  if (split.images.dims[0] != split.labels.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("image/label count mismatch: ", split.images_path, " has ",
                     split.images.dims[0], " images but ", split.labels_path,
                     " has ", split.labels.dims[0], " labels"));
  }
  return split;
}

// Pixels become x / 255, torchvision's ToTensor scaling, so models and
// learning rates carry over from PyTorch recipes. No mean/std normalisation:
// recipes differ on it and [0, 1] inputs already train an MLP well.
absl::StatusOr<Dataset> ToDataset(RawSplit split, const std::string& name,
                                  int num_classes) {
  Dataset dataset;
  dataset.name = name;
  dataset.size = split.images.dims[0];
  dataset.channels = 1;
  dataset.height = static_cast<int>(split.images.dims[1]);
  dataset.width = static_cast<int>(split.images.dims[2]);
  dataset.feature_dim = dataset.height * dataset.width;
  dataset.num_classes = num_classes;

  float scale[256];
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  dataset.features.resize(split.images.data.size());
  std::transform(split.images.data.begin(), split.images.data.end(),
                 dataset.features.begin(),
                 [&scale](uint8_t pixel) { return scale[pixel]; });

  dataset.labels.resize(dataset.size);
  for (int64_t i = 0; i < dataset.size; ++i) {
    const int label = split.labels.data[i];
    if (label >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(split.labels_path, ": label ", label, " at index ", i,
                       " is out of range: the training labels give ",
                       num_classes, " classes (0..", num_classes - 1, ")"));
    }
    dataset.labels[i] = label;
  }
  return dataset;
}

// splitmix64's finaliser: derives independent generator seeds from one seed,
// so the test set does not change when the training set's size does.
uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform and Gaussian draws with the same results on every platform:
// std::mt19937_64's output is fixed by the standard, but std's distributions
// are implementation-defined, so the conversions are written out here.
class PortableRandom {
 public:
  explicit PortableRandom(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, bound) without modulo bias (rejection sampling).
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (true) {
      const uint64_t x = engine_();
      if (x >= threshold) return x % bound;
    }
  }

  // Standard normal by Box–Muller; the second value of each pair is kept.
  double Gaussian() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Uniform();  // (0, 1]: log(u1) is finite
    const double u2 = Uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * M_PI * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Expected distance between two class centres, in units of the noise's
// standard deviation. 4 makes the classes separable by an MLP (a nearest-
// centroid rule already scores far above chance) without being trivial, and
// it is the same for every feature_dim because the centres' spread is scaled
// by 1/sqrt(feature_dim).
constexpr double kCentreSeparation = 4.0;

// Refuse synthetic sets over 2^30 floats (4 GiB) per split: far beyond any
// experiment here, and a typo in a size flag should fail, not swap.
constexpr int64_t kMaxSyntheticElements = int64_t{1} << 30;

Dataset MakeSyntheticSplit(const std::vector<double>& centres, int64_t size,
                           const SyntheticOptions& options, uint64_t seed) {
  PortableRandom random(seed);
  Dataset dataset;
  dataset.name = "synthetic";
  dataset.size = size;
  dataset.feature_dim = options.feature_dim;
  dataset.channels = options.channels;
  dataset.height = options.height;
  dataset.width = options.width;
  dataset.num_classes = options.num_classes;
  dataset.labels.resize(size);
  dataset.features.resize(size * options.feature_dim);
  for (int64_t i = 0; i < size; ++i) {
    const int label = static_cast<int>(random.Below(options.num_classes));
    dataset.labels[i] = label;
    const double* centre =
        centres.data() + int64_t{label} * options.feature_dim;
    float* row = dataset.features.data() + i * options.feature_dim;
    for (int f = 0; f < options.feature_dim; ++f) {
      row[f] = static_cast<float>(centre[f] + random.Gaussian());
    }
  }
  return dataset;
}

}  // namespace

absl::StatusOr<DatasetPair> LoadMnistFormat(const std::string& dir) {
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat("data directory ", dir,
                                            " does not exist; ", kInstallHint));
  }
  ASSIGN_OR_RETURN(RawSplit train, ReadSplit(dir, "train"));
  ASSIGN_OR_RETURN(RawSplit test, ReadSplit(dir, "t10k"));
  if (train.images.dims[1] != test.images.dims[1] ||
      train.images.dims[2] != test.images.dims[2]) {
    return absl::InvalidArgumentError(
        absl::StrCat("image size mismatch: ", train.images_path, " has ",
                     train.images.dims[1], "x", train.images.dims[2],
                     " images but ", test.images_path, " has ",
                     test.images.dims[1], "x", test.images.dims[2]));
  }
  // The class count comes from the training labels; a test label beyond it
  // would be a class the model cannot output, so ToDataset rejects it.
  const auto largest =
      std::max_element(train.labels.data.begin(), train.labels.data.end());
  const int num_classes = 1 + *largest;
  // Classes are 0..C-1, each with samples: a label far above the others
  // (one corrupt byte) would otherwise ask for a model of 201 outputs.
  std::vector<bool> seen(num_classes, false);
  for (const uint8_t label : train.labels.data) seen[label] = true;
  if (const auto gap = std::find(seen.begin(), seen.end(), false);
      gap != seen.end()) {
    const int missing = static_cast<int>(gap - seen.begin());
    return absl::DataLossError(absl::StrCat(
        train.labels_path, ": label ", *largest, " at item ",
        largest - train.labels.data.begin(), " but no item has label ",
        missing, ": classes must be 0..C-1, each with samples; the file looks "
        "corrupt (download it again)"));
  }
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(train.labels_path,
                     ": every label is 0; a classification data set "
                     "needs at least 2 classes"));
  }
  const std::string name = DatasetName(dir);
  DatasetPair pair;
  ASSIGN_OR_RETURN(pair.train, ToDataset(std::move(train), name, num_classes));
  ASSIGN_OR_RETURN(pair.test, ToDataset(std::move(test), name, num_classes));
  return pair;
}

absl::StatusOr<DatasetPair> MakeSynthetic(const SyntheticOptions& options) {
  if (options.train_size < 1 || options.test_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic data set: train_size and test_size must be >= 1, got ",
        options.train_size, " and ", options.test_size));
  }
  if (options.feature_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic data set: feature_dim must be >= 1, got ",
                     options.feature_dim));
  }
  if (options.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic data set: num_classes must be >= 2, got ",
                     options.num_classes));
  }
  const bool flat =
      options.channels == 0 && options.height == 0 && options.width == 0;
  const bool image =
      options.channels > 0 && options.height > 0 && options.width > 0 &&
      int64_t{options.channels} * options.height * options.width ==
          options.feature_dim;
  if (!flat && !image) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic data set: image shape ", options.channels, "x",
        options.height, "x", options.width,
        " must be all positive with channels*height*width = feature_dim (",
        options.feature_dim, "), or all 0 for flat samples"));
  }
  const int64_t largest = std::max(options.train_size, options.test_size);
  if (largest > kMaxSyntheticElements / options.feature_dim ||
      options.num_classes > kMaxSyntheticElements / options.feature_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic data set: ", largest, " samples of ",
                     options.feature_dim, " features (or ", options.num_classes,
                     " class centres) exceed the "
                     "limit of ",
                     kMaxSyntheticElements, " values per split"));
  }

  // Centre coordinates ~ N(0, s²) with s = separation / sqrt(2·dim): the
  // squared distance between two centres then has mean 2·dim·s² = separation².
  const double spread =
      kCentreSeparation / std::sqrt(2.0 * options.feature_dim);
  PortableRandom centre_random(MixSeed(options.seed, 0));
  std::vector<double> centres(int64_t{options.num_classes} *
                              options.feature_dim);
  for (double& c : centres) c = spread * centre_random.Gaussian();

  DatasetPair pair;
  pair.train = MakeSyntheticSplit(centres, options.train_size, options,
                                  MixSeed(options.seed, 1));
  pair.test = MakeSyntheticSplit(centres, options.test_size, options,
                                 MixSeed(options.seed, 2));
  return pair;
}

}  // namespace gradsync
