#include "core/model/conv2d.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/logging.h"
#include "core/device/cpu_device.h"
#include "core/device/layer_geometry.h"
#include "core/model/gradient_check.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

// A convolution layer on the CPU with its parameters, gradients and scratch
// in device (= host) memory.
struct ConvFixture {
  ConvFixture(Conv2dShape shape, int images, int height, int width,
              bool nchw_input, int64_t columns_capacity = 0)
      : device(1, /*reference_convolutions=*/true), conv("conv", shape) {
    const ImageLayout layout =
        nchw_input ? NchwLayout(shape.in_channels, height, width)
                   : NhwcLayout(shape.in_channels, height, width);
    g = conv.Geometry(images, height, width, layout);
    weight = RandomValues(conv.weight_count(), 1);
    bias = RandomValues(shape.out_channels, 2);
    weight_grad.assign(weight.size(), 0.0f);
    bias_grad.assign(bias.size(), 0.0f);
    x = RandomValues(g.input_count(), 3);
    y.assign(g.column_rows() * shape.out_channels, 0.0f);
    if (columns_capacity == 0) {
      columns_capacity = g.column_rows() * g.column_cols();
    }
    columns.assign(columns_capacity, 0.0f);
    conv.Bind(device, weight.data(), weight_grad.data(),
              shape.bias ? bias.data() : nullptr,
              shape.bias ? bias_grad.data() : nullptr);
    GS_CHECK(conv.Prepare(g).ok());
    conv.BindColumns(columns.data(), columns_capacity);
  }

  CpuDevice device;
  Conv2d conv;
  ConvGeometry g;
  std::vector<float> weight, bias, weight_grad, bias_grad, x, y, columns;
};

// y[b, oh, ow, o] by the definition, in double.
double DirectConvolution(const ConvFixture& f, int b, int oh, int ow, int o) {
  const ConvGeometry& g = f.g;
  double sum = f.conv.shape().bias ? f.bias[o] : 0.0;
  for (int c = 0; c < g.channels; ++c) {
    for (int kh = 0; kh < g.kernel; ++kh) {
      for (int kw = 0; kw < g.kernel; ++kw) {
        const int ih = oh * g.stride - g.padding + kh;
        const int iw = ow * g.stride - g.padding + kw;
        if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) continue;
        const float input = f.x[b * g.input.batch + c * g.input.channel +
                                ih * g.input.row + iw * g.input.column];
        const float w =
            f.weight[((o * g.channels + c) * g.kernel + kh) * g.kernel + kw];
        sum += static_cast<double>(input) * w;
      }
    }
  }
  return sum;
}

void ExpectForwardIsConvolution(ConvFixture& f) {
  f.conv.Forward(f.x.data(), f.g, f.y.data());
  const int out = f.conv.shape().out_channels;
  for (int b = 0; b < f.g.batch; ++b) {
    for (int oh = 0; oh < f.g.out_height; ++oh) {
      for (int ow = 0; ow < f.g.out_width; ++ow) {
        for (int o = 0; o < out; ++o) {
          const int64_t at =
              ((int64_t{b} * f.g.out_height + oh) * f.g.out_width + ow) * out +
              o;
          ASSERT_NEAR(f.y[at], DirectConvolution(f, b, oh, ow, o), 1e-5)
              << "b " << b << " oh " << oh << " ow " << ow << " o " << o;
        }
      }
    }
  }
}

TEST(Conv2dTest, ForwardIsTheConvolutionForBothInputLayouts) {
  for (bool nchw : {false, true}) {
    ConvFixture f({3, 4, 3, 2, 1, true}, 2, 5, 6, nchw);
    EXPECT_EQ(f.g.out_height, 3);
    EXPECT_EQ(f.g.out_width, 3);
    ExpectForwardIsConvolution(f);
  }
  ConvFixture one_by_one({3, 5, 1, 2, 0, false}, 2, 5, 5, false);
  ExpectForwardIsConvolution(one_by_one);
}

TEST(Conv2dTest, GradientsMatchCentralDifferences) {
  for (bool nchw : {false, true}) {
    ConvFixture f({3, 4, 3, 2, 1, true}, 2, 5, 6, nchw);
    const std::vector<float> weights = RandomValues(f.y.size(), 7);
    auto loss = [&] {
      f.conv.Forward(f.x.data(), f.g, f.y.data());
      return WeightedSum(f.y.data(), weights);
    };
    loss();
    std::vector<float> dx(f.x.size(), 0.0f);
    f.conv.BackwardWeights(f.x.data(), f.g, weights.data());
    f.conv.BackwardInput(f.g, weights.data(), dx.data());
    ExpectGradientMatches("weight", f.weight.data(), f.weight.size(),
                          f.weight_grad.data(), loss);
    ExpectGradientMatches("bias", f.bias.data(), f.bias.size(),
                          f.bias_grad.data(), loss);
    ExpectGradientMatches(nchw ? "input (NCHW)" : "input (NHWC)", f.x.data(),
                          f.x.size(), dx.data(), loss);
  }
}

// A column scratch of one image's worth convolves the batch image by image:
// the same results as one GEMM over the whole batch.
// NCHW outputs come only from a device's convolution library, and only
// without a bias (added per row of an NHWC output): anything else is one
// clear error at Prepare, not a wrong result later.
TEST(Conv2dTest, NchwOutputsAreRefusedWhereTheyCannotBeWritten) {
  const ImageLayout nchw = NchwLayout(2, 6, 6);
  {
    CpuDevice reference(1, /*reference_convolutions=*/true);
    Conv2d conv("im2col", Conv2dShape{2, 3, 3, 1, 1, false});
    std::vector<float> weight(conv.weight_count()), grad(weight.size());
    conv.Bind(reference, weight.data(), grad.data(), nullptr, nullptr);
    const absl::Status status =
        conv.Prepare(conv.Geometry(2, 6, 6, nchw, ActivationLayout::kNchw));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("im2col: NCHW activations need"),
              std::string::npos)
        << status;
  }
  {
    CpuDevice library(1);
    Conv2d conv("biased", Conv2dShape{2, 3, 3, 1, 1, true});
    std::vector<float> weight(conv.weight_count()), grad(weight.size());
    std::vector<float> bias(3), bias_grad(3);
    conv.Bind(library, weight.data(), grad.data(), bias.data(),
              bias_grad.data());
    const absl::Status status =
        conv.Prepare(conv.Geometry(2, 6, 6, nchw, ActivationLayout::kNchw));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("biased: a convolution with a bias"),
              std::string::npos)
        << status;
    // The same layer on NHWC activations is made.
    EXPECT_TRUE(conv.Prepare(conv.Geometry(2, 6, 6, NhwcLayout(2, 6, 6))).ok());
  }
}

TEST(Conv2dTest, PiecesOfTheBatchGiveTheWholeBatchResult) {
  const Conv2dShape shape{2, 3, 3, 1, 1, true};
  ConvFixture whole(shape, 3, 4, 4, false);
  ConvFixture pieces(shape, 3, 4, 4, false, whole.conv.ColumnsPerImage(4, 4));
  const std::vector<float> dy = RandomValues(whole.y.size(), 9);
  std::vector<float> dx_whole(whole.x.size()), dx_pieces(pieces.x.size());
  for (ConvFixture* f : {&whole, &pieces}) {
    f->conv.Forward(f->x.data(), f->g, f->y.data());
    f->conv.BackwardWeights(f->x.data(), f->g, dy.data());
    f->conv.BackwardInput(f->g, dy.data(),
                          f == &whole ? dx_whole.data() : dx_pieces.data());
  }
  for (size_t i = 0; i < whole.y.size(); ++i) {
    EXPECT_NEAR(whole.y[i], pieces.y[i], 1e-5) << i;
  }
  for (size_t i = 0; i < whole.weight_grad.size(); ++i) {
    EXPECT_NEAR(whole.weight_grad[i], pieces.weight_grad[i], 1e-4) << i;
  }
  for (size_t i = 0; i < dx_whole.size(); ++i) {
    EXPECT_NEAR(dx_whole[i], dx_pieces[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace gradsync
