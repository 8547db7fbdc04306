// A synthetic click-log-like data set for the embedding model: each sample is
// a bag of ids drawn from a Zipf distribution (a few ids are in most bags, most
// ids are rare, as in click logs and text), and its label depends on the ids,
// so a model that learns per-id embeddings really learns.
//
// Every id has a hidden score per class, drawn once from the seed; a bag's
// label is the argmax over classes of the bag's summed hidden scores plus
// Gaussian noise. Ids are stored as float32 features (exact below 2^24), one
// bag of `bag_size` ids per row, and ranks are mapped to ids by a seeded
// permutation, as hashed feature ids are: the frequent ids are spread over the
// table, not packed at its start (where a range partition of the table would
// put them all on one parameter server).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/dataset.h"

namespace gradsync {

struct ZipfBagsOptions {
  int64_t train_size = 65536;
  int64_t test_size = 8192;
  // Ids are 0..vocabulary-1; the embedding table's rows.
  int64_t vocabulary = 100000;
  int bag_size = 16;
  // P(the id of rank r) ∝ 1 / r^exponent, r = 1..vocabulary. Click logs and
  // word frequencies sit around 1.0-1.2.
  double exponent = 1.1;
  int num_classes = 2;
  // The noise added to each class's summed score, in units of that sum's
  // standard deviation (sqrt(bag_size)): 0 makes labels a function of the
  // ids; 0.5 caps a model that knew every hidden score at about 85 % with
  // two classes.
  double label_noise = 0.5;
  uint64_t seed = 1;
};

// The largest vocabulary whose ids float32 holds exactly.
inline constexpr int64_t kMaxZipfVocabulary = int64_t{1} << 24;

// The train and test sets (drawn from separate streams of `seed`, so the test
// set does not depend on train_size). Errors name the option out of range.
absl::StatusOr<DatasetPair> MakeZipfBags(const ZipfBagsOptions& options);

// The id of each Zipf rank (rank 1 first): the permutation MakeZipfBags uses
// for `options`. For tests and for reading which ids are the frequent ones.
std::vector<int64_t> ZipfIdsByRank(const ZipfBagsOptions& options);

}  // namespace gradsync
