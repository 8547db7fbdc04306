#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/device/cpu_device.h"
#include "core/model/model.h"
#include "core/model/model_fixture.h"
#include "core/sync/param_layout.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(ResNetTest, ResNet18HasTorchvisionsTensorsForCifar10) {
  auto model = CreateResNet(ResNetOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), "resnet18-3x32x32-10");
  EXPECT_EQ((*model)->input_dim(), 3 * 32 * 32);
  const std::vector<ParamSpec> specs = (*model)->ParamSpecs();
  ASSERT_EQ(specs.size(), 62u);
  int64_t total = 0;
  for (const ParamSpec& spec : specs) total += spec.numel();
  EXPECT_EQ(total, 11173962);
  // The whole list as torchvision's resnet18 (3×3 stem, fc over 10 classes)
  // names it in named_parameters().
  std::vector<std::string> names;
  names.push_back("conv1.weight");
  names.push_back("bn1.weight");
  names.push_back("bn1.bias");
  for (int stage = 1; stage <= 4; ++stage) {
    for (int block = 0; block < 2; ++block) {
      const std::string prefix =
          "layer" + std::to_string(stage) + "." + std::to_string(block) + ".";
      for (const char* layer : {"conv1.weight", "bn1.weight", "bn1.bias",
                                "conv2.weight", "bn2.weight", "bn2.bias"}) {
        names.push_back(prefix + layer);
      }
      if (stage > 1 && block == 0) {
        for (const char* layer : {"downsample.0.weight", "downsample.1.weight",
                                  "downsample.1.bias"}) {
          names.push_back(prefix + layer);
        }
      }
    }
  }
  names.push_back("fc.weight");
  names.push_back("fc.bias");
  ASSERT_EQ(names.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(specs[i].name, names[i]);
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{64, 3, 3, 3}));
  EXPECT_EQ(specs[21].name, "layer2.0.downsample.0.weight");
  EXPECT_EQ(specs[21].shape, (std::vector<int64_t>{128, 64, 1, 1}));
  EXPECT_EQ(specs[60].shape, (std::vector<int64_t>{10, 512}));
  // Running mean and variance of the 20 batch norms: 2 · 4800 channels.
  EXPECT_EQ((*model)->buffer_count(), 9600);
}

TEST(ResNetTest, ResNet18ForwardBackwardOnACifarShapedBatch) {
  const int batch = 4;
  BoundModel bound(*CreateResNet(ResNetOptions{}), batch, 3);
  float loss = 0;
  std::vector<int> order;
  ASSERT_TRUE(bound.model
                  ->ForwardBackward(bound.inputs.data(), bound.labels.data(),
                                    batch, &loss,
                                    [&](int param) { order.push_back(param); })
                  .ok());
  EXPECT_TRUE(std::isfinite(loss));
  // About ln 10 at initialisation.
  EXPECT_GT(loss, 1.0f);
  EXPECT_LT(loss, 5.0f);
  // Every tensor once; the classifier first and the stem last, as backward
  // reaches them.
  ASSERT_EQ(order.size(), 62u);
  EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), 62u);
  EXPECT_EQ(order.front(), 61);  // fc.bias
  EXPECT_EQ(order.back(), 0);    // conv1.weight
  for (const ParamInfo& info : bound.layout->params()) {
    double norm = 0;
    for (int64_t i = 0; i < info.numel; ++i) {
      const float g = bound.grads[info.offset + i];
      ASSERT_TRUE(std::isfinite(g)) << info.spec.name;
      norm += double{g} * g;
    }
    EXPECT_GT(norm, 0.0) << info.spec.name << " got no gradient";
  }
  // The running statistics moved off their initial 0 and 1.
  const float* buffers = bound.model->buffers();
  ASSERT_NE(buffers, nullptr);
  EXPECT_NE(buffers[0], 0.0f);
  // Evaluation mode (running statistics) gives finite logits too.
  const float* logits = nullptr;
  ASSERT_TRUE(bound.model->Forward(bound.inputs.data(), batch, &logits).ok());
  for (int i = 0; i < batch * 10; ++i) EXPECT_TRUE(std::isfinite(logits[i]));
}

// The same structure at test size: stride-2 stages with downsampling
// shortcuts, identity shortcuts, batch norm, residual additions, pooling.
TEST(ResNetTest, GradientsMatchCentralDifferences) {
  ResNetOptions options;
  options.input = {2, 6, 5, 3};
  options.blocks = {2, 1};
  options.widths = {3, 4};
  const int batch = 4;
  BoundModel bound(*CreateResNet(options), batch, 11);
  GradientCheckOptions check;
  check.samples = 8;
  check.step = 1e-3f;
  check.absolute_error = 1e-3;
  ExpectModelGradientsMatch(bound, batch, check);
}

// On a device that asks for NCHW activations (CUDA's --cudnn_layout=nchw;
// here the CPU's test-only twin) the model computes the same step: every
// convolution, batch norm and the pooling run on NCHW buffers, and the
// loss, every gradient, the running statistics and the evaluation logits
// agree with the NHWC model's to float32 rounding (the two sum in different
// orders). A layer wired for the wrong layout mixes pixels and channels and
// misses by the values themselves.
TEST(ResNetTest, NchwActivationsGiveTheNhwcStep) {
  ResNetOptions options;
  options.input = {3, 8, 8, 10};
  options.blocks = {1, 1, 1};
  options.widths = {8, 16, 32};
  const int batch = 4;
  std::vector<float> loss(2), grads[2], buffers[2], logits[2];
  std::unique_ptr<ParamLayout> layout;
  std::vector<float> initial, inputs;
  std::vector<int32_t> labels;
  for (int nchw = 0; nchw < 2; ++nchw) {
    CpuDevice device(1, /*reference_convolutions=*/false,
                     /*reference_batch_norm=*/false, Precision::kFp32,
                     /*convolutions_round_own_operands=*/false,
                     /*nchw_activations=*/nchw == 1);
    EXPECT_EQ(device.activation_layout(),
              nchw ? ActivationLayout::kNchw : ActivationLayout::kNhwc);
    std::unique_ptr<Model> model = *CreateResNet(options);
    if (!layout) {
      layout = std::make_unique<ParamLayout>(
          *ParamLayout::Create(model->ParamSpecs(), 1 << 20));
      initial.resize(layout->total_numel());
      model->InitParams(5, *layout, initial.data());
      inputs.resize(int64_t{batch} * model->input_dim());
      std::mt19937_64 generator(6);
      for (float& x : inputs) {
        x = static_cast<float>(generator() >> 40) * 0x1.0p-23f - 1.0f;
      }
      for (int i = 0; i < batch; ++i) labels.push_back((3 * i) % 10);
    }
    const int64_t n = layout->total_numel();
    float* params = *device.Allocate<float>(n);
    float* grad = *device.Allocate<float>(n);
    std::copy(initial.begin(), initial.end(), params);
    ASSERT_TRUE(model->Bind(device, *layout, params, grad, batch).ok());
    ASSERT_TRUE(model
                    ->ForwardBackward(inputs.data(), labels.data(), batch,
                                      &loss[nchw], nullptr)
                    .ok());
    grads[nchw].assign(grad, grad + n);
    buffers[nchw].assign(model->buffers(),
                         model->buffers() + model->buffer_count());
    const float* out = nullptr;
    ASSERT_TRUE(model->Forward(inputs.data(), batch, &out).ok());
    logits[nchw].assign(out, out + batch * 10);
  }
  EXPECT_NEAR(loss[0], loss[1], 1e-5f * std::max(1.0f, loss[0]));
  const auto expect_close = [](const std::vector<float>& nhwc,
                               const std::vector<float>& nchw, double relative,
                               const std::string& what) {
    ASSERT_EQ(nhwc.size(), nchw.size()) << what;
    double scale = 1e-6;
    for (float v : nhwc) scale = std::max(scale, double{std::fabs(v)});
    for (size_t i = 0; i < nhwc.size(); ++i) {
      ASSERT_NEAR(nhwc[i], nchw[i], relative * scale)
          << what << "[" << i << "]";
    }
  };
  for (const ParamInfo& info : layout->params()) {
    expect_close(
        std::vector<float>(grads[0].begin() + info.offset,
                           grads[0].begin() + info.offset + info.numel),
        std::vector<float>(grads[1].begin() + info.offset,
                           grads[1].begin() + info.offset + info.numel),
        1e-4, info.spec.name);
  }
  expect_close(buffers[0], buffers[1], 1e-5, "running statistics");
  expect_close(logits[0], logits[1], 1e-5, "evaluation logits");
}

TEST(ResNetTest, RefusesAnImagelessDataSet) {
  ResNetOptions options;
  options.input = {0, 0, 0, 10};
  const auto model = CreateResNet(options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("3x32x32"), std::string::npos);
}

}  // namespace
}  // namespace gradsync
