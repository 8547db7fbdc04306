// Numeric gradient checks for the layer and model tests: an analytic
// gradient against central differences (L(x + h) - L(x - h)) / 2h of a loss
// recomputed by a caller-supplied forward pass. Works on CpuDevice, where
// device memory is host memory, so the check can nudge an input in place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradsync {

struct GradientCheckOptions {
  float step = 1e-2f;            // h
  double absolute_error = 2e-3;  // |analytic - numeric| <= absolute +
  double relative_error = 2e-2;  //   relative · |numeric|
  int64_t samples = 0;           // entries checked, evenly spread; 0 = all
};

// Checks d loss / d x[i] == analytic[i]. `loss` reruns the forward pass on the
// current contents of x and returns the loss; x is restored afterwards.
// Failures are reported through GoogleTest with `what` and the index.
void ExpectGradientMatches(const std::string& what, float* x, int64_t count,
                           const float* analytic,
                           const std::function<double()>& loss,
                           const GradientCheckOptions& options = {});

// `count` values uniform in [-1, 1], reproducible from `seed`: the inputs and
// upstream gradients of the layer checks.
std::vector<float> RandomValues(int64_t count, uint64_t seed);

// Σ weights[i] · y[i] in double: a loss whose gradient with respect to y is
// `weights`, so a layer's backward can be fed dy = weights.
double WeightedSum(const float* y, const std::vector<float>& weights);

}  // namespace gradsync
