// The synthetic models: their tensor tables match the published architectures,
// their gradients are the documented deterministic values, final when
// reported, reported last layer first, and a step takes --compute_ms.
#include "core/model/synthetic_model.h"

#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

int64_t TotalNumel(const std::vector<ParamSpec>& specs) {
  int64_t total = 0;
  for (const ParamSpec& spec : specs) total += spec.numel();
  return total;
}

std::vector<ParamSpec> Specs(const std::string& architecture) {
  SyntheticModelOptions options;
  options.architecture = architecture;
  auto specs = SyntheticParamSpecs(options);
  EXPECT_TRUE(specs.ok()) << specs.status();
  return specs.ok() ? *specs : std::vector<ParamSpec>{};
}

TEST(SyntheticParamSpecsTest, ResNet50HasTorchvisionsTensors) {
  const std::vector<ParamSpec> specs = Specs("resnet50");
  EXPECT_EQ(specs.size(), 161u);
  EXPECT_EQ(TotalNumel(specs), 25'557'032);
  EXPECT_EQ(specs.front().name, "conv1.weight");
  EXPECT_THAT(specs.front().shape, ::testing::ElementsAre(64, 3, 7, 7));
  EXPECT_EQ(specs[specs.size() - 2].name, "fc.weight");
  EXPECT_THAT(specs[specs.size() - 2].shape,
              ::testing::ElementsAre(1000, 2048));
}

TEST(SyntheticParamSpecsTest, Vgg16HasItsHugeFirstClassifierLayer) {
  const std::vector<ParamSpec> specs = Specs("vgg16");
  EXPECT_EQ(specs.size(), 32u);
  EXPECT_EQ(TotalNumel(specs), 138'357'544);
  int64_t largest = 0;
  std::string largest_name;
  for (const ParamSpec& spec : specs) {
    if (spec.numel() > largest)
      largest = spec.numel(), largest_name = spec.name;
  }
  EXPECT_EQ(largest_name, "classifier.0.weight");
  EXPECT_EQ(largest, int64_t{25088} * 4096);
}

TEST(SyntheticParamSpecsTest, BertBaseHasEmbeddingsTwelveLayersAndPooler) {
  const std::vector<ParamSpec> specs = Specs("bert-base");
  EXPECT_EQ(specs.size(), 5u + 12 * 16 + 2);
  EXPECT_EQ(TotalNumel(specs), 109'482'240);
  EXPECT_EQ(specs.front().name, "embeddings.word_embeddings.weight");
  EXPECT_THAT(specs.front().shape, ::testing::ElementsAre(30522, 768));
  EXPECT_EQ(specs.back().name, "pooler.dense.bias");
}

TEST(SyntheticParamSpecsTest, CustomSplitsTheTotalIntoNearlyEqualTensors) {
  SyntheticModelOptions options;
  options.custom_params = 1'000'003;
  options.custom_tensors = 7;
  auto specs = SyntheticParamSpecs(options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 7u);
  EXPECT_EQ(TotalNumel(*specs), 1'000'003);
  for (const ParamSpec& spec : *specs) {
    EXPECT_GE(spec.numel(), 1'000'003 / 7);
    EXPECT_LE(spec.numel(), 1'000'003 / 7 + 1);
  }
}

TEST(SyntheticParamSpecsTest, RejectsBadOptions) {
  SyntheticModelOptions options;
  options.architecture = "alexnet";
  EXPECT_THAT(std::string(SyntheticParamSpecs(options).status().message()),
              ::testing::HasSubstr("resnet50"));
  options.architecture = "custom";
  options.custom_tensors = 0;
  EXPECT_FALSE(SyntheticParamSpecs(options).ok());
  options.custom_tensors = 10;
  options.custom_params = 9;
  EXPECT_FALSE(SyntheticParamSpecs(options).ok());
  options.custom_params = 100;
  options.compute_ms = -1;
  EXPECT_FALSE(CreateSyntheticModel(options).ok());
  options.compute_ms = 10;
  for (double share : {-0.1, 1.0, std::nan("")}) {
    options.forward_share = share;
    EXPECT_THAT(std::string(CreateSyntheticModel(options).status().message()),
                ::testing::HasSubstr("--compute_forward_share"))
        << share;
  }
}

// A small custom model bound to CPU buffers.
class SyntheticModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.custom_params = 50'000;  // tensors of 10,000: several staging runs
    options_.custom_tensors = 5;      // would not show a wrong phase carry
    auto device = CreateDevice(DeviceOptions{});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    auto model = CreateSyntheticModel(options_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto layout = ParamLayout::Create(model_->ParamSpecs(), 0);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = std::make_unique<ParamLayout>(std::move(*layout));
    params_.resize(layout_->total_numel());
    grads_.resize(layout_->total_numel());
    ASSERT_TRUE(
        model_->Bind(*device_, *layout_, params_.data(), grads_.data(), 8)
            .ok());
  }

  // One step on labels {0, 1, ..., 7} (mean 3.5); returns the ready order.
  std::vector<int> Step() {
    std::vector<int32_t> labels = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<float> inputs(8 * model_->input_dim());
    float loss = 0;
    std::vector<int> order;
    const absl::Status status = model_->ForwardBackward(
        inputs.data(), labels.data(), 8, &loss, [&](int param) {
          order.push_back(param);
          // The gradient must be final when it is reported.
          const ParamInfo& info = layout_->params()[param];
          for (int64_t i = 0; i < info.numel; i += 997) {
            ASSERT_EQ(grads_[info.offset + i],
                      SyntheticGradient(step_, param, i, 3.5f))
                << "param " << param << " element " << i;
          }
        });
    EXPECT_TRUE(status.ok()) << status;
    ++step_;
    return order;
  }

  SyntheticModelOptions options_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParamLayout> layout_;
  std::vector<float> params_, grads_;
  int64_t step_ = 0;
};

TEST_F(SyntheticModelTest, ReportsEveryGradientOnceLastLayerFirst) {
  EXPECT_THAT(Step(), ::testing::ElementsAre(4, 3, 2, 1, 0));
}

TEST_F(SyntheticModelTest, GradientsAreTheDocumentedExactValues) {
  for (int step = 0; step < 3; ++step) {
    Step();
    for (const ParamInfo& info : layout_->params()) {
      const int param = static_cast<int>(&info - layout_->params().data());
      for (int64_t i = 0; i < info.numel; ++i) {
        ASSERT_EQ(grads_[info.offset + i],
                  SyntheticGradient(step, param, i, 3.5f))
            << "step " << step << " param " << param << " element " << i;
      }
    }
  }
}

TEST_F(SyntheticModelTest, GradientsChangeWithStepAndParameter) {
  // Otherwise a strategy that returned last step's result, or swapped two
  // tensors, would pass every check.
  int differing_steps = 0, differing_params = 0;
  for (int64_t i = 0; i < 64; ++i) {
    differing_steps +=
        SyntheticGradient(0, 2, i, 0) != SyntheticGradient(1, 2, i, 0);
    differing_params +=
        SyntheticGradient(0, 2, i, 0) != SyntheticGradient(0, 3, i, 0);
  }
  EXPECT_GT(differing_steps, 32);
  EXPECT_GT(differing_params, 32);
}

TEST_F(SyntheticModelTest, InitialParametersAreDeterministicSmallAndExact) {
  std::vector<float> a(layout_->total_numel()), b(layout_->total_numel());
  model_->InitParams(7, *layout_, a.data());
  model_->InitParams(7, *layout_, b.data());
  EXPECT_EQ(a, b);
  model_->InitParams(8, *layout_, b.data());
  EXPECT_NE(a, b);
  for (float v : a) {
    ASSERT_LE(std::abs(v), 8.0f / 64);
    ASSERT_EQ(v * 64, std::round(v * 64));
  }
}

// A custom model of 1,000 parameters in 10 tensors with `options`' timing,
// bound to CPU buffers for one-row batches.
struct TimedModel {
  explicit TimedModel(SyntheticModelOptions options) {
    options.custom_params = 1000;
    options.custom_tensors = 10;
    device = *CreateDevice(DeviceOptions{});
    model = *CreateSyntheticModel(options);
    layout = std::make_unique<ParamLayout>(
        *ParamLayout::Create(model->ParamSpecs(), 0));
    bound = model->Bind(*device, *layout, params.data(), grads.data(), 1);
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamLayout> layout;
  std::vector<float> params = std::vector<float>(1000);
  std::vector<float> grads = std::vector<float>(1000);
  std::vector<float> inputs = std::vector<float>(784);
  absl::Status bound;
  int32_t label = 3;
  float loss = 0;
};

TEST(SyntheticModelTimingTest, StepLastsAtLeastComputeMs) {
  SyntheticModelOptions options;
  options.compute_ms = 30;
  TimedModel m(options);
  ASSERT_TRUE(m.bound.ok()) << m.bound;
  std::vector<double> ready_ms;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      m.model
          ->ForwardBackward(m.inputs.data(), &m.label, 1, &m.loss,
                            [&](int) {
                              ready_ms.push_back(
                                  std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
                            })
          .ok());
  ASSERT_EQ(ready_ms.size(), 10u);
  // The time is spread over the tensors: the first (last layer's) gradient
  // is ready after its tenth of the budget, the last after all of it.
  EXPECT_GE(ready_ms.front(), 30.0 / 10 - 0.01);
  EXPECT_GE(ready_ms.back(), 30.0 - 0.01);
  EXPECT_EQ(m.loss, 3.0f);
}

// With a forward share, forward asks for each tensor's parameters in forward
// order, one tensor at a time, and spends its share of the time after each
// (in proportion to size) before backward starts; every parameter is asked
// for before the first gradient is ready, and the step still lasts
// compute_ms.
TEST(SyntheticModelTimingTest, ForwardAsksTensorByTensorWithItsShare) {
  SyntheticModelOptions options;
  options.compute_ms = 40;
  options.forward_share = 0.5;
  TimedModel m(options);
  ASSERT_TRUE(m.bound.ok()) << m.bound;
  const auto start = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
        .count();
  };
  std::vector<std::pair<int, int>> asked;
  std::vector<double> asked_ms;
  std::vector<int> ready;
  double first_ready_ms = -1;
  ASSERT_TRUE(m.model
                  ->ForwardBackwardLayerwise(
                      m.inputs.data(), &m.label, 1, &m.loss,
                      [&](int first, int end) {
                        asked.emplace_back(first, end);
                        asked_ms.push_back(since());
                        // Tensor 5's parameters arrive late: the rest of
                        // forward starts after them.
                        if (first == 5) {
                          std::this_thread::sleep_for(
                              std::chrono::milliseconds(10));
                        }
                        return absl::OkStatus();
                      },
                      [&](int param) {
                        if (ready.empty()) first_ready_ms = since();
                        ready.push_back(param);
                      })
                  .ok());
  ASSERT_EQ(asked.size(), 10u);
  for (int p = 0; p < 10; ++p) {
    EXPECT_EQ(asked[p], std::make_pair(p, p + 1));
  }
  // Tensor p is asked for after the forward time of tensors 0..p-1.
  EXPECT_GE(asked_ms[5], 20.0 * 5 / 10 - 0.01);
  // Tensors 5..9 compute after tensor 5's late parameters.
  EXPECT_GE(asked_ms[6], 20.0 * 6 / 10 + 10.0 - 0.01);
  // Backward starts after the whole forward share and the wait, and its
  // first gradient after its own tenth.
  EXPECT_GE(first_ready_ms, 20.0 + 10.0 + 20.0 / 10 - 0.01);
  ASSERT_EQ(ready.size(), 10u);
  EXPECT_EQ(ready.front(), 9);
  EXPECT_EQ(ready.back(), 0);
  EXPECT_GE(since(), 40.0 + 10.0 - 0.01);
}

}  // namespace
}  // namespace gradsync
