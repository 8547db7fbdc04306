// The reduction the ring applies to every received float: dst += src, with an
// optional scale folded in. Kept apart so that it is compiled with the
// vectorizer fully on (see BUILD) and can be benchmarked on its own.
#pragma once

#include <cstdint>

namespace gradsync {

// dst[i] += src[i] for i < n. dst and src must not overlap.
void AddInto(float* dst, const float* src, int64_t n);
// dst[i] = (dst[i] + src[i]) * scale for i < n. dst and src must not overlap.
void AddScaledInto(float* dst, const float* src, int64_t n, float scale);
// x[i] *= scale for i < n.
void ScaleInPlace(float* x, int64_t n, float scale);

}  // namespace gradsync
