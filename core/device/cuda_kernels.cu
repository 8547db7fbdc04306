// The CUDA backend's kernels (see cuda_kernels.h). Element-wise kernels use
// grid-stride loops with a capped grid: one launch shape serves a 10-float bias
// and a 2 MiB parameter buffer, and the cap keeps block scheduling cheap for
// large buffers. These kernels are memory-bound; coalesced scalar accesses
// reach most of the bandwidth, and the flat buffer's per-parameter pointers
// carry no 16-byte alignment promise that float4 loads would need.
#include <math.h>

#include <cstdint>
#include <limits>

#include "core/device/cuda_kernels.h"

namespace gradsync {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 256;
// 132 SMs (H100 SXM) × 16 resident 256-thread blocks covers the GPU twice.
constexpr int64_t kMaxBlocks = 4096;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

int ElementwiseBlocks(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Index is int when the element count fits (32-bit division and modulo are
// several times cheaper than 64-bit ones on the GPU), int64_t otherwise.
template <typename Index>
__global__ void AddRowBiasKernel(float* __restrict__ y,
                                 const float* __restrict__ bias, Index total,
                                 Index cols) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<Index>(blockDim.x) * gridDim.x) {
    y[i] += bias[i % cols];
  }
}

// One block covers 32 columns; its 32×32 threads each add every 32nd row of a
// column (consecutive threads read consecutive columns: coalesced), then the
// 32 partial sums of a column are added in a fixed order, so the result is the
// same on every run (no atomics).
constexpr int kSumRowsTile = 32;

__global__ void SumRowsKernel(const float* __restrict__ x,
                              float* __restrict__ out, int rows, int cols) {
  __shared__ float partial[kSumRowsTile]
                          [kSumRowsTile + 1];  // +1: no bank conflicts
  const int col = blockIdx.x * kSumRowsTile + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int r = threadIdx.y; r < rows; r += kSumRowsTile) {
      sum += x[static_cast<int64_t>(r) * cols + col];
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

__global__ void ReluForwardKernel(float* __restrict__ x, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluBackwardKernel(const float* __restrict__ y,
                                   float* __restrict__ dy, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

__device__ float WarpMax(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ double WarpSum(double value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}

// One warp per row (classes are few: 10 for Fashion-MNIST; the lanes stride
// over wider rows). Mirrors CpuDevice::SoftmaxCrossEntropy: the row maximum is
// subtracted before exp, the exponential sum and the loss are accumulated in
// double, and dlogits = softmax / rows - onehot / rows. Each block leaves the
// sum of its rows' losses in partials[blockIdx.x]; SoftmaxLossFinalize adds
// them. Every lane of a warp runs the same number of row iterations, so the
// full-mask shuffles are safe.
constexpr int kSoftmaxWarpsPerBlock = kThreads / kWarp;

__global__ void SoftmaxCrossEntropyKernel(const float* __restrict__ logits,
                                          const int32_t* __restrict__ labels,
                                          int rows, int classes,
                                          float* __restrict__ dlogits,
                                          double* __restrict__ partials) {
  __shared__ double warp_loss[kSoftmaxWarpsPerBlock];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const float inv_rows = 1.0f / static_cast<float>(rows);
  double loss_sum = 0.0;  // meaningful in lane 0
  for (int row = blockIdx.x * kSoftmaxWarpsPerBlock + warp; row < rows;
       row += gridDim.x * kSoftmaxWarpsPerBlock) {
    const float* x = logits + static_cast<int64_t>(row) * classes;
    float* d = dlogits + static_cast<int64_t>(row) * classes;
    float row_max = -INFINITY;
    for (int c = lane; c < classes; c += kWarp) row_max = fmaxf(row_max, x[c]);
    row_max = WarpMax(row_max);
    double sum = 0.0;
    for (int c = lane; c < classes; c += kWarp) sum += expf(x[c] - row_max);
    sum = WarpSum(sum);
    const float scale = static_cast<float>(1.0 / sum) * inv_rows;
    const int32_t label = labels[row];
    for (int c = lane; c < classes; c += kWarp) {
      float value = expf(x[c] - row_max) * scale;
      if (c == label) value -= inv_rows;
      d[c] = value;
    }
    if (lane == 0) {
      // A label outside [0, classes) poisons the loss with NaN, as on the CPU,
      // so the mistake shows in the logged loss.
      loss_sum += (label >= 0 && label < classes)
                      ? log(sum) - static_cast<double>(x[label] - row_max)
                      : nan("");
    }
  }
  if (lane == 0) warp_loss[warp] = loss_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_sum = 0.0;
    for (int w = 0; w < kSoftmaxWarpsPerBlock; ++w) block_sum += warp_loss[w];
    partials[blockIdx.x] = block_sum;
  }
}

// One block: thread t adds partials t, t + 256, ...; then thread 0 adds the
// 256 sums in order. Deterministic, and the host never waits.
__global__ void SoftmaxLossFinalizeKernel(const double* __restrict__ partials,
                                          int num_partials, int rows,
                                          float* __restrict__ loss) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x)
    sum += partials[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int i = 0; i < blockDim.x; ++i) total += sums[i];
    *loss = static_cast<float>(total / rows);
  }
}

__global__ void ScaleKernel(float* __restrict__ x, int64_t count, float alpha) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    x[i] *= alpha;
  }
}

__global__ void FillKernel(float* __restrict__ x, int64_t count, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    x[i] = value;
  }
}

// PyTorch's SGD, as CpuDevice::SgdUpdate.
__global__ void SgdKernel(float* __restrict__ p, const float* __restrict__ g,
                          int64_t count, float lr, float weight_decay) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    p[i] -= lr * (g[i] + weight_decay * p[i]);
  }
}

__global__ void SgdMomentumKernel(float* __restrict__ p,
                                  const float* __restrict__ g,
                                  float* __restrict__ v, int64_t count,
                                  float lr, float momentum,
                                  float weight_decay) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float gi = g[i] + weight_decay * p[i];
    const float vi = momentum * v[i] + gi;
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

// PyTorch's Adam, as CpuDevice::AdamUpdate.
__global__ void AdamKernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ m, float* __restrict__ v,
                           int64_t count, float step_size,
                           float inv_sqrt_bias_correction2, float beta1,
                           float beta2, float epsilon, float weight_decay) {
  const float one_minus_beta1 = 1.0f - beta1;
  const float one_minus_beta2 = 1.0f - beta2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float gi = g[i] + weight_decay * p[i];
    const float mi = beta1 * m[i] + one_minus_beta1 * gi;
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_bias_correction2 + epsilon);
  }
}

}  // namespace

cudaError_t AddRowBias(cudaStream_t stream, float* y, const float* bias,
                       int rows, int cols) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (total <= std::numeric_limits<int>::max()) {
    AddRowBiasKernel<int><<<ElementwiseBlocks(total), kThreads, 0, stream>>>(
        y, bias, static_cast<int>(total), cols);
  } else {
    AddRowBiasKernel<int64_t>
        <<<ElementwiseBlocks(total), kThreads, 0, stream>>>(y, bias, total,
                                                            cols);
  }
  return cudaGetLastError();
}

cudaError_t SumRows(cudaStream_t stream, const float* x, float* out, int rows,
                    int cols) {
  if (cols <= 0) return cudaSuccess;
  if (rows <= 0) return cudaMemsetAsync(out, 0, sizeof(float) * cols, stream);
  const dim3 threads(kSumRowsTile, kSumRowsTile);
  const int blocks = (cols + kSumRowsTile - 1) / kSumRowsTile;
  SumRowsKernel<<<blocks, threads, 0, stream>>>(x, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t ReluForward(cudaStream_t stream, float* x, int64_t count) {
  if (count <= 0) return cudaSuccess;
  ReluForwardKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(x,
                                                                       count);
  return cudaGetLastError();
}

cudaError_t ReluBackward(cudaStream_t stream, const float* y, float* dy,
                         int64_t count) {
  if (count <= 0) return cudaSuccess;
  ReluBackwardKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(y, dy,
                                                                        count);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(cudaStream_t stream, const float* logits,
                                const int32_t* labels, int rows, int classes,
                                float* dlogits, double* partials, float* loss) {
  if (rows <= 0 || classes <= 0) {
    // 0.0f is all zero bits.
    return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  }
  int64_t blocks = (static_cast<int64_t>(rows) + kSoftmaxWarpsPerBlock - 1) /
                   kSoftmaxWarpsPerBlock;
  if (blocks > kMaxLossPartials) blocks = kMaxLossPartials;
  SoftmaxCrossEntropyKernel<<<static_cast<int>(blocks), kThreads, 0, stream>>>(
      logits, labels, rows, classes, dlogits, partials);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  SoftmaxLossFinalizeKernel<<<1, kThreads, 0, stream>>>(
      partials, static_cast<int>(blocks), rows, loss);
  return cudaGetLastError();
}

cudaError_t Scale(cudaStream_t stream, float* x, int64_t count, float alpha) {
  if (count <= 0) return cudaSuccess;
  ScaleKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(x, count,
                                                                 alpha);
  return cudaGetLastError();
}

cudaError_t Fill(cudaStream_t stream, float* x, int64_t count, float value) {
  if (count <= 0) return cudaSuccess;
  FillKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(x, count,
                                                                value);
  return cudaGetLastError();
}

cudaError_t SgdUpdate(cudaStream_t stream, float* params, const float* grads,
                      float* velocity, int64_t count, float lr, float momentum,
                      float weight_decay) {
  if (count <= 0) return cudaSuccess;
  if (momentum == 0.0f) {
    SgdKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(
        params, grads, count, lr, weight_decay);
  } else {
    SgdMomentumKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(
        params, grads, velocity, count, lr, momentum, weight_decay);
  }
  return cudaGetLastError();
}

cudaError_t AdamUpdate(cudaStream_t stream, float* params, const float* grads,
                       float* m, float* v, int64_t count, float step_size,
                       float inv_sqrt_bias_correction2, float beta1,
                       float beta2, float epsilon, float weight_decay) {
  if (count <= 0) return cudaSuccess;
  AdamKernel<<<ElementwiseBlocks(count), kThreads, 0, stream>>>(
      params, grads, m, v, count, step_size, inv_sqrt_bias_correction2, beta1,
      beta2, epsilon, weight_decay);
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace gradsync
