// Initial parameter values, the same on every rank and every platform for a
// given seed: one generator per parameter tensor, seeded from (seed, tensor
// index), so a tensor's values do not depend on the sizes of the others, and
// conversions to floating point of our own (std::mt19937_64's output is fixed
// by the standard; the standard distributions' outputs are not).
#pragma once

#include <cstdint>
#include <random>

namespace gradsync {

// The generator of parameter `index` for `seed`.
std::mt19937_64 ParamGenerator(uint64_t seed, int index);

// Uniform in [-bound, bound).
void FillUniform(std::mt19937_64& generator, float bound, float* out,
                 int64_t count);

// Normal with mean 0 and standard deviation `stddev` (Box-Muller in double).
void FillNormal(std::mt19937_64& generator, float stddev, float* out,
                int64_t count);

void FillConstant(float value, float* out, int64_t count);

}  // namespace gradsync
