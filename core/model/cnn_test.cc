#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "core/sync/param_layout.h"
#include "core/model/model.h"
#include "core/model/model_fixture.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

CnnOptions TinyCnn() {
  CnnOptions options;
  options.input = {2, 8, 6, 3};
  options.conv1_channels = 3;
  options.conv2_channels = 4;
  options.hidden = 5;
  return options;
}

TEST(CnnTest, ParametersForFashionMnist) {
  auto model = CreateCnn(CnnOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->input_dim(), 784);
  const std::vector<ParamSpec> specs = (*model)->ParamSpecs();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"conv1.weight", {32, 1, 3, 3}},   {"conv1.bias", {32}},
      {"conv2.weight", {64, 32, 3, 3}},  {"conv2.bias", {64}},
      {"fc1.weight", {128, 7 * 7 * 64}}, {"fc1.bias", {128}},
      {"fc2.weight", {10, 128}},         {"fc2.bias", {10}}};
  ASSERT_EQ(specs.size(), expected.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(specs[i].name, expected[i].first);
    EXPECT_EQ(specs[i].shape, expected[i].second);
  }
  EXPECT_EQ((*model)->buffer_count(), 0);
}

TEST(CnnTest, RefusesImagesTooSmallForTwoPools) {
  CnnOptions options;
  options.input = {1, 3, 28, 10};
  EXPECT_FALSE(CreateCnn(options).ok());
}

TEST(CnnTest, GradientsMatchCentralDifferences) {
  const int batch = 3;
  BoundModel bound(*CreateCnn(TinyCnn()), batch, 5);
  float loss = 0;
  std::multiset<int> reported;
  ASSERT_TRUE(bound.model
                  ->ForwardBackward(bound.inputs.data(), bound.labels.data(),
                                    batch, &loss,
                                    [&](int param) { reported.insert(param); })
                  .ok());
  // Every parameter exactly once.
  ASSERT_EQ(reported.size(), bound.layout->params().size());
  for (size_t i = 0; i < bound.layout->params().size(); ++i) {
    EXPECT_EQ(reported.count(static_cast<int>(i)), 1u) << i;
  }
  // A small step: ReLU and max-pool kinks lie close to some inputs, and a
  // step across one measures a different function.
  GradientCheckOptions options;
  options.samples = 12;
  options.step = 1e-3f;
  options.absolute_error = 1e-3;
  ExpectModelGradientsMatch(bound, batch, options);
}

TEST(CnnTest, LossFallsOnATinyBatch) {
  const int batch = 8;
  CnnOptions options;  // the Fashion-MNIST shape
  BoundModel bound(*CreateCnn(options), batch, 3);
  const double first = bound.Loss(batch);
  double last = first;
  for (int step = 0; step < 40; ++step) {
    last = bound.Loss(batch);
    bound.device.SgdUpdate(bound.params, bound.grads, nullptr,
                           bound.layout->total_numel(), 0.1f, 0.0f, 0.0f);
  }
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.25 * first) << "first " << first << ", last " << last;
}

// Evaluation batches larger than the activation memory run in pieces with
// the same logits.
TEST(CnnTest, ForwardInPiecesMatchesOnePiece) {
  const int batch = 5;
  CnnOptions small = TinyCnn();
  small.max_rows_in_memory = 2;
  BoundModel whole(*CreateCnn(TinyCnn()), batch, 7);
  BoundModel pieces(*CreateCnn(small), batch, 7);
  const float* whole_logits = nullptr;
  const float* piece_logits = nullptr;
  ASSERT_TRUE(
      whole.model->Forward(whole.inputs.data(), batch, &whole_logits).ok());
  ASSERT_TRUE(
      pieces.model->Forward(pieces.inputs.data(), batch, &piece_logits).ok());
  for (int i = 0; i < batch * 3; ++i) {
    EXPECT_NEAR(whole_logits[i], piece_logits[i], 1e-5) << i;
  }
  // A training batch must fit the activation memory.
  float loss = 0;
  EXPECT_FALSE(pieces.model
                   ->ForwardBackward(pieces.inputs.data(), pieces.labels.data(),
                                     batch, &loss, nullptr)
                   .ok());
}

}  // namespace
}  // namespace gradsync
