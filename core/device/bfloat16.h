// bfloat16 rounding, written once for both devices (__host__ __device__ under
// nvcc): the CPU device's --precision=bf16 path and the CUDA kernels that cast
// a convolution's or a matrix product's float32 inputs to bf16 call these
// functions, so both devices round every value to the same bf16.
//
// bfloat16 is the top half of a float32: sign, the same 8-bit exponent, 7 of
// the 23 mantissa bits.
//
//    float32  s eeeeeeee mmmmmmm mmmmmmmmmmmmmmmm
//                        \_____/ \______________/
//    bfloat16 s eeeeeeee mmmmmmm   dropped: decides the rounding
//
// Rounding is IEEE-754 round-to-nearest-even, as PyTorch's c10::BFloat16 and
// CUDA's __float2bfloat16_rn do: the dropped half is compared with 0x8000, a
// tie goes to the even bf16. Because the exponent field is the same, the
// integer addition carries into the exponent exactly where the value crosses a
// power of two, subnormals round like any other value (bf16 keeps float32's
// subnormal range, with 7 mantissa bits), and a finite value of at least
// bf16's largest plus half its ulp becomes infinity. Infinities are kept; a
// NaN stays a NaN of the same sign (its quiet bit set, so that dropping the low
// payload bits cannot turn it into an infinity).
#pragma once

#include <cstdint>
#include <cstring>

// Defines GS_HOST_DEVICE (__host__ __device__ under nvcc, nothing for GCC).
#include "core/device/layer_geometry.h"

namespace gradsync {
namespace bfloat16 {

GS_HOST_DEVICE inline uint32_t FloatBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

GS_HOST_DEVICE inline float FloatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// The bf16 nearest to `value` (ties to even), as its 16 bits.
GS_HOST_DEVICE inline uint16_t RoundToBits(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep the sign and the top of the payload, force the quiet bit.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // 0x7fff rounds a dropped half below 0x8000 down and above it up; the
  // kept half's lowest bit adds one more, so that exactly 0x8000 (a tie)
  // rounds up only from an odd bf16: to even.
  const uint32_t round_up = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round_up) >> 16);
}

// The float32 a bf16 stands for (exact: bf16 is a float32 with the low half
// zero).
GS_HOST_DEVICE inline float FromBits(uint16_t bits) {
  return FloatFromBits(static_cast<uint32_t>(bits) << 16);
}

// `value` rounded to the nearest bf16, kept as a float32: what the CPU
// device's bf16 path stores, since its libraries compute in float32 (the
// product of two bf16 values is exact in float32, so a float32 product of
// rounded inputs is what a bf16 tensor core computes).
GS_HOST_DEVICE inline float Round(float value) {
  return FromBits(RoundToBits(value));
}

// Half an ulp of bf16 relative to the value: |Round(x) − x| <= 2⁻⁸·|x| for
// every finite x whose rounding does not overflow (for normal x the bound is
// 2⁻⁸·2^e ≤ 2⁻⁸·|x|; below the normal range bf16 and float32 share the grid
// spacing, so the error is at most half of 2⁻¹³³, well under any tolerance
// that uses this constant).
constexpr double kUnitRoundoff = 1.0 / 256.0;

// Over `count` values on the host (the CPU device's bf16 tensors; the CUDA
// kernels convert element by element): bits = RoundToBits(in), and the way
// back, out = FromBits(bits), which is exact. Plain loops over non-aliasing
// arrays, so that the compiler vectorizes them.
inline void RoundToBits(const float* __restrict in, int64_t count,
                        uint16_t* __restrict bits) {
  for (int64_t i = 0; i < count; ++i) bits[i] = RoundToBits(in[i]);
}

inline void FromBits(const uint16_t* __restrict bits, int64_t count,
                     float* __restrict out) {
  for (int64_t i = 0; i < count; ++i) out[i] = FromBits(bits[i]);
}

}  // namespace bfloat16
}  // namespace gradsync
