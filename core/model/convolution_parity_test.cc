// The CPU device's oneDNN convolutions against the reference path (im2col +
// GEMM, DeviceOptions::reference_convolutions): the Conv2d layer over odd
// shapes, strides, paddings, kernels, batch 1 and an NCHW input, forward and
// both gradients; then whole training steps of a small ResNet and of the CNN,
// every parameter's gradient, the loss and batch norm's running statistics,
// and an evaluation batch of another size than the bound one. In the whole
// steps the reference also runs batch norm as its loops
// (DeviceOptions::reference_batch_norm), so oneDNN's batch norm is checked
// there too.
//
// Tolerance: the two paths add the same products in different orders, so a
// value summed from n products of numbers in [-1, 1] may differ by float32
// rounding, about n·2⁻²⁴ at worst; the checks allow 4·10⁻⁷·n (and relative
// 10⁻⁴ for the models, whose values pass through many layers). A wrong
// index, stride or padding misses by the size of a whole product, ~0.1 or
// more.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/device/cpu_device.h"
#include "core/device/layer_geometry.h"
#include "core/model/conv2d.h"
#include "core/model/gradient_check.h"
#include "core/model/model.h"
#include "core/model/model_fixture.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

struct ConvCase {
  Conv2dShape shape;
  int images, height, width;
  bool nchw_input;
};

std::string Describe(const ConvCase& c) {
  return absl::StrCat(c.images, "x", c.shape.in_channels, "x", c.height, "x",
                      c.width, (c.nchw_input ? " NCHW" : " NHWC"), " -> ",
                      c.shape.out_channels, " k", c.shape.kernel, " s",
                      c.shape.stride, " p", c.shape.padding,
                      c.shape.bias ? " +bias" : "");
}

// Forward, weight (and bias) gradient and input gradient of one layer on one
// device, from the same seeded values.
struct ConvRun {
  std::vector<float> y, weight_grad, bias_grad, dx;
};

ConvRun RunConv(const ConvCase& c, bool reference) {
  CpuDevice device(1, reference);
  Conv2d conv("conv", c.shape);
  const ImageLayout layout =
      c.nchw_input ? NchwLayout(c.shape.in_channels, c.height, c.width)
                   : NhwcLayout(c.shape.in_channels, c.height, c.width);
  const ConvGeometry g = conv.Geometry(c.images, c.height, c.width, layout);
  std::vector<float> weight = RandomValues(conv.weight_count(), 1);
  std::vector<float> bias = RandomValues(c.shape.out_channels, 2);
  std::vector<float> x = RandomValues(g.input_count(), 3);
  const int64_t outputs = g.column_rows() * c.shape.out_channels;
  std::vector<float> dy = RandomValues(outputs, 4);
  ConvRun run;
  run.y.assign(outputs, 0.0f);
  run.weight_grad.assign(weight.size(), 0.0f);
  run.bias_grad.assign(bias.size(), 0.0f);
  run.dx.assign(x.size(), 0.0f);
  std::vector<float> columns(g.column_rows() * g.column_cols());
  conv.Bind(device, weight.data(), run.weight_grad.data(),
            c.shape.bias ? bias.data() : nullptr,
            c.shape.bias ? run.bias_grad.data() : nullptr);
  GS_CHECK(conv.Prepare(g).ok());
  EXPECT_EQ(conv.uses_columns(), reference) << Describe(c);
  conv.BindColumns(columns.data(), columns.size());
  conv.Forward(x.data(), g, run.y.data());
  conv.BackwardWeights(x.data(), g, dy.data());
  conv.BackwardInput(g, dy.data(), run.dx.data());
  return run;
}

void ExpectClose(const std::string& what, const std::vector<float>& actual,
                 const std::vector<float>& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int wrong = 0;
  for (size_t i = 0; i < actual.size() && wrong < 5; ++i) {
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance)) {
      ADD_FAILURE() << what << "[" << i << "]: oneDNN " << actual[i]
                    << ", reference " << expected[i] << " (tolerance "
                    << tolerance << ")";
      ++wrong;
    }
  }
}

TEST(ConvolutionParityTest, OneDnnLayerMatchesTheReference) {
  const ConvCase cases[] = {
      // ResNet's shapes, small: 3×3 stride 1 and 2, the 1×1 shortcut, the
      // stem reading NCHW rows.
      {{8, 16, 3, 1, 1, false}, 2, 8, 8, false},
      {{8, 16, 3, 2, 1, false}, 2, 9, 9, false},
      {{8, 16, 1, 2, 0, false}, 2, 9, 9, false},
      {{3, 16, 3, 1, 1, false}, 2, 10, 10, true},
      // The CNN's: bias, one input channel, NCHW.
      {{1, 4, 3, 1, 1, true}, 3, 11, 7, true},
      // Odd: batch 1, odd sizes and channel counts, padding 2, kernel 5,
      // stride 3 that leaves pixels unread, non-square images.
      {{5, 7, 5, 1, 2, true}, 1, 13, 9, false},
      {{6, 3, 3, 3, 0, false}, 1, 11, 14, false},
      {{7, 5, 2, 2, 1, true}, 3, 7, 5, true},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(Describe(c));
    const ConvRun ours = RunConv(c, /*reference=*/false);
    const ConvRun reference = RunConv(c, /*reference=*/true);
    const Conv2dShape& s = c.shape;
    const int oh = ConvOutputSize(c.height, s.kernel, s.stride, s.padding);
    const int ow = ConvOutputSize(c.width, s.kernel, s.stride, s.padding);
    const double per_product = 4e-7;
    ExpectClose("y", ours.y, reference.y,
                per_product * s.in_channels * s.kernel * s.kernel);
    ExpectClose("weight gradient", ours.weight_grad, reference.weight_grad,
                per_product * c.images * oh * ow);
    ExpectClose("bias gradient", ours.bias_grad, reference.bias_grad,
                per_product * c.images * oh * ow);
    ExpectClose("input gradient", ours.dx, reference.dx,
                per_product * s.out_channels * s.kernel * s.kernel);
  }
}

// One training step (and an evaluation) of a model on both paths.
void ExpectModelsMatch(std::unique_ptr<Model> ours_model,
                       std::unique_ptr<Model> reference_model, int batch) {
  BoundModel ours(std::move(ours_model), batch, 5, false);
  BoundModel reference(std::move(reference_model), batch, 5, true);
  const double loss = ours.Loss(batch);
  const double reference_loss = reference.Loss(batch);
  EXPECT_NEAR(loss, reference_loss, 1e-4 * std::fabs(reference_loss));
  for (const ParamInfo& info : ours.layout->params()) {
    float largest = 0.0f;
    for (int64_t i = 0; i < info.numel; ++i) {
      largest = std::max(largest, std::fabs(reference.grads[info.offset + i]));
    }
    std::vector<float> a(ours.grads + info.offset,
                         ours.grads + info.offset + info.numel);
    std::vector<float> b(reference.grads + info.offset,
                         reference.grads + info.offset + info.numel);
    ExpectClose(info.spec.name, a, b, 1e-4 * largest + 1e-7);
  }
  const int64_t buffers = ours.model->buffer_count();
  std::vector<float> a(ours.model->buffers(), ours.model->buffers() + buffers);
  std::vector<float> b(reference.model->buffers(),
                       reference.model->buffers() + buffers);
  ExpectClose("running statistics", a, b, 1e-5);
  // Evaluation on fewer images than bound (where there are): kernels of
  // their own batch size.
  const int images = std::max(1, batch - 1);
  const float* ours_logits = nullptr;
  const float* reference_logits = nullptr;
  ASSERT_TRUE(
      ours.model->Forward(ours.inputs.data(), images, &ours_logits).ok());
  ASSERT_TRUE(reference.model
                  ->Forward(reference.inputs.data(), images, &reference_logits)
                  .ok());
  const int classes = ours.model->num_classes();
  std::vector<float> la(ours_logits, ours_logits + images * classes);
  std::vector<float> lb(reference_logits, reference_logits + images * classes);
  ExpectClose("evaluation logits", la, lb, 1e-4);
}

TEST(ConvolutionParityTest, ResNetStepMatchesTheReference) {
  ResNetOptions options;
  options.input = {3, 12, 12, 10};
  options.blocks = {2, 1, 1, 1};
  options.widths = {8, 16, 16, 32};
  ExpectModelsMatch(*CreateResNet(options), *CreateResNet(options), 4);
}

TEST(ConvolutionParityTest, ResNetStepWithBatchOneMatchesTheReference) {
  ResNetOptions options;
  options.input = {3, 9, 9, 10};
  options.blocks = {1, 1};
  options.widths = {4, 8};
  ExpectModelsMatch(*CreateResNet(options), *CreateResNet(options), 1);
}

TEST(ConvolutionParityTest, CnnStepMatchesTheReference) {
  CnnOptions options;
  options.input = {1, 14, 14, 10};
  options.conv1_channels = 6;
  options.conv2_channels = 10;
  options.hidden = 16;
  ExpectModelsMatch(*CreateCnn(options), *CreateCnn(options), 5);
}

}  // namespace
}  // namespace gradsync
