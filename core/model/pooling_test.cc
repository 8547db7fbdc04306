#include "core/model/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/device/cpu_device.h"
#include "core/device/kernel_math.h"
#include "core/model/gradient_check.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

// Distinct values 0.1 apart, shuffled: a finite-difference step of 0.01
// never changes which element is a window's maximum.
std::vector<float> DistinctValues(int64_t count, uint64_t seed) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = 0.1f * (i - count / 2);
  std::mt19937_64 generator(seed);
  std::shuffle(values.begin(), values.end(), generator);
  return values;
}

// Overlapping windows (3/2) and the usual 2/2, on an odd-sized image.
class MaxPoolTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(MaxPoolTest, ForwardTakesEachWindowsMaximum) {
  CpuDevice device(1);
  const MaxPool2d pool(GetParam().first, GetParam().second);
  const PoolGeometry g = pool.Geometry(2, 3, 7, 5);
  const std::vector<float> x = DistinctValues(g.input_count(), 1);
  std::vector<float> y(g.output_count());
  std::vector<int32_t> where(g.output_count());
  pool.Forward(device, x.data(), g, y.data(), where.data());
  int64_t out = 0;
  for (int b = 0; b < g.batch; ++b) {
    for (int oh = 0; oh < g.out_height; ++oh) {
      for (int ow = 0; ow < g.out_width; ++ow) {
        for (int c = 0; c < g.channels; ++c, ++out) {
          float best = -1e30f;
          for (int kh = 0; kh < g.kernel; ++kh) {
            for (int kw = 0; kw < g.kernel; ++kw) {
              const int h = oh * g.stride + kh, w = ow * g.stride + kw;
              best = std::max(
                  best,
                  x[((int64_t{b} * g.height + h) * g.width + w) * g.channels +
                    c]);
            }
          }
          EXPECT_EQ(y[out], best) << out;
        }
      }
    }
  }
}

TEST_P(MaxPoolTest, GradientsMatchCentralDifferences) {
  CpuDevice device(1);
  const MaxPool2d pool(GetParam().first, GetParam().second);
  const PoolGeometry g = pool.Geometry(2, 2, 7, 5);
  std::vector<float> x = DistinctValues(g.input_count(), 2);
  std::vector<float> y(g.output_count());
  std::vector<int32_t> where(g.output_count());
  const std::vector<float> weights = RandomValues(y.size(), 3);
  auto loss = [&] {
    pool.Forward(device, x.data(), g, y.data(), where.data());
    return WeightedSum(y.data(), weights);
  };
  loss();
  std::vector<float> dx(x.size(), -1.0f);
  pool.Backward(device, weights.data(), where.data(), g, dx.data());
  ExpectGradientMatches("input", x.data(), x.size(), dx.data(), loss);
}

// The CPU device's channel-contiguous loops against kernel_math.h's
// per-element functions (which the CUDA kernels run), bit for bit: values
// with ties and a NaN, so the tie rule (first maximum) and the NaN rule are
// exercised, and overlapping windows whose gradients add.
TEST_P(MaxPoolTest, CpuLoopsMatchKernelMathBitForBit) {
  CpuDevice device(1);
  const MaxPool2d pool(GetParam().first, GetParam().second);
  const PoolGeometry g = pool.Geometry(2, 5, 9, 7);
  std::vector<float> x = RandomValues(g.input_count(), 11);
  for (int64_t i = 0; i < g.input_count(); i += 3) x[i] = 0.5f;  // ties
  x[17] = std::nanf("");
  const std::vector<float> dy = RandomValues(g.output_count(), 12);
  std::vector<float> y(g.output_count()), dx(g.input_count());
  std::vector<int32_t> where(g.output_count());
  pool.Forward(device, x.data(), g, y.data(), where.data());
  pool.Backward(device, dy.data(), where.data(), g, dx.data());
  int64_t out = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        for (int64_t c = 0; c < g.channels; ++c, ++out) {
          int32_t at = -2;
          const float value =
              kernel_math::MaxPoolValue(x.data(), g, b, oh, ow, c, &at);
          ASSERT_EQ(at, where[out]) << out;
          if (std::isnan(value)) {
            ASSERT_TRUE(std::isnan(y[out])) << out;
          } else {
            ASSERT_EQ(value, y[out]) << out;
          }
        }
      }
    }
  }
  int64_t in = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.height; ++h) {
      for (int64_t w = 0; w < g.width; ++w) {
        for (int64_t c = 0; c < g.channels; ++c, ++in) {
          ASSERT_EQ(kernel_math::MaxPoolInputGradient(dy.data(), where.data(),
                                                      g, b, h, w, c),
                    dx[in])
              << in;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, MaxPoolTest,
                         ::testing::Values(std::make_pair(2, 2),
                                           std::make_pair(3, 2)));

TEST(GlobalAvgPoolTest, MeanOverPixelsAndItsGradient) {
  CpuDevice device(1);
  const int images = 2, pixels = 6, channels = 3;
  std::vector<float> x = RandomValues(int64_t{images} * pixels * channels, 4);
  std::vector<float> y(images * channels);
  GlobalAvgPoolForward(device, x.data(), images, pixels, channels, y.data());
  for (int b = 0; b < images; ++b) {
    for (int c = 0; c < channels; ++c) {
      double sum = 0;
      for (int s = 0; s < pixels; ++s)
        sum += x[(b * pixels + s) * channels + c];
      EXPECT_NEAR(y[b * channels + c], sum / pixels, 1e-6);
    }
  }
  const std::vector<float> weights = RandomValues(y.size(), 5);
  auto loss = [&] {
    GlobalAvgPoolForward(device, x.data(), images, pixels, channels, y.data());
    return WeightedSum(y.data(), weights);
  };
  std::vector<float> dx(x.size());
  GlobalAvgPoolBackward(device, weights.data(), images, pixels, channels,
                        dx.data());
  ExpectGradientMatches("input", x.data(), x.size(), dx.data(), loss);
}

TEST(ResidualAddTest, AddsElementwise) {
  CpuDevice device(1);
  std::vector<float> y = RandomValues(37, 6);
  const std::vector<float> x = RandomValues(37, 7);
  const std::vector<float> before = y;
  device.Add(y.data(), x.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], before[i] + x[i]);
}

}  // namespace
}  // namespace gradsync
