// Zipf-distributed bags of ids with labels from hidden per-id scores.
#include "core/data/zipf_bags.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// Independent streams of one seed: the table's structure, the train and the
// test samples.
enum Stream : uint64_t { kStructure = 1, kTrain = 2, kTest = 3 };

std::mt19937_64 GeneratorFor(uint64_t seed, Stream stream) {
  std::seed_seq sequence{static_cast<uint32_t>(seed),
                         static_cast<uint32_t>(seed >> 32),
                         static_cast<uint32_t>(stream), 0x2f1b7u};
  return std::mt19937_64(sequence);
}

absl::Status Validate(const ZipfBagsOptions& o) {
  if (o.vocabulary < 1 || o.vocabulary > kMaxZipfVocabulary) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf bags: vocabulary of ", o.vocabulary, " ids must be in [1, ",
        kMaxZipfVocabulary, "] (ids are stored exactly as float32)"));
  }
  if (o.bag_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf bags: bag size ", o.bag_size, " must be at least 1"));
  }
  if (!(o.exponent > 0) || !(o.exponent <= 10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf bags: exponent ", o.exponent, " must be in (0, 10]"));
  }
  if (o.num_classes < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf bags: ", o.num_classes, " classes; need at least 2"));
  }
  if (!(o.label_noise >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf bags: label noise ", o.label_noise, " must be >= 0"));
  }
  if (o.train_size < 1 || o.test_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zipf bags: ", o.train_size, " training and ", o.test_size,
                     " test samples; need at least 1 of each"));
  }
  return absl::OkStatus();
}

struct Structure {
  std::vector<int64_t> id_of_rank;  // rank 0 (the most frequent) first
  std::vector<double> cumulative;   // P(rank <= r), the last one 1
  std::vector<float> scores;        // [vocabulary × classes], by id
  // Each class's expected score of one drawn id. The frequent ids' scores
  // would otherwise tilt most bags towards one class; subtracting bag_size
  // times this keeps the classes near balance, so chance stays near
  // 1/classes and accuracy means something.
  std::vector<double> mean_score;
};

Structure MakeStructure(const ZipfBagsOptions& o) {
  Structure s;
  std::mt19937_64 generator = GeneratorFor(o.seed, kStructure);
  s.id_of_rank.resize(o.vocabulary);
  std::iota(s.id_of_rank.begin(), s.id_of_rank.end(), int64_t{0});
  std::shuffle(s.id_of_rank.begin(), s.id_of_rank.end(), generator);
  s.cumulative.resize(o.vocabulary);
  double total = 0;
  for (int64_t r = 0; r < o.vocabulary; ++r) {
    total += std::pow(static_cast<double>(r + 1), -o.exponent);
    s.cumulative[r] = total;
  }
  for (double& c : s.cumulative) c /= total;
  s.cumulative.back() = 1.0;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  s.scores.resize(o.vocabulary * o.num_classes);
  for (float& score : s.scores) score = normal(generator);
  s.mean_score.assign(o.num_classes, 0.0);
  for (int64_t r = 0; r < o.vocabulary; ++r) {
    const double p = s.cumulative[r] - (r > 0 ? s.cumulative[r - 1] : 0.0);
    for (int c = 0; c < o.num_classes; ++c) {
      s.mean_score[c] += p * s.scores[s.id_of_rank[r] * o.num_classes + c];
    }
  }
  return s;
}

Dataset MakeSplit(const ZipfBagsOptions& o, const Structure& s, int64_t size,
                  Stream stream, const char* split) {
  Dataset d;
  d.name = absl::StrCat("zipf-bags-", split);
  d.size = size;
  d.feature_dim = o.bag_size;
  d.num_classes = o.num_classes;
  d.features.resize(size * o.bag_size);
  d.labels.resize(size);
  std::mt19937_64 generator = GeneratorFor(o.seed, stream);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double noise = o.label_noise * std::sqrt(o.bag_size);
  std::vector<double> sums(o.num_classes);
  for (int64_t i = 0; i < size; ++i) {
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int j = 0; j < o.bag_size; ++j) {
      const int64_t rank =
          std::upper_bound(s.cumulative.begin(), s.cumulative.end() - 1,
                           uniform(generator)) -
          s.cumulative.begin();
      const int64_t id = s.id_of_rank[rank];
      d.features[i * o.bag_size + j] = static_cast<float>(id);
      for (int c = 0; c < o.num_classes; ++c) {
        sums[c] += s.scores[id * o.num_classes + c];
      }
    }
    for (int c = 0; c < o.num_classes; ++c) {
      sums[c] += noise * normal(generator) - o.bag_size * s.mean_score[c];
    }
    d.labels[i] = static_cast<int32_t>(
        std::max_element(sums.begin(), sums.end()) - sums.begin());
  }
  return d;
}

}  // namespace

absl::StatusOr<DatasetPair> MakeZipfBags(const ZipfBagsOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  const Structure structure = MakeStructure(options);
  DatasetPair pair;
  pair.train =
      MakeSplit(options, structure, options.train_size, kTrain, "train");
  pair.test = MakeSplit(options, structure, options.test_size, kTest, "test");
  return pair;
}

std::vector<int64_t> ZipfIdsByRank(const ZipfBagsOptions& options) {
  return MakeStructure(options).id_of_rank;
}

}  // namespace gradsync
