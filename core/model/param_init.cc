#include "core/model/param_init.h"

#include <cmath>

namespace gradsync {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The top 53 bits as a double in [0, 1).
double Unit(std::mt19937_64& generator) {
  return static_cast<double>(generator() >> 11) * 0x1.0p-53;
}

}  // namespace

std::mt19937_64 ParamGenerator(uint64_t seed, int index) {
  return std::mt19937_64(SplitMix64(SplitMix64(seed) + index));
}

void FillUniform(std::mt19937_64& generator, float bound, float* out,
                 int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>((2.0 * Unit(generator) - 1.0) * bound);
  }
}

void FillNormal(std::mt19937_64& generator, float stddev, float* out,
                int64_t count) {
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < count; i += 2) {
    // 1 - Unit is in (0, 1]: the logarithm stays finite.
    const double radius = std::sqrt(-2.0 * std::log(1.0 - Unit(generator)));
    const double angle = kTwoPi * Unit(generator);
    out[i] = static_cast<float>(radius * std::cos(angle) * stddev);
    if (i + 1 < count) {
      out[i + 1] = static_cast<float>(radius * std::sin(angle) * stddev);
    }
  }
}

void FillConstant(float value, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = value;
}

}  // namespace gradsync
