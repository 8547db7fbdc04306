// The CUDA backend's kernels (see cuda_kernels.h). The arithmetic is
// kernel_math.h's, shared with the CPU backend; the launch shapes are
// launch_config.h's, unit-tested on the host. Element-wise kernels use
// grid-stride loops with a capped grid: one launch shape serves a 10-float
// bias and a 2 MiB parameter buffer, and the cap keeps block scheduling cheap
// for large buffers. These kernels are memory-bound; coalesced scalar accesses
// reach most of the bandwidth, and the flat buffer's per-parameter pointers
// carry no 16-byte alignment promise that float4 loads would need.
//
// Compiled with --fmad=false (core/device/BUILD): kernel_math.h says why.
#include <math.h>

#include <cstdint>

#include "core/device/cuda_kernels.h"
#include "core/device/kernel_math.h"
#include "core/device/launch_config.h"

namespace gradsync {
namespace cuda_kernels {
namespace {

namespace km = ::gradsync::kernel_math;
using launch_config::kLossFinalizeThreads;
using launch_config::kSoftmaxRowsPerBlock;
using launch_config::kSumRowsThreadsPerBlock;
using launch_config::kSumRowsTile;
using launch_config::kThreadsPerBlock;
using launch_config::kWarpSize;

constexpr unsigned kFullMask = 0xffffffffu;

// This thread's first index and the grid's stride, in Index arithmetic (the
// built-in variables are unsigned: mixed with a signed int they would make
// the loop's arithmetic unsigned). For Index = int the host has checked
// launch_config::FitsNarrowIndex, so neither the stride nor i + stride
// overflows.
template <typename Index>
__device__ Index GridStrideFirst() {
  return static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) +
         static_cast<Index>(threadIdx.x);
}
template <typename Index>
__device__ Index GridStride() {
  return static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
}

// Index is int where launch_config::PlanElementwise allows it: the modulo is
// several times cheaper in 32 bits. One kernel per width rather than a
// kernel template: nvcc 13.0 reports a template kernel's __launch_bounds__ as
// missing (-Wmissing-launch-bounds, an error here).
template <typename Index>
__device__ void AddRowBiasLoop(float* __restrict__ y,
                               const float* __restrict__ bias, Index total,
                               Index cols) {
  const Index stride = GridStride<Index>();
  for (Index i = GridStrideFirst<Index>(); i < total; i += stride) {
    y[i] = km::AddBias(y[i], bias[i % cols]);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    AddRowBiasKernel32(float* __restrict__ y, const float* __restrict__ bias,
                       int total, int cols) {
  AddRowBiasLoop<int>(y, bias, total, cols);
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    AddRowBiasKernel64(float* __restrict__ y, const float* __restrict__ bias,
                       int64_t total, int64_t cols) {
  AddRowBiasLoop<int64_t>(y, bias, total, cols);
}

// One block covers kSumRowsTile columns (launch_config.h); the 32 partial
// sums of a column are then added in a fixed order, so the result is the same
// on every run (no atomics). The order differs from the CPU's row-by-row sum
// (kernel_math.h's SumInOrder says why), so the two agree within rounding.
__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    SumRowsKernel(const float* __restrict__ x, float* __restrict__ out,
                  int rows, int cols) {
  __shared__ float partial[kSumRowsTile]
                          [kSumRowsTile + 1];  // +1: no bank conflicts
  const int64_t col =
      static_cast<int64_t>(blockIdx.x) * kSumRowsTile + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kSumRowsTile) {
      sum += x[r * cols + col];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < kSumRowsTile; ++k) total += partial[k][threadIdx.x];
    out[col] = total;
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    ReluForwardKernel(float* __restrict__ x, int64_t count) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    x[i] = km::Relu(x[i]);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    ReluBackwardKernel(const float* __restrict__ y, float* __restrict__ dy,
                       int64_t count) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    dy[i] = km::ReluGradient(y[i], dy[i]);
  }
}

// The maximum over a warp; every lane gets it (MaxOf is exact).
__device__ float WarpMax(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = km::MaxOf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

// One warp per row (launch_config.h). The steps are kernel_math.h's
// SoftmaxCrossEntropyRow, the CPU's: the lanes share the row's maximum, its
// shifted exponentials (written to dlogits) and the gradient; lane 0 adds the
// exponentials in the CPU's order and the row's loss to the warp's sum. Each
// block leaves the sum of its rows' losses in partials[blockIdx.x];
// SoftmaxLossFinalizeKernel adds them. Every lane of a warp runs the same
// number of row iterations (the row depends on the warp, not the lane), so
// the full-mask shuffles and __syncwarp are safe.
__global__ void __launch_bounds__(kThreadsPerBlock)
    SoftmaxCrossEntropyKernel(const float* __restrict__ logits,
                              const int32_t* __restrict__ labels, int rows,
                              int classes, float* __restrict__ dlogits,
                              double* __restrict__ partials) {
  __shared__ double warp_loss[kSoftmaxRowsPerBlock];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const float inv_rows = km::InverseRows(rows);
  double loss_sum = 0.0;  // meaningful in lane 0
  // int64_t: row + row_stride (and c + kWarpSize) may pass INT_MAX near it.
  const int64_t row_stride =
      static_cast<int64_t>(gridDim.x) * kSoftmaxRowsPerBlock;
  for (int64_t row =
           static_cast<int64_t>(blockIdx.x) * kSoftmaxRowsPerBlock + warp;
       row < rows; row += row_stride) {
    const float* x = logits + row * classes;
    float* d = dlogits + row * classes;
    float row_max = -INFINITY;
    for (int64_t c = lane; c < classes; c += kWarpSize) {
      row_max = km::MaxOf(row_max, x[c]);
    }
    row_max = WarpMax(row_max);
    for (int64_t c = lane; c < classes; c += kWarpSize) {
      d[c] = km::ShiftedExp(x[c], row_max);
    }
    // Lane 0 reads every lane's exponentials: __syncwarp orders the writes
    // before the reads.
    __syncwarp();
    double exp_sum = 0.0;
    if (lane == 0) exp_sum = km::SumInOrder(d, classes);
    // ...and the other lanes overwrite them with the gradient only after
    // lane 0 has read them.
    __syncwarp();
    exp_sum = __shfl_sync(kFullMask, exp_sum, 0);
    const float scale = km::SoftmaxGradientScale(exp_sum, inv_rows);
    const int32_t label = labels[row];
    for (int64_t c = lane; c < classes; c += kWarpSize) {
      d[c] = km::SoftmaxGradient(d[c], scale, c == label, inv_rows);
    }
    if (lane == 0) {
      loss_sum += km::CrossEntropyRowLoss(exp_sum, x, row_max, label, classes);
    }
  }
  if (lane == 0) warp_loss[warp] = loss_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_sum = 0.0;
    for (int w = 0; w < kSoftmaxRowsPerBlock; ++w) block_sum += warp_loss[w];
    partials[blockIdx.x] = block_sum;
  }
}

// One block: thread t adds partials t, t + 256, ...; then thread 0 adds the
// 256 sums in order. Deterministic, and the host never waits.
__global__ void __launch_bounds__(kLossFinalizeThreads)
    SoftmaxLossFinalizeKernel(const double* __restrict__ partials,
                              int num_partials, int rows,
                              float* __restrict__ loss) {
  __shared__ double sums[kLossFinalizeThreads];
  double sum = 0.0;
  for (int i = threadIdx.x; i < num_partials; i += kLossFinalizeThreads) {
    sum += partials[i];
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int i = 0; i < kLossFinalizeThreads; ++i) total += sums[i];
    *loss = km::MeanLoss(total, rows);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    ScaleKernel(float* __restrict__ x, int64_t count, float alpha) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    x[i] = km::Scaled(x[i], alpha);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    FillKernel(float* __restrict__ x, int64_t count, float value) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    x[i] = value;
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    SgdKernel(float* __restrict__ p, const float* __restrict__ g, int64_t count,
              float lr, float weight_decay) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    p[i] = km::SgdStep(p[i], g[i], lr, weight_decay);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    SgdMomentumKernel(float* __restrict__ p, const float* __restrict__ g,
                      float* __restrict__ v, int64_t count, float lr,
                      float momentum, float weight_decay) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    km::SgdMomentumStep(p[i], v[i], g[i], lr, momentum, weight_decay);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    AdamKernel(float* __restrict__ p, const float* __restrict__ g,
               float* __restrict__ m, float* __restrict__ v, int64_t count,
               km::AdamCoefficients coefficients) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    km::AdamStep(p[i], m[i], v[i], g[i], coefficients);
  }
}

}  // namespace

cudaError_t AddRowBias(cudaStream_t stream, float* y, const float* bias,
                       int rows, int cols) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t total = static_cast<int64_t>(rows) * cols;
  const launch_config::ElementwiseLaunch launch =
      launch_config::PlanElementwise(total);
  if (launch.narrow_index) {
    AddRowBiasKernel32<<<launch.blocks, kThreadsPerBlock, 0, stream>>>(
        y, bias, static_cast<int>(total), cols);
  } else {
    AddRowBiasKernel64<<<launch.blocks, kThreadsPerBlock, 0, stream>>>(
        y, bias, total, static_cast<int64_t>(cols));
  }
  return cudaGetLastError();
}

cudaError_t SumRows(cudaStream_t stream, const float* x, float* out, int rows,
                    int cols) {
  if (cols <= 0) return cudaSuccess;
  if (rows <= 0) return cudaMemsetAsync(out, 0, sizeof(float) * cols, stream);
  const dim3 threads(kSumRowsTile, kSumRowsTile);
  SumRowsKernel<<<launch_config::SumRowsBlocks(cols), threads, 0, stream>>>(
      x, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t ReluForward(cudaStream_t stream, float* x, int64_t count) {
  if (count <= 0) return cudaSuccess;
  ReluForwardKernel<<<launch_config::PlanElementwise(count).blocks,
                      kThreadsPerBlock, 0, stream>>>(x, count);
  return cudaGetLastError();
}

cudaError_t ReluBackward(cudaStream_t stream, const float* y, float* dy,
                         int64_t count) {
  if (count <= 0) return cudaSuccess;
  ReluBackwardKernel<<<launch_config::PlanElementwise(count).blocks,
                       kThreadsPerBlock, 0, stream>>>(y, dy, count);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(cudaStream_t stream, const float* logits,
                                const int32_t* labels, int rows, int classes,
                                float* dlogits, double* partials, float* loss) {
  if (rows <= 0 || classes <= 0) {
    // 0.0f is all zero bits.
    return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  }
  const int blocks = launch_config::SoftmaxBlocks(rows);
  SoftmaxCrossEntropyKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(
      logits, labels, rows, classes, dlogits, partials);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  SoftmaxLossFinalizeKernel<<<1, kLossFinalizeThreads, 0, stream>>>(
      partials, blocks, rows, loss);
  return cudaGetLastError();
}

cudaError_t Scale(cudaStream_t stream, float* x, int64_t count, float alpha) {
  if (count <= 0) return cudaSuccess;
  ScaleKernel<<<launch_config::PlanElementwise(count).blocks, kThreadsPerBlock,
                0, stream>>>(x, count, alpha);
  return cudaGetLastError();
}

cudaError_t Fill(cudaStream_t stream, float* x, int64_t count, float value) {
  if (count <= 0) return cudaSuccess;
  FillKernel<<<launch_config::PlanElementwise(count).blocks, kThreadsPerBlock,
               0, stream>>>(x, count, value);
  return cudaGetLastError();
}

cudaError_t SgdUpdate(cudaStream_t stream, float* params, const float* grads,
                      float* velocity, int64_t count, float lr, float momentum,
                      float weight_decay) {
  if (count <= 0) return cudaSuccess;
  const int blocks = launch_config::PlanElementwise(count).blocks;
  if (momentum == 0.0f) {
    SgdKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(params, grads, count, lr,
                                                       weight_decay);
  } else {
    SgdMomentumKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(
        params, grads, velocity, count, lr, momentum, weight_decay);
  }
  return cudaGetLastError();
}

cudaError_t AdamUpdate(cudaStream_t stream, float* params, const float* grads,
                       float* m, float* v, int64_t count, float step_size,
                       float inv_sqrt_bias_correction2, float beta1,
                       float beta2, float epsilon, float weight_decay) {
  if (count <= 0) return cudaSuccess;
  AdamKernel<<<launch_config::PlanElementwise(count).blocks, kThreadsPerBlock,
               0, stream>>>(
      params, grads, m, v, count,
      km::AdamCoefficientsFrom(step_size, inv_sqrt_bias_correction2, beta1,
                               beta2, epsilon, weight_decay));
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace gradsync
