// Tests of the kernels' shared arithmetic (kernel_math.h) against values
// worked out by hand: what the CPU backend computes and, by construction, what
// the CUDA kernels compute.
#include "core/device/kernel_math.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace kernel_math {
namespace {

TEST(KernelMathTest, BiasAndRelu) {
  EXPECT_EQ(AddBias(1.5f, -0.25f), 1.25f);
  EXPECT_EQ(Relu(3.0f), 3.0f);
  EXPECT_EQ(Relu(-2.0f), 0.0f);
  EXPECT_EQ(Relu(NAN), 0.0f);  // the comparison is false for NaN
  EXPECT_EQ(ReluGradient(1e-30f, 5.0f), 5.0f);
  EXPECT_EQ(ReluGradient(0.0f, 5.0f), 0.0f);  // y == 0: the unit was off
  EXPECT_EQ(ReluGradient(NAN, 5.0f), 0.0f);
  EXPECT_EQ(Scaled(3.0f, -0.5f), -1.5f);
}

// softmax(1, 2, 3) = (e^-2, e^-1, 1) / (e^-2 + e^-1 + 1)
//                  = (0.0900306, 0.2447285, 0.6652410);
// -log softmax[2] = log(1 + e^-1 + e^-2) = 0.4076059644.
TEST(KernelMathTest, SoftmaxCrossEntropyOfAKnownRow) {
  const std::vector<float> row = {1.0f, 2.0f, 3.0f};
  std::vector<float> gradient(3);
  const double loss = SoftmaxCrossEntropyRow(row.data(), /*label=*/2, 3,
                                             InverseRows(1), gradient.data());
  EXPECT_NEAR(loss, 0.4076059644, 1e-6);
  EXPECT_NEAR(gradient[0], 0.0900306, 1e-6);
  EXPECT_NEAR(gradient[1], 0.2447285, 1e-6);
  EXPECT_NEAR(gradient[2], 0.6652410 - 1.0, 1e-6);
}

// Four equal logits, a batch of two rows: softmax 1/4 each, divided by the
// two rows, and 1/2 less at the label; loss log 4. Every step is exact.
TEST(KernelMathTest, SoftmaxCrossEntropyDividesByTheBatch) {
  const std::vector<float> row(4, 0.7f);
  std::vector<float> gradient(4);
  const double loss = SoftmaxCrossEntropyRow(row.data(), /*label=*/1, 4,
                                             InverseRows(2), gradient.data());
  EXPECT_DOUBLE_EQ(loss, std::log(4.0));
  EXPECT_EQ(gradient, (std::vector<float>{0.125f, -0.375f, 0.125f, 0.125f}));
  EXPECT_EQ(MeanLoss(3.0, 4), 0.75f);
}

// exp(1002) overflows float; subtracting the row's maximum first makes the
// row the same as (1, 2, 3), bit for bit (1000 - 1002 = -2 exactly).
TEST(KernelMathTest, LargeLogitsAreStable) {
  const std::vector<float> small = {1.0f, 2.0f, 3.0f};
  const std::vector<float> large = {1000.0f, 1001.0f, 1002.0f};
  const std::vector<float> negative = {-1002.0f, -1001.0f, -1000.0f};
  std::vector<float> g_small(3), g_large(3), g_negative(3);
  const double l_small =
      SoftmaxCrossEntropyRow(small.data(), 0, 3, 1.0f, g_small.data());
  const double l_large =
      SoftmaxCrossEntropyRow(large.data(), 0, 3, 1.0f, g_large.data());
  const double l_negative =
      SoftmaxCrossEntropyRow(negative.data(), 0, 3, 1.0f, g_negative.data());
  EXPECT_EQ(l_large, l_small);
  EXPECT_EQ(g_large, g_small);
  EXPECT_EQ(l_negative, l_small);
  EXPECT_EQ(g_negative, g_small);

  // A gap of 10^4: exp(-10^4) is 0 in float, the loss of the small logit's
  // label is the gap itself, and nothing is NaN or infinite.
  const std::vector<float> gap = {0.0f, 1e4f};
  std::vector<float> g_gap(2);
  EXPECT_EQ(SoftmaxCrossEntropyRow(gap.data(), 0, 2, 1.0f, g_gap.data()), 1e4);
  EXPECT_EQ(g_gap, (std::vector<float>{-1.0f, 1.0f}));

  // Logits near float's limit: x - max overflows to -inf, whose exp is 0.
  const std::vector<float> extreme = {3e38f, -3e38f};
  std::vector<float> g_extreme(2);
  EXPECT_EQ(
      SoftmaxCrossEntropyRow(extreme.data(), 0, 2, 1.0f, g_extreme.data()),
      0.0);
  EXPECT_EQ(g_extreme, (std::vector<float>{0.0f, 0.0f}));
}

TEST(KernelMathTest, LabelOutsideTheClassesGivesNaNAndNoTargetTerm) {
  const std::vector<float> row(4, 0.0f);
  for (int32_t label : {-1, 4, 1000}) {
    std::vector<float> gradient(4);
    EXPECT_TRUE(std::isnan(
        SoftmaxCrossEntropyRow(row.data(), label, 4, 1.0f, gradient.data())))
        << label;
    EXPECT_EQ(gradient, std::vector<float>(4, 0.25f)) << label;
  }
}

// Left to right in double: 2^53 + 1 rounds back to 2^53 (ties to even), twice;
// right to left would give 2^53 + 2.
TEST(KernelMathTest, SumInOrderAddsLeftToRight) {
  const float two_53 = 9007199254740992.0f;  // 2^53, exact in float
  const std::vector<float> values = {two_53, 1.0f, 1.0f};
  EXPECT_EQ(SumInOrder(values.data(), 3), 9007199254740992.0);
  EXPECT_EQ(SumInOrder(values.data(), 0), 0.0);
}

TEST(KernelMathTest, MaxOfIsStdMaxsChoice) {
  EXPECT_EQ(MaxOf(1.0f, 2.0f), 2.0f);
  EXPECT_EQ(MaxOf(2.0f, 1.0f), 2.0f);
  EXPECT_EQ(MaxOf(-INFINITY, -5.0f), -5.0f);
  EXPECT_EQ(MaxOf(3.0f, NAN), 3.0f);
}

// p = 1, g = 0.5, lr = 0.1, momentum = 0.9, weight decay = 0.01:
//   step 1: g' = 0.51,    v = 0.51,               p = 1 - 0.051 = 0.949
//   step 2: g' = 0.50949, v = 0.459 + 0.50949 = 0.96849,
//           p = 0.949 - 0.096849 = 0.852151
TEST(KernelMathTest, SgdWithMomentumAndWeightDecayTwoSteps) {
  EXPECT_NEAR(SgdStep(1.0f, 0.5f, 0.1f, 0.0f), 0.95f, 1e-7);
  EXPECT_NEAR(SgdStep(1.0f, 0.5f, 0.1f, 0.01f), 0.949f, 1e-7);

  float p = 1.0f, v = 0.0f;
  SgdMomentumStep(p, v, 0.5f, 0.1f, 0.9f, 0.01f);
  EXPECT_NEAR(v, 0.51f, 1e-7);
  EXPECT_NEAR(p, 0.949f, 1e-7);
  SgdMomentumStep(p, v, 0.5f, 0.1f, 0.9f, 0.01f);
  EXPECT_NEAR(v, 0.96849f, 1e-6);
  EXPECT_NEAR(p, 0.852151f, 1e-6);
}

// p = 1, a constant gradient 0.5, lr = 0.1, betas (0.9, 0.999):
//   step 1: m = 0.05, v = 0.00025; m / (1 - 0.9) = 0.5 and
//           sqrt(v / (1 - 0.999)) = 0.5, so p = 1 - 0.1 · 0.5 / 0.5 = 0.9.
//   step 2: m = 0.095, v = 0.00049975; m / 0.19 = 0.5 and
//           v / 0.001999 = 0.25, so again p moves by lr: p = 0.8.
// The betas are floats (0.999f is 0.99899995), so m, v and the factors are
// off those decimals by up to 5e-5 relative; p lands on them closer.
TEST(KernelMathTest, AdamAfterOneAndTwoSteps) {
  const AdamCoefficients step1 =
      MakeAdamCoefficients(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  EXPECT_NEAR(step1.step_size, 1.0, 1e-6);
  EXPECT_NEAR(step1.inv_sqrt_bias_correction2, 31.6227766, 2e-3);
  EXPECT_NEAR(step1.one_minus_beta2, 0.001, 1e-7);

  float p = 1.0f, m = 0.0f, v = 0.0f;
  AdamStep(p, m, v, 0.5f, step1);
  EXPECT_NEAR(m, 0.05, 5e-8);
  EXPECT_NEAR(v, 0.00025, 2.5e-8);
  EXPECT_NEAR(p, 0.9, 1e-6);

  const AdamCoefficients step2 =
      MakeAdamCoefficients(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 2);
  EXPECT_NEAR(step2.step_size, 0.1 / 0.19, 1e-6);
  AdamStep(p, m, v, 0.5f, step2);
  EXPECT_NEAR(m, 0.095, 1e-7);
  EXPECT_NEAR(v, 0.00049975, 5e-8);
  EXPECT_NEAR(p, 0.8, 1e-6);
}

// Weight decay joins the gradient: g' = 0.5 + 0.1 · 1 = 0.6, and the first
// step still moves p by lr against the sign of g'. A negative gradient moves
// p up.
TEST(KernelMathTest, AdamWeightDecayAndSign) {
  const AdamCoefficients k =
      MakeAdamCoefficients(0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  float p = 1.0f, m = 0.0f, v = 0.0f;
  AdamStep(p, m, v, 0.5f, k);
  EXPECT_NEAR(m, 0.06, 1e-7);
  EXPECT_NEAR(p, 0.9f, 1e-6);

  const AdamCoefficients plain =
      MakeAdamCoefficients(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  p = 1.0f, m = 0.0f, v = 0.0f;
  AdamStep(p, m, v, -2.0f, plain);
  EXPECT_NEAR(p, 1.1f, 1e-6);
}

// The optimizer counts steps from 1; step 0 must not divide by zero.
TEST(KernelMathTest, AdamStepZeroIsStepOne) {
  const AdamCoefficients zero =
      MakeAdamCoefficients(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0);
  const AdamCoefficients one =
      MakeAdamCoefficients(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  EXPECT_EQ(zero.step_size, one.step_size);
  EXPECT_EQ(zero.inv_sqrt_bias_correction2, one.inv_sqrt_bias_correction2);
  EXPECT_TRUE(std::isfinite(zero.step_size));
}

// a·b + c rounded twice, as the CUDA kernels round it (--fmad=false). With
// p = wd = 1 + 2^-12, p·wd = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11, so
// g + wd·p = 0 and p stays; a fused multiply-add would keep the 2^-24 and,
// times lr = 1024, move p by 2^-14.
TEST(KernelMathTest, MultiplyAddIsRoundedTwiceNotFused) {
  const float p = 1.0f + std::ldexp(1.0f, -12);
  const float g = -(1.0f + std::ldexp(1.0f, -11));
  EXPECT_EQ(SgdStep(p, g, 1024.0f, p), p);
  EXPECT_NE(std::fma(p, p, g), 0.0f);  // what fusing would have computed
}

// --- Convolution arithmetic: the GPU's per-entry functions against the
// CPU's loops (the CPU device runs Im2ColRow and a row-by-row col2im scatter;
// the CUDA kernels run Im2ColValue and the Col2ImValue gather).

std::vector<ConvGeometry> TestGeometries() {
  std::vector<ConvGeometry> geometries;
  for (int kernel : {1, 3}) {
    for (int stride : {1, 2}) {
      for (int padding : {0, 1}) {
        for (bool nchw : {false, true}) {
          ConvGeometry g;
          g.batch = 2;
          g.channels = 3;
          g.height = 7;
          g.width = 6;
          g.kernel = kernel;
          g.stride = stride;
          g.padding = padding;
          g.out_height = ConvOutputSize(g.height, kernel, stride, padding);
          g.out_width = ConvOutputSize(g.width, kernel, stride, padding);
          g.input = nchw ? NchwLayout(g.channels, g.height, g.width)
                         : NhwcLayout(g.channels, g.height, g.width);
          geometries.push_back(g);
        }
      }
    }
  }
  return geometries;
}

TEST(KernelMathTest, Im2ColValueIsIm2ColRowEntryByEntry) {
  for (const ConvGeometry& g : TestGeometries()) {
    std::vector<float> input(g.input_count());
    for (size_t i = 0; i < input.size(); ++i) input[i] = 1.0f + i;
    std::vector<float> row(g.column_cols());
    for (int64_t r = 0; r < g.column_rows(); ++r) {
      Im2ColRow(input.data(), g, r, row.data());
      for (int64_t c = 0; c < g.column_cols(); ++c) {
        ASSERT_EQ(Im2ColValue(input.data(), g, r, c), row[c])
            << "row " << r << " col " << c << " kernel " << g.kernel
            << " stride " << g.stride << " padding " << g.padding;
      }
    }
  }
}

// The gather adds each input element's taps in the scatter's order (output
// pixels increasing), so the two agree bit for bit even where float addition
// would round differently in another order.
TEST(KernelMathTest, Col2ImGatherEqualsTheScatterBitForBit) {
  for (const ConvGeometry& g : TestGeometries()) {
    const int64_t cols = g.column_cols();
    std::vector<float> columns(g.column_rows() * cols);
    for (size_t i = 0; i < columns.size(); ++i) {
      // Magnitudes far apart, so that the order of addition shows.
      columns[i] = (i % 3 == 0 ? 1e7f : 1.0f) * (0.1f + (i % 7));
    }
    std::vector<float> scattered(g.input_count(), 0.0f);
    for (int64_t r = 0; r < g.column_rows(); ++r) {
      const int64_t ow = r % g.out_width;
      const int64_t oh = r / g.out_width % g.out_height;
      const int64_t b = r / (g.out_width * g.out_height);
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t kw = col % g.kernel;
        const int64_t kh = col / g.kernel % g.kernel;
        const int64_t c = col / (g.kernel * g.kernel);
        const int64_t ih = oh * g.stride - g.padding + kh;
        const int64_t iw = ow * g.stride - g.padding + kw;
        if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) continue;
        scattered[b * g.input.batch + c * g.input.channel + ih * g.input.row +
                  iw * g.input.column] += columns[r * cols + col];
      }
    }
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t c = 0; c < g.channels; ++c) {
        for (int64_t h = 0; h < g.height; ++h) {
          for (int64_t w = 0; w < g.width; ++w) {
            ASSERT_EQ(Col2ImValue(columns.data(), g, b, c, h, w),
                      scattered[b * g.input.batch + c * g.input.channel +
                                h * g.input.row + w * g.input.column])
                << b << "," << c << "," << h << "," << w;
          }
        }
      }
    }
  }
}

TEST(KernelMathTest, MaxPoolKeepsTheFirstMaximumAndNaN) {
  PoolGeometry g;
  g.batch = 1;
  g.channels = 1;
  g.height = 2;
  g.width = 2;
  g.kernel = 2;
  g.stride = 2;
  g.out_height = 1;
  g.out_width = 1;
  int32_t where = -1;
  const float ties[4] = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(MaxPoolValue(ties, g, 0, 0, 0, 0, &where), 3.0f);
  EXPECT_EQ(where, 1);
  const float with_nan[4] = {1.0f, NAN, 5.0f, 2.0f};
  EXPECT_TRUE(std::isnan(MaxPoolValue(with_nan, g, 0, 0, 0, 0, &where)));
  EXPECT_EQ(where, 1);
  // The gradient goes to the recorded position only.
  const float dy = 4.0f;
  EXPECT_EQ(MaxPoolInputGradient(&dy, &where, g, 0, 0, 1, 0), 4.0f);
  EXPECT_EQ(MaxPoolInputGradient(&dy, &where, g, 0, 1, 0, 0), 0.0f);
}

TEST(KernelMathTest, BatchNormPieces) {
  // Values 1, 2, 3: mean 2, biased variance 2/3.
  EXPECT_FLOAT_EQ(BatchMean(6.0, 3), 2.0f);
  EXPECT_FLOAT_EQ(BatchVariance(6.0, 14.0, 3), 2.0f / 3.0f);
  EXPECT_EQ(BatchVariance(3.0, 2.9999999, 3), 0.0f);  // never negative
  EXPECT_FLOAT_EQ(UnbiasedVariance(2.0f / 3.0f, 3), 1.0f);
  EXPECT_FLOAT_EQ(RunningAverage(1.0f, 3.0f, 0.1f), 1.2f);
  EXPECT_FLOAT_EQ(BatchNormOutput(3.0f, 2.0f, 0.5f, 2.0f, 1.0f), 2.0f);
}

}  // namespace
}  // namespace kernel_math
}  // namespace gradsync
