#include "allreduce/algorithms/float_sum.h"

// On x86-64 GCC builds one AVX2 and one baseline (SSE2) copy of each loop and
// picks at load time, so the binary stays portable and still uses 256-bit
// adds where the CPU has them. __restrict spares the vectorizer a run-time
// overlap check. Not under ThreadSanitizer: the load-time resolver is
// instrumented and runs before the TSan runtime is up, which crashes the
// program during relocation.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define GS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GS_VECTOR_CLONES
#endif

namespace gradsync {

GS_VECTOR_CLONES
void AddInto(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

GS_VECTOR_CLONES
void AddScaledInto(float* __restrict dst, const float* __restrict src,
                   int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) * scale;
}

GS_VECTOR_CLONES
void ScaleInPlace(float* __restrict x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace gradsync
