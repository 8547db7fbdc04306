#include "core/model/batch_norm.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/device/cpu_device.h"
#include "core/model/gradient_check.h"
#include "core/model/param_init.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

std::vector<float> Random(int64_t count, uint64_t seed, float bound = 1.0f) {
  std::vector<float> values(count);
  std::mt19937_64 generator = ParamGenerator(seed, 0);
  FillUniform(generator, bound, values.data(), count);
  return values;
}

struct NormFixture {
  NormFixture(int64_t rows, int channels)
      : device(1), norm("bn", channels), rows(rows) {
    gamma = Random(channels, 1);
    for (float& g : gamma) g += 1.5f;
    beta = Random(channels, 2);
    gamma_grad.assign(channels, 0.0f);
    beta_grad.assign(channels, 0.0f);
    buffers.assign(norm.buffer_count(), -7.0f);
    saved.assign(2 * channels, 0.0f);
    x = Random(rows * channels, 3, 2.0f);
    for (int64_t i = 0; i < rows * channels; ++i) x[i] += (i % channels) * 0.5f;
    y.assign(x.size(), 0.0f);
    norm.Bind(device, gamma.data(), beta.data(), gamma_grad.data(),
              beta_grad.data(), buffers.data(), saved.data());
  }
  CpuDevice device;
  BatchNorm norm;
  int64_t rows;
  std::vector<float> gamma, beta, gamma_grad, beta_grad, buffers, saved, x, y;
};

TEST(BatchNormTest, TrainingNormalizesPerChannelAndMovesRunningStatistics) {
  const int channels = 3;
  NormFixture f(10, channels);
  // Bind starts the running statistics at PyTorch's 0 and 1.
  for (int c = 0; c < channels; ++c) {
    EXPECT_EQ(f.buffers[c], 0.0f);
    EXPECT_EQ(f.buffers[channels + c], 1.0f);
  }
  f.norm.ForwardTraining(f.x.data(), f.rows, f.y.data());
  for (int c = 0; c < channels; ++c) {
    double mean = 0, squares = 0, y_mean = 0, y_squares = 0;
    for (int64_t r = 0; r < f.rows; ++r) {
      const double v = f.x[r * channels + c];
      mean += v;
      squares += v * v;
      const double normalized =
          (f.y[r * channels + c] - f.beta[c]) / f.gamma[c];
      y_mean += normalized;
      y_squares += normalized * normalized;
    }
    mean /= f.rows;
    const double variance = squares / f.rows - mean * mean;
    EXPECT_NEAR(y_mean / f.rows, 0.0, 1e-5);
    // Biased variance with eps = 1e-5 in the denominator.
    EXPECT_NEAR(y_squares / f.rows, variance / (variance + 1e-5), 1e-4);
    EXPECT_NEAR(f.buffers[c], 0.1 * mean, 1e-6);
    EXPECT_NEAR(f.buffers[channels + c],
                0.9 + 0.1 * variance * f.rows / (f.rows - 1), 1e-5);
  }
}

TEST(BatchNormTest, InferenceUsesTheRunningStatistics) {
  const int channels = 2;
  NormFixture f(4, channels);
  f.buffers = {0.5f, -1.0f, 4.0f, 0.25f};  // means, variances
  f.norm.ForwardInference(f.x.data(), f.rows, f.y.data());
  for (int64_t r = 0; r < f.rows; ++r) {
    for (int c = 0; c < channels; ++c) {
      const float expected = (f.x[r * channels + c] - f.buffers[c]) /
                                 std::sqrt(f.buffers[channels + c] + 1e-5f) *
                                 f.gamma[c] +
                             f.beta[c];
      EXPECT_NEAR(f.y[r * channels + c], expected, 1e-5);
    }
  }
}

TEST(BatchNormTest, GradientsMatchCentralDifferences) {
  NormFixture f(6, 3);
  const std::vector<float> weights = Random(f.y.size(), 11);
  auto loss = [&] {
    f.norm.ForwardTraining(f.x.data(), f.rows, f.y.data());
    return WeightedSum(f.y.data(), weights);
  };
  loss();
  std::vector<float> dx(f.x.size(), 0.0f);
  f.norm.Backward(f.x.data(), weights.data(), f.rows, dx.data());
  GradientCheckOptions options;
  options.step = 5e-3f;
  ExpectGradientMatches("gamma", f.gamma.data(), f.gamma.size(),
                        f.gamma_grad.data(), loss, options);
  ExpectGradientMatches("beta", f.beta.data(), f.beta.size(),
                        f.beta_grad.data(), loss, options);
  ExpectGradientMatches("input", f.x.data(), f.x.size(), dx.data(), loss,
                        options);
}

}  // namespace
}  // namespace gradsync
