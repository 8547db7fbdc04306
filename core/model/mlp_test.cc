// Tests of the MLP: forward and loss against a double-precision reference,
// every parameter's gradient against central differences of that reference,
// the order and timing of the gradient-ready callbacks, initialisation, and
// errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"
#include "core/model/model.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// The MLP's definition, written plainly in double: z = a·Wᵀ + b, ReLU on
// hidden layers, mean softmax cross-entropy. Parameters in the flat layout
// (fc1.weight, fc1.bias, fc2.weight, ...).
double ReferenceLoss(const std::vector<int>& widths,
                     const std::vector<double>& params,
                     const std::vector<float>& inputs,
                     const std::vector<int32_t>& labels, int batch,
                     std::vector<double>* logits = nullptr) {
  std::vector<double> activations(inputs.begin(), inputs.end());
  size_t offset = 0;
  const int layers = static_cast<int>(widths.size()) - 1;
  for (int layer = 1; layer <= layers; ++layer) {
    const int in = widths[layer - 1];
    const int out = widths[layer];
    const double* weight = params.data() + offset;
    const double* bias = weight + static_cast<size_t>(out) * in;
    offset += static_cast<size_t>(out) * in + out;
    std::vector<double> next(static_cast<size_t>(batch) * out);
    for (int r = 0; r < batch; ++r) {
      for (int o = 0; o < out; ++o) {
        double z = bias[o];
        for (int i = 0; i < in; ++i) {
          z += activations[r * in + i] * weight[o * in + i];
        }
        next[r * out + o] = layer < layers ? std::max(z, 0.0) : z;
      }
    }
    activations = std::move(next);
  }
  if (logits != nullptr) *logits = activations;
  const int classes = widths.back();
  double total = 0.0;
  for (int r = 0; r < batch; ++r) {
    const double* row = activations.data() + r * classes;
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(row[c]);
    total += std::log(sum) - row[labels[r]];
  }
  return total / batch;
}

std::vector<float> RandomInputs(int64_t count, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<float> values(count);
  for (float& v : values) {
    v = static_cast<float>(static_cast<double>(generator() >> 11) * 0x1.0p-53);
  }
  return values;
}

// A model bound to a CPU device with its flat buffers, parameters initialised.
class MlpFixture : public ::testing::Test {
 protected:
  void Build(std::vector<int> widths, int max_batch, uint64_t seed = 7) {
    widths_ = widths;
    auto device = CreateDevice(DeviceOptions{});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    auto model = CreateMlp(MlpOptions{widths});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto layout = ParamLayout::Create(model_->ParamSpecs(), 0);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = std::make_unique<ParamLayout>(*std::move(layout));
    const int64_t total = layout_->total_numel();
    params_ = *device_->Allocate<float>(total);
    grads_ = *device_->Allocate<float>(total);
    host_params_.resize(total);
    model_->InitParams(seed, *layout_, host_params_.data());
    ASSERT_TRUE(
        device_
            ->CopyToDevice(params_, host_params_.data(), total * sizeof(float))
            .ok());
    ASSERT_TRUE(
        model_->Bind(*device_, *layout_, params_, grads_, max_batch).ok());
    loss_ = *device_->Allocate<float>(1);
  }

  // Uploads a batch of inputs and labels; returns their device pointers.
  void Upload(const std::vector<float>& inputs,
              const std::vector<int32_t>& labels) {
    inputs_ = *device_->Allocate<float>(static_cast<int64_t>(inputs.size()));
    labels_ = *device_->Allocate<int32_t>(static_cast<int64_t>(labels.size()));
    ASSERT_TRUE(device_
                    ->CopyToDevice(inputs_, inputs.data(),
                                   inputs.size() * sizeof(float))
                    .ok());
    ASSERT_TRUE(device_
                    ->CopyToDevice(labels_, labels.data(),
                                   labels.size() * sizeof(int32_t))
                    .ok());
  }

  std::vector<float> Grads() {
    std::vector<float> grads(layout_->total_numel());
    EXPECT_TRUE(
        device_->CopyToHost(grads.data(), grads_, grads.size() * sizeof(float))
            .ok());
    return grads;
  }

  float Loss() {
    float loss = 0;
    EXPECT_TRUE(device_->CopyToHost(&loss, loss_, sizeof(float)).ok());
    return loss;
  }

  std::vector<int> widths_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParamLayout> layout_;
  std::vector<float> host_params_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* loss_ = nullptr;
  float* inputs_ = nullptr;
  int32_t* labels_ = nullptr;
};

TEST_F(MlpFixture, ParamSpecsNamesAndShapes) {
  Build({7, 5, 3}, 2);
  const std::vector<ParamSpec> specs = model_->ParamSpecs();
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "fc1.weight");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(specs[1].name, "fc1.bias");
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(specs[3].name, "fc2.bias");
  EXPECT_EQ(model_->input_dim(), 7);
  EXPECT_EQ(model_->num_classes(), 3);
  EXPECT_EQ(model_->name(), "mlp-7-5-3");
}

TEST_F(MlpFixture, DefaultModelHasAboutHalfAMillionParameters) {
  auto model = CreateMlp(MlpOptions{});
  ASSERT_TRUE(model.ok());
  auto layout = ParamLayout::Create((*model)->ParamSpecs(), 0);
  ASSERT_TRUE(layout.ok());
  // 784·512 + 512 + 512·256 + 256 + 256·10 + 10.
  EXPECT_EQ(layout->total_numel(), 535818);
}

// Every parameter's gradient against central differences of the double
// reference (which sees exactly the float parameters the model uses), and
// the loss and logits against the reference's.
TEST_F(MlpFixture, GradientsMatchCentralDifferences) {
  const int batch = 6;
  Build({7, 5, 4, 3}, 8);
  const std::vector<float> inputs = RandomInputs(batch * 7, 11);
  const std::vector<int32_t> labels = {0, 2, 1, 2, 0, 1};
  Upload(inputs, labels);
  ASSERT_TRUE(
      model_->ForwardBackward(inputs_, labels_, batch, loss_, nullptr).ok());

  std::vector<double> params(host_params_.begin(), host_params_.end());
  const double loss = ReferenceLoss(widths_, params, inputs, labels, batch);
  EXPECT_NEAR(Loss(), loss, 1e-5 * std::max(1.0, loss));

  const std::vector<float> grads = Grads();
  const double h = 1e-6;
  for (const ParamInfo& info : layout_->params()) {
    for (int64_t i = 0; i < info.numel; ++i) {
      const size_t index = static_cast<size_t>(info.offset + i);
      const double saved = params[index];
      params[index] = saved + h;
      const double plus = ReferenceLoss(widths_, params, inputs, labels, batch);
      params[index] = saved - h;
      const double minus =
          ReferenceLoss(widths_, params, inputs, labels, batch);
      params[index] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(grads[index], numeric, 1e-5 + 1e-3 * std::abs(numeric))
          << info.spec.name << "[" << i << "]";
    }
  }
}

TEST_F(MlpFixture, ForwardGivesTheReferenceLogits) {
  const int batch = 3;
  Build({7, 5, 4, 3}, 4);
  const std::vector<float> inputs = RandomInputs(batch * 7, 5);
  Upload(inputs, {0, 0, 0});
  const float* logits = nullptr;
  ASSERT_TRUE(model_->Forward(inputs_, batch, &logits).ok());
  std::vector<float> got(batch * 3);
  ASSERT_TRUE(
      device_->CopyToHost(got.data(), logits, got.size() * sizeof(float)).ok());
  std::vector<double> expected;
  ReferenceLoss(widths_,
                std::vector<double>(host_params_.begin(), host_params_.end()),
                inputs, {0, 0, 0}, batch, &expected);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-5);
}

TEST_F(MlpFixture,
       ReadyIsCalledOncePerParameterLastLayerFirstWithFinalGradients) {
  const int batch = 6;
  Build({7, 5, 4, 3}, 6);
  Upload(RandomInputs(batch * 7, 3), {1, 1, 0, 2, 2, 0});
  // Stale values from an earlier step must not leak into this one.
  device_->Fill(grads_, layout_->total_numel(), 12345.0f);

  std::vector<int> order;
  std::vector<std::vector<float>> snapshots(layout_->params().size());
  auto ready = [&](int param) {
    order.push_back(param);
    const ParamInfo& info = layout_->params()[param];
    snapshots[param].resize(info.numel);
    ASSERT_TRUE(device_->Synchronize().ok());
    ASSERT_TRUE(device_
                    ->CopyToHost(snapshots[param].data(), grads_ + info.offset,
                                 info.numel * sizeof(float))
                    .ok());
  };
  ASSERT_TRUE(
      model_->ForwardBackward(inputs_, labels_, batch, loss_, ready).ok());

  // fc3.bias, fc3.weight, fc2.bias, fc2.weight, fc1.bias, fc1.weight.
  EXPECT_EQ(order, (std::vector<int>{5, 4, 3, 2, 1, 0}));
  const std::vector<float> final_grads = Grads();
  for (const ParamInfo& info : layout_->params()) {
    for (int64_t i = 0; i < info.numel; ++i) {
      const int p = &info - layout_->params().data();
      ASSERT_EQ(snapshots[p][i], final_grads[info.offset + i])
          << info.spec.name << "[" << i << "]";
      ASSERT_NE(final_grads[info.offset + i], 12345.0f) << info.spec.name;
    }
  }
}

TEST_F(MlpFixture, SmallerBatchAfterLargerIgnoresStaleRows) {
  Build({7, 5, 3}, 8);
  const std::vector<float> inputs = RandomInputs(8 * 7, 9);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 0, 1};
  Upload(inputs, labels);
  ASSERT_TRUE(
      model_->ForwardBackward(inputs_, labels_, 8, loss_, nullptr).ok());
  ASSERT_TRUE(
      model_->ForwardBackward(inputs_, labels_, 3, loss_, nullptr).ok());
  const double expected = ReferenceLoss(
      widths_, std::vector<double>(host_params_.begin(), host_params_.end()),
      inputs, labels, 3);
  EXPECT_NEAR(Loss(), expected, 1e-5);
}

TEST_F(MlpFixture, BatchErrors) {
  Build({7, 5, 3}, 4);
  Upload(RandomInputs(8 * 7, 1), std::vector<int32_t>(8, 0));
  auto too_big = model_->ForwardBackward(inputs_, labels_, 5, loss_, nullptr);
  ASSERT_FALSE(too_big.ok());
  EXPECT_TRUE(Contains(too_big.message(), "[1, 4]")) << too_big;
  EXPECT_FALSE(
      model_->ForwardBackward(inputs_, labels_, 0, loss_, nullptr).ok());
  const float* logits = nullptr;
  EXPECT_FALSE(model_->Forward(inputs_, 5, &logits).ok());
}

TEST(MlpTest, RunningBeforeBindIsAnError) {
  auto model = CreateMlp(MlpOptions{{4, 2}});
  ASSERT_TRUE(model.ok());
  float input[4] = {0, 0, 0, 0};
  const float* logits = nullptr;
  auto status = (*model)->Forward(input, 1, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

TEST(MlpTest, BindRejectsAForeignLayout) {
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok());
  auto model = CreateMlp(MlpOptions{{4, 3, 2}});
  ASSERT_TRUE(model.ok());
  auto other = ParamLayout::Create({{"fc1.weight", {3, 4}},
                                    {"fc1.bias", {3}},
                                    {"fc2.weight", {3, 3}},
                                    {"fc2.bias", {3}}},
                                   0);
  ASSERT_TRUE(other.ok());
  float* params = *(*device)->Allocate<float>(other->total_numel());
  float* grads = *(*device)->Allocate<float>(other->total_numel());
  auto status = (*model)->Bind(**device, *other, params, grads, 2);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "fc2.weight")) << status;
}

TEST(MlpInitTest, SameSeedSameValuesDifferentSeedDifferentValues) {
  auto model = CreateMlp(MlpOptions{{7, 5, 4, 3}});
  ASSERT_TRUE(model.ok());
  auto layout = ParamLayout::Create((*model)->ParamSpecs(), 0);
  ASSERT_TRUE(layout.ok());
  const int64_t n = layout->total_numel();
  std::vector<float> a(n), b(n), c(n);
  (*model)->InitParams(42, *layout, a.data());
  (*model)->InitParams(42, *layout, b.data());
  (*model)->InitParams(43, *layout, c.data());
  EXPECT_EQ(a, b);
  int64_t differing = 0;
  for (int64_t i = 0; i < n; ++i) differing += a[i] != c[i];
  EXPECT_EQ(differing, n);

  // PyTorch nn.Linear's bound: every value of layer i within 1/sqrt(in_i),
  // and the values spread over the range rather than collapsing.
  const std::vector<int> widths = {7, 5, 4, 3};
  for (const ParamInfo& info : layout->params()) {
    const int layer = info.spec.name[2] - '0';
    const float bound = 1.0f / std::sqrt(static_cast<float>(widths[layer - 1]));
    float low = bound, high = -bound;
    for (int64_t i = 0; i < info.numel; ++i) {
      const float v = a[info.offset + i];
      ASSERT_LE(std::abs(v), bound) << info.spec.name;
      low = std::min(low, v);
      high = std::max(high, v);
    }
    if (info.numel >= 15) {
      EXPECT_GT(high - low, bound) << info.spec.name;
    }
  }
}

TEST(MlpInitTest, ValuesArePinnedAcrossPlatforms) {
  // The generator and the conversion to floats are fully specified, so these
  // numbers are the same on every machine and compiler; a change here changes
  // every experiment's starting point.
  auto model = CreateMlp(MlpOptions{{4, 2}});
  ASSERT_TRUE(model.ok());
  auto layout = ParamLayout::Create((*model)->ParamSpecs(), 0);
  ASSERT_TRUE(layout.ok());
  std::vector<float> values(layout->total_numel());
  (*model)->InitParams(1, *layout, values.data());
  for (float v : values) EXPECT_LE(std::abs(v), 0.5f);
  // Recorded from this implementation (mt19937_64 seeded by SplitMix64).
  const std::vector<float> pinned = {
      -0.0585083254f, -0.171597719f,
      0.244441316f,   -0.108281173f,  // fc1.weight
      -0.245954394f,  0.286037922f,
      -0.304702818f,  0.185949638f,   //
      0.216691315f,   0.246128514f};  // fc1.bias
  ASSERT_EQ(values.size(), pinned.size());
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(values[i], pinned[i]) << i;
}

TEST(ParseLayerWidthsTest, ParsesAndExplainsErrors) {
  auto widths = ParseLayerWidths("784,512,256,10");
  ASSERT_TRUE(widths.ok());
  EXPECT_EQ(*widths, (std::vector<int>{784, 512, 256, 10}));
  EXPECT_EQ(*ParseLayerWidths(" 4, 2 "), (std::vector<int>{4, 2}));

  auto zero = ParseLayerWidths("784,0,10");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "layer width 0 at position 2 in --layers=784,0,10; every width "
            "must be >= 1");
  auto word = ParseLayerWidths("784,x,10");
  ASSERT_FALSE(word.ok());
  EXPECT_TRUE(Contains(word.status().message(), "'x' at position 2"))
      << word.status();
  EXPECT_FALSE(ParseLayerWidths("784").ok());
  EXPECT_FALSE(ParseLayerWidths("").ok());
  EXPECT_FALSE(ParseLayerWidths("784,,10").ok());
  EXPECT_FALSE(ParseLayerWidths("784,-5,10").ok());
}

TEST(CreateMlpTest, RejectsBadWidths) {
  EXPECT_FALSE(CreateMlp(MlpOptions{{784}}).ok());
  auto zero = CreateMlp(MlpOptions{{784, 0, 10}});
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Contains(zero.status().message(), "position 2")) << zero.status();
}

}  // namespace
}  // namespace gradsync
