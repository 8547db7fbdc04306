// Tests of the embedding model: every parameter's gradient against central
// differences of the loss, a table gradient that is zero outside the touched
// rows (whatever the buffer held before), the order of the ready callbacks,
// the table's bucket, and bad input.
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "core/device/device.h"
#include "core/model/gradient_check.h"
#include "core/model/model.h"
#include "core/sync/param_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

EmbeddingModelOptions SmallOptions() {
  EmbeddingModelOptions o;
  o.vocabulary = 20;
  o.dim = 4;
  o.bag_size = 3;
  o.hidden = 5;
  o.num_classes = 3;
  return o;
}

// Ids of a batch of 4 bags: id 7 twice in one bag, id 3 in two bags; rows
// 0, 1, 2, 4.. are never touched except those listed.
const std::vector<float> kIds = {3, 7, 7, 12, 3, 0, 19, 5, 8, 11, 11, 11};
const std::vector<int32_t> kLabels = {0, 2, 1, 2};
constexpr int kBatch = 4;

class EmbeddingModelTest : public testing::Test {
 protected:
  void SetUp() override {
    device_ = *CreateDevice(DeviceOptions{});
    model_ = *CreateEmbeddingModel(SmallOptions());
    layout_ = std::make_unique<ParamLayout>(
        *ParamLayout::Create(model_->ParamSpecs(), 0));
    const int64_t total = layout_->total_numel();
    params_ = *device_->Allocate<float>(total);
    grads_ = *device_->Allocate<float>(total);
    model_->InitParams(5, *layout_, params_);
    ASSERT_TRUE(model_->Bind(*device_, *layout_, params_, grads_, kBatch).ok());
    loss_ = *device_->Allocate<float>(1);
    inputs_ = *device_->Allocate<float>(kIds.size());
    labels_ = *device_->Allocate<int32_t>(kLabels.size());
    std::memcpy(inputs_, kIds.data(), kIds.size() * sizeof(float));
    std::memcpy(labels_, kLabels.data(), kLabels.size() * sizeof(int32_t));
  }

  double Loss() {
    EXPECT_TRUE(
        model_->ForwardBackward(inputs_, labels_, kBatch, loss_, nullptr).ok());
    return *loss_;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParamLayout> layout_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* loss_ = nullptr;
  float* inputs_ = nullptr;
  int32_t* labels_ = nullptr;
};

TEST_F(EmbeddingModelTest, GradientsMatchCentralDifferences) {
  std::vector<int> order;
  ASSERT_TRUE(model_
                  ->ForwardBackward(inputs_, labels_, kBatch, loss_,
                                    [&](int p) { order.push_back(p); })
                  .ok());
  // Last layer first, the table last (its bucket is the last to be ready).
  EXPECT_EQ(order, std::vector<int>({4, 3, 2, 1, 0}));
  const std::vector<float> analytic(grads_, grads_ + layout_->total_numel());
  GradientCheckOptions options;
  options.step = 1e-2f;
  for (const ParamInfo& info : layout_->params()) {
    ExpectGradientMatches(
        info.spec.name, params_ + info.offset, info.numel,
        analytic.data() + info.offset, [&] { return Loss(); }, options);
  }
}

TEST_F(EmbeddingModelTest, OnlyTouchedRowsHaveGradients) {
  // Whatever the buffer held (another worker's rows after a sync) is gone.
  for (int64_t i = 0; i < layout_->total_numel(); ++i) grads_[i] = 9.0f;
  Loss();
  const std::set<int64_t> touched(kIds.begin(), kIds.end());
  const int dim = SmallOptions().dim;
  for (int64_t row = 0; row < SmallOptions().vocabulary; ++row) {
    bool any_non_zero = false;
    for (int k = 0; k < dim; ++k) any_non_zero |= grads_[row * dim + k] != 0;
    EXPECT_EQ(any_non_zero, touched.count(row) == 1) << "row " << row;
  }
}

TEST_F(EmbeddingModelTest, TheTableIsARowSparseBucketOfItsOwnAtTheStart) {
  const ParamInfo& table = layout_->params()[0];
  EXPECT_EQ(table.spec.sparse_row_width, SmallOptions().dim);
  EXPECT_EQ(table.offset, 0);
  const Bucket& bucket = layout_->buckets()[table.bucket];
  EXPECT_EQ(bucket.params, std::vector<int>({0}));
  EXPECT_EQ(bucket.sparse_row_width, SmallOptions().dim);
  EXPECT_EQ(bucket.index, static_cast<int>(layout_->buckets().size()) - 1);
}

TEST_F(EmbeddingModelTest, IdsOutsideTheTableAreRefused) {
  inputs_[5] = 20;  // the vocabulary is 20 rows
  const absl::Status status =
      model_->ForwardBackward(inputs_, labels_, kBatch, loss_, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sample 1 of the batch has id 20"));
  inputs_[5] = 2.5f;
  const float* logits = nullptr;
  EXPECT_FALSE(model_->Forward(inputs_, kBatch, &logits).ok());
}

TEST(EmbeddingModelOptionsTest, EmptyShapesAreRefused) {
  EmbeddingModelOptions o = SmallOptions();
  o.vocabulary = 0;
  EXPECT_THAT(CreateEmbeddingModel(o).status().message(),
              HasSubstr("--embedding_rows"));
  o = SmallOptions();
  o.dim = -3;
  EXPECT_THAT(CreateEmbeddingModel(o).status().message(),
              HasSubstr("rows of -3 must be at least 1 (--embedding_dim)"));
  o = SmallOptions();
  o.bag_size = 0;
  EXPECT_FALSE(CreateEmbeddingModel(o).ok());
  o = SmallOptions();
  o.vocabulary = (int64_t{1} << 24) + 1;
  EXPECT_THAT(CreateEmbeddingModel(o).status().message(),
              HasSubstr("ids a float32 feature holds exactly"));
}

}  // namespace
}  // namespace gradsync
