#include "core/model/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/model/param_init.h"
#include "gtest/gtest.h"

namespace gradsync {

void ExpectGradientMatches(const std::string& what, float* x, int64_t count,
                           const float* analytic,
                           const std::function<double()>& loss,
                           const GradientCheckOptions& options) {
  const int64_t samples =
      options.samples > 0 ? std::min(options.samples, count) : count;
  int failures = 0;
  for (int64_t k = 0; k < samples; ++k) {
    // Evenly spread, first and last included.
    const int64_t i = samples > 1 ? k * (count - 1) / (samples - 1) : 0;
    const float saved = x[i];
    x[i] = saved + options.step;
    const double up = loss();
    x[i] = saved - options.step;
    const double down = loss();
    x[i] = saved;
    // The step actually taken, after rounding to float.
    const double step = (static_cast<double>(saved + options.step) -
                         static_cast<double>(saved - options.step));
    const double numeric = (up - down) / step;
    const double error = std::fabs(analytic[i] - numeric);
    if (error >
        options.absolute_error + options.relative_error * std::fabs(numeric)) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i]
                    << ", numeric " << numeric;
      if (++failures >= 5) return;  // enough to see the pattern
    }
  }
}

double WeightedSum(const float* y, const std::vector<float>& weights) {
  double sum = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    sum += static_cast<double>(weights[i]) * y[i];
  }
  return sum;
}

std::vector<float> RandomValues(int64_t count, uint64_t seed) {
  std::vector<float> values(count);
  std::mt19937_64 generator = ParamGenerator(seed, 0);
  FillUniform(generator, 1.0f, values.data(), count);
  return values;
}

}  // namespace gradsync
