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

#include "core/device/bfloat16.h"
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

// Element i of a tensor a kernel reads (Device's InputTensor): float32, or
// bf16 bits widened exactly; the other pointer is null, the same for every
// thread, so the branch does not diverge.
__device__ __forceinline__ float InputAt(const float* x, const uint16_t* x_bf16,
                                         int64_t i) {
  return x_bf16 != nullptr ? bfloat16::FromBits(x_bf16[i]) : x[i];
}

__global__ void __launch_bounds__(kThreadsPerBlock) ReluBackwardOfSumKernel(
    const float* __restrict__ y, const float* __restrict__ x,
    const uint16_t* __restrict__ x_bf16, const float* dy,
    const uint16_t* __restrict__ dy_bf16, float* out, int64_t count) {
  // out may be dy (in place): neither is __restrict__.
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    out[i] = km::ReluGradientOfSum(y[i], InputAt(dy, dy_bf16, i),
                                   InputAt(x, x_bf16, i));
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

// --precision=bf16's casts (bfloat16.h's rounding, the CPU's too). The
// walk's divisions are 64-bit: these kernels move two or six bytes per
// element, and a convolution's cuDNN call dwarfs them.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RoundToBfloat16Kernel(const float* __restrict__ in, NhwcWalk walk,
                          uint16_t* __restrict__ out) {
  const int64_t count = walk.count();
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    out[i] = bfloat16::RoundToBits(in[walk.OffsetOf(i)]);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    WidenFromBfloat16Kernel(const uint16_t* __restrict__ in, NhwcWalk walk,
                            float* __restrict__ out) {
  const int64_t count = walk.count();
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    out[walk.OffsetOf(i)] = bfloat16::FromBits(in[i]);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    RoundInPlaceKernel(float* __restrict__ x, int64_t count) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    x[i] = bfloat16::Round(x[i]);
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

// --- Convolutional layers
// ------------------------------------------------------ One thread per output
// element (grid-stride, 64-bit indices: a column matrix easily passes 2^31
// entries), the arithmetic in kernel_math.h.

__global__ void __launch_bounds__(kThreadsPerBlock)
    Im2ColKernel(const float* __restrict__ input, ConvGeometry g,
                 float* __restrict__ columns, int64_t total) {
  const int64_t cols = g.column_cols();
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    columns[i] = km::Im2ColValue(input, g, i / cols, i % cols);
  }
}

// One thread per input element, enumerated NHWC (b, h, w, c) and written
// where g.input puts it.
__global__ void __launch_bounds__(kThreadsPerBlock)
    Col2ImKernel(const float* __restrict__ columns, ConvGeometry g,
                 float* __restrict__ input_grad, int64_t total) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    const int64_t c = i % g.channels;
    const int64_t w = i / g.channels % g.width;
    const int64_t h = i / (int64_t{g.channels} * g.width) % g.height;
    const int64_t b = i / (int64_t{g.channels} * g.width * g.height);
    input_grad[b * g.input.batch + c * g.input.channel + h * g.input.row +
               w * g.input.column] = km::Col2ImValue(columns, g, b, c, h, w);
  }
}

// Batch normalisation over NHWC [rows × channels] tensors: two kinds of
// kernel, each a scaffold the batch-norm kernels below fill with
// kernel_math.h's arithmetic.
//
// Channel tiles, as SumRowsKernel: a block of kSumRowsTile × kSumRowsTile
// threads sums kSumRowsTile channels over rows [begin, end). Lane y of column
// x adds every kSumRowsTile-th row of channel blockIdx.x·tile + x, from row
// begin + y, in double; then lane 0 adds the lanes' partials in a fixed
// order, so the sums do not depend on scheduling. `add(i, c, first, second)`
// adds element i's two terms (i = r·channels + c). Returns true in the one
// thread of each channel that holds its sums, with `c` that channel; every
// thread must call it (it synchronizes the block).
template <typename AddTerms>
__device__ bool ChannelTileSums(int64_t begin, int64_t end, int channels,
                                AddTerms add, int64_t* c, double* first,
                                double* second) {
  __shared__ double partial_first[kSumRowsTile][kSumRowsTile + 1];
  __shared__ double partial_second[kSumRowsTile][kSumRowsTile + 1];
  *c = static_cast<int64_t>(blockIdx.x) * kSumRowsTile + threadIdx.x;
  double a = 0.0, b = 0.0;
  if (*c < channels) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kSumRowsTile) {
      add(r * channels + *c, *c, a, b);
    }
  }
  partial_first[threadIdx.y][threadIdx.x] = a;  // +1 column: no bank conflicts
  partial_second[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || *c >= channels) return false;
  *first = 0.0;
  *second = 0.0;
  for (int k = 0; k < kSumRowsTile; ++k) {
    *first += partial_first[k][threadIdx.x];
    *second += partial_second[k][threadIdx.x];
  }
  return true;
}

// The NCHW twin of ChannelTileSums (launch_config::PlanPlaneSums): channel
// blockIdx.x's two sums over images [begin, end) of an [images × channels ×
// plane] tensor. Thread t adds values t, t + blockDim.x, ... of the images'
// runs of `plane` floats walked as one flat sequence
// (launch_config::PlaneWalk, tested on the host), then the block adds
// its threads' partials in a fixed tree, so the sums do not depend on
// scheduling. Returns true in thread 0, with `c` the channel; every thread
// must call it (it synchronizes the block). Blocks of
// kSumRowsThreadsPerBlock threads, one dimension.
template <typename AddTerms>
__device__ bool PlaneSums(int64_t begin, int64_t end, int channels,
                          int64_t plane, AddTerms add, int64_t* c,
                          double* first, double* second) {
  __shared__ double partial_first[kSumRowsThreadsPerBlock];
  __shared__ double partial_second[kSumRowsThreadsPerBlock];
  *c = static_cast<int64_t>(blockIdx.x);
  const int t = static_cast<int>(threadIdx.x);
  double a = 0.0, b = 0.0;
  for (launch_config::PlaneWalk walk(begin, plane, t); walk.image < end;
       walk.Next()) {
    add((walk.image * channels + *c) * plane + walk.pixel, *c, a, b);
  }
  partial_first[t] = a;
  partial_second[t] = b;
  __syncthreads();
  for (int half = kSumRowsThreadsPerBlock / 2; half > 0; half /= 2) {
    if (t < half) {
      partial_first[t] += partial_first[t + half];
      partial_second[t] += partial_second[t + half];
    }
    __syncthreads();
  }
  if (t != 0) return false;
  *first = partial_first[0];
  *second = partial_second[0];
  return true;
}

// Element-wise over the tensor, grid-stride: `at(i, c)` for every element i,
// of channel c. With `narrow_index` (launch_config::PlanElementwise's: every
// index of the loop fits in int) the channel is a 32-bit remainder, several
// times cheaper on the GPU than a 64-bit one, which would otherwise be the
// costliest instruction of these memory-bound passes; the flag is the same
// for every thread, so the branch does not diverge.
// `plane` is 1 for NHWC tensors (c = i mod channels) and height·width for
// NCHW ones (c = (i / plane) mod channels).
template <typename AtElement>
__device__ void ForEachChannelElement(int64_t total, int channels,
                                      int64_t plane, bool narrow_index,
                                      AtElement at) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    int64_t c = 0;
    if (narrow_index) {
      const int narrow = static_cast<int>(i);
      c = plane == 1 ? narrow % channels
                     : narrow / static_cast<int>(plane) % channels;
    } else {
      c = plane == 1 ? i % channels : i / plane % channels;
    }
    at(i, c);
  }
}

// The statistics of channel c from its sum and sum of squares over `rows`.
__device__ void FinishStatistics(int64_t c, double sum, double sum_squares,
                                 int64_t rows, float momentum, float epsilon,
                                 float* __restrict__ saved_mean,
                                 float* __restrict__ saved_inv_std,
                                 float* __restrict__ running_mean,
                                 float* __restrict__ running_var) {
  const float mean = km::BatchMean(sum, rows);
  const float variance = km::BatchVariance(sum, sum_squares, rows);
  saved_mean[c] = mean;
  saved_inv_std[c] = km::InverseStd(variance, epsilon);
  running_mean[c] = km::RunningAverage(running_mean[c], mean, momentum);
  running_var[c] = km::RunningAverage(
      running_var[c], km::UnbiasedVariance(variance, rows), momentum);
}

// Element i's terms of the forward sums: x and x².
struct StatisticsTerms {
  const float* x;
  const uint16_t* x_bf16;
  __device__ void operator()(int64_t i, int64_t, double& a, double& b) const {
    const float value = InputAt(x, x_bf16, i);
    a += value;
    b += static_cast<double>(value) * value;
  }
};

// Element i's terms of the backward sums: dy and dy·x̂ (dy through the fused
// ReLU when relu_output is not null).
struct GradientTerms {
  const float* x;
  const uint16_t* x_bf16;
  const float* dy;
  const uint16_t* dy_bf16;
  const float* mean;
  const float* inv_std;
  const float* relu_output;
  __device__ void operator()(int64_t i, int64_t c, double& a, double& b) const {
    const float grad =
        km::MaskedByRelu(InputAt(dy, dy_bf16, i), relu_output, i);
    a += grad;
    b += static_cast<double>(grad) *
         km::Normalized(InputAt(x, x_bf16, i), mean[c], inv_std[c]);
  }
};

// Slice blockIdx.y of [0, count) (launch_config::SliceRows: rows of an
// NHWC tensor, images of an NCHW one): `sums(begin, end, &c, &first,
// &second)` sums the slice (ChannelTileSums or PlaneSums), and the thread
// that holds channel c's two sums leaves them in partials[slice·channels +
// c] and partials[kMaxChannelSumPartials + slice·channels + c].
template <typename Sums>
__device__ void SliceSums(Sums sums, int64_t count, int64_t per_slice,
                          int channels, double* __restrict__ partials) {
  const int slice = static_cast<int>(blockIdx.y);
  const launch_config::RowRange range =
      launch_config::SliceRows(count, per_slice, slice);
  int64_t c = 0;
  double first = 0.0, second = 0.0;
  if (!sums(range.begin, range.end, &c, &first, &second)) return;
  const int64_t slot = static_cast<int64_t>(slice) * channels + c;
  partials[slot] = first;
  partials[kMaxChannelSumPartials + slot] = second;
}

// SliceSums of an NHWC plan: the channel tile's sums over a slice of rows.
// (A __device__ template under two kernels: nvcc does not see the
// __launch_bounds__ of a __global__ template's instantiations.)
template <typename Terms>
__device__ void ChannelSumsSlice(Terms terms, int64_t rows,
                                 int64_t rows_per_slice, int channels,
                                 double* __restrict__ partials) {
  SliceSums(
      [&](int64_t begin, int64_t end, int64_t* c, double* first,
          double* second) {
        return ChannelTileSums(begin, end, channels, terms, c, first, second);
      },
      rows, rows_per_slice, channels, partials);
}

__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormStatisticsSliceKernel(StatisticsTerms terms, int64_t rows,
                                   int64_t rows_per_slice, int channels,
                                   double* __restrict__ partials) {
  ChannelSumsSlice(terms, rows, rows_per_slice, channels, partials);
}

__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormGradientSumsSliceKernel(GradientTerms terms, int64_t rows,
                                     int64_t rows_per_slice, int channels,
                                     double* __restrict__ partials) {
  ChannelSumsSlice(terms, rows, rows_per_slice, channels, partials);
}

// SliceSums of an NCHW plan (launch_config::PlanPlaneSums): one channel's
// sums over a slice of images.
template <typename Terms>
__device__ void PlaneSumsSlice(Terms terms, int64_t images,
                               int64_t images_per_slice, int channels,
                               int64_t plane, double* __restrict__ partials) {
  SliceSums(
      [&](int64_t begin, int64_t end, int64_t* c, double* first,
          double* second) {
        return PlaneSums(begin, end, channels, plane, terms, c, first, second);
      },
      images, images_per_slice, channels, partials);
}

__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormPlaneStatisticsSliceKernel(StatisticsTerms terms, int64_t images,
                                        int64_t images_per_slice, int channels,
                                        int64_t plane,
                                        double* __restrict__ partials) {
  PlaneSumsSlice(terms, images, images_per_slice, channels, plane, partials);
}

__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormPlaneGradientSumsSliceKernel(GradientTerms terms, int64_t images,
                                          int64_t images_per_slice,
                                          int channels, int64_t plane,
                                          double* __restrict__ partials) {
  PlaneSumsSlice(terms, images, images_per_slice, channels, plane, partials);
}

// Channel c's two sums: its slices' partials added in slice order.
__device__ void AddSlices(const double* __restrict__ partials, int slices,
                          int channels, int64_t c, double* first,
                          double* second) {
  *first = 0.0;
  *second = 0.0;
  for (int s = 0; s < slices; ++s) {
    const int64_t slot = static_cast<int64_t>(s) * channels + c;
    *first += partials[slot];
    *second += partials[kMaxChannelSumPartials + slot];
  }
}

// The one-pass kernel of an unsliced plan: the tile's channels over all rows.
__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormStatisticsKernel(const float* __restrict__ x,
                              const uint16_t* __restrict__ x_bf16, int64_t rows,
                              int channels, float momentum, float epsilon,
                              float* __restrict__ saved_mean,
                              float* __restrict__ saved_inv_std,
                              float* __restrict__ running_mean,
                              float* __restrict__ running_var) {
  int64_t c = 0;
  double sum = 0.0, sum_squares = 0.0;
  if (!ChannelTileSums(0, rows, channels, StatisticsTerms{x, x_bf16}, &c, &sum,
                       &sum_squares)) {
    return;
  }
  FinishStatistics(c, sum, sum_squares, rows, momentum, epsilon, saved_mean,
                   saved_inv_std, running_mean, running_var);
}

// The one-pass kernel of an unsliced NCHW plan: one channel over all images.
__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormPlaneStatisticsKernel(const float* __restrict__ x,
                                   const uint16_t* __restrict__ x_bf16,
                                   int64_t images, int channels, int64_t plane,
                                   float momentum, float epsilon,
                                   float* __restrict__ saved_mean,
                                   float* __restrict__ saved_inv_std,
                                   float* __restrict__ running_mean,
                                   float* __restrict__ running_var) {
  int64_t c = 0;
  double sum = 0.0, sum_squares = 0.0;
  if (!PlaneSums(0, images, channels, plane, StatisticsTerms{x, x_bf16}, &c,
                 &sum, &sum_squares)) {
    return;
  }
  FinishStatistics(c, sum, sum_squares, images * plane, momentum, epsilon,
                   saved_mean, saved_inv_std, running_mean, running_var);
}

// A sliced plan's second pass: one thread per channel.
__global__ void __launch_bounds__(kThreadsPerBlock)
    BatchNormStatisticsFinishKernel(const double* __restrict__ partials,
                                    int slices, int64_t rows, int channels,
                                    float momentum, float epsilon,
                                    float* __restrict__ saved_mean,
                                    float* __restrict__ saved_inv_std,
                                    float* __restrict__ running_mean,
                                    float* __restrict__ running_var) {
  const int64_t c =
      static_cast<int64_t>(blockIdx.x) * kThreadsPerBlock + threadIdx.x;
  if (c >= channels) return;
  double sum = 0.0, sum_squares = 0.0;
  AddSlices(partials, slices, channels, c, &sum, &sum_squares);
  FinishStatistics(c, sum, sum_squares, rows, momentum, epsilon, saved_mean,
                   saved_inv_std, running_mean, running_var);
}

__global__ void __launch_bounds__(kThreadsPerBlock) BatchNormApplyKernel(
    const float* __restrict__ x, const uint16_t* __restrict__ x_bf16,
    int64_t total, int channels, int64_t plane, const float* __restrict__ gamma,
    const float* __restrict__ beta, const float* __restrict__ mean,
    const float* __restrict__ inv_std, float* __restrict__ y,
    const float* __restrict__ residual, bool relu,
    uint16_t* __restrict__ bf16_copy, bool narrow_index) {
  ForEachChannelElement(
      total, channels, plane, narrow_index, [=](int64_t i, int64_t c) {
        const float value = km::BatchNormEpilogueOutput(
            km::BatchNormOutput(InputAt(x, x_bf16, i), mean[c], inv_std[c],
                                gamma[c], beta[c]),
            residual, i, relu);
        y[i] = value;
        if (bf16_copy != nullptr) bf16_copy[i] = bfloat16::RoundToBits(value);
      });
}

__global__ void __launch_bounds__(kThreadsPerBlock) BatchNormInferenceKernel(
    const float* __restrict__ x, const uint16_t* __restrict__ x_bf16,
    int64_t total, int channels, int64_t plane, const float* __restrict__ gamma,
    const float* __restrict__ beta, const float* __restrict__ running_mean,
    const float* __restrict__ running_var, float epsilon, float* __restrict__ y,
    const float* __restrict__ residual, bool relu,
    uint16_t* __restrict__ bf16_copy, bool narrow_index) {
  ForEachChannelElement(
      total, channels, plane, narrow_index, [=](int64_t i, int64_t c) {
        const float value = km::BatchNormEpilogueOutput(
            km::BatchNormOutput(InputAt(x, x_bf16, i), running_mean[c],
                                km::InverseStd(running_var[c], epsilon),
                                gamma[c], beta[c]),
            residual, i, relu);
        y[i] = value;
        if (bf16_copy != nullptr) bf16_copy[i] = bfloat16::RoundToBits(value);
      });
}

__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormGradientSumsKernel(
        const float* __restrict__ x, const uint16_t* __restrict__ x_bf16,
        const float* __restrict__ dy, const uint16_t* __restrict__ dy_bf16,
        int64_t rows, int channels, const float* __restrict__ mean,
        const float* __restrict__ inv_std,
        const float* __restrict__ relu_output, float* __restrict__ dgamma,
        float* __restrict__ dbeta) {
  int64_t c = 0;
  double sum_dy = 0.0, sum_dy_x_hat = 0.0;
  if (!ChannelTileSums(
          0, rows, channels,
          GradientTerms{x, x_bf16, dy, dy_bf16, mean, inv_std, relu_output}, &c,
          &sum_dy, &sum_dy_x_hat)) {
    return;
  }
  dbeta[c] = static_cast<float>(sum_dy);
  dgamma[c] = static_cast<float>(sum_dy_x_hat);
}

// The one-pass backward sums of an unsliced NCHW plan.
__global__ void __launch_bounds__(kSumRowsThreadsPerBlock)
    BatchNormPlaneGradientSumsKernel(
        const float* __restrict__ x, const uint16_t* __restrict__ x_bf16,
        const float* __restrict__ dy, const uint16_t* __restrict__ dy_bf16,
        int64_t images, int channels, int64_t plane,
        const float* __restrict__ mean, const float* __restrict__ inv_std,
        const float* __restrict__ relu_output, float* __restrict__ dgamma,
        float* __restrict__ dbeta) {
  int64_t c = 0;
  double sum_dy = 0.0, sum_dy_x_hat = 0.0;
  if (!PlaneSums(
          0, images, channels, plane,
          GradientTerms{x, x_bf16, dy, dy_bf16, mean, inv_std, relu_output}, &c,
          &sum_dy, &sum_dy_x_hat)) {
    return;
  }
  dbeta[c] = static_cast<float>(sum_dy);
  dgamma[c] = static_cast<float>(sum_dy_x_hat);
}

// A sliced plan's second pass of the backward sums: one thread per channel.
__global__ void __launch_bounds__(kThreadsPerBlock)
    BatchNormGradientSumsFinishKernel(const double* __restrict__ partials,
                                      int slices, int channels,
                                      float* __restrict__ dgamma,
                                      float* __restrict__ dbeta) {
  const int64_t c =
      static_cast<int64_t>(blockIdx.x) * kThreadsPerBlock + threadIdx.x;
  if (c >= channels) return;
  double sum_dy = 0.0, sum_dy_x_hat = 0.0;
  AddSlices(partials, slices, channels, c, &sum_dy, &sum_dy_x_hat);
  dbeta[c] = static_cast<float>(sum_dy);
  dgamma[c] = static_cast<float>(sum_dy_x_hat);
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    BatchNormInputGradientKernel(
        const float* __restrict__ x, const uint16_t* __restrict__ x_bf16,
        const float* __restrict__ dy, const uint16_t* __restrict__ dy_bf16,
        int64_t rows, int channels, int64_t plane,
        const float* __restrict__ gamma, const float* __restrict__ mean,
        const float* __restrict__ inv_std, const float* __restrict__ dgamma,
        const float* __restrict__ dbeta, const float* __restrict__ relu_output,
        float* __restrict__ dx, uint16_t* __restrict__ dx_bf16,
        bool narrow_index) {
  ForEachChannelElement(
      rows * channels, channels, plane, narrow_index,
      [=](int64_t i, int64_t c) {
        const float x_hat =
            km::Normalized(InputAt(x, x_bf16, i), mean[c], inv_std[c]);
        const float value = km::BatchNormInputGradient(
            km::MaskedByRelu(InputAt(dy, dy_bf16, i), relu_output, i), x_hat,
            gamma[c] * inv_std[c], km::BatchMean(dbeta[c], rows),
            km::BatchMean(dgamma[c], rows));
        if (dx != nullptr) dx[i] = value;
        if (dx_bf16 != nullptr) dx_bf16[i] = bfloat16::RoundToBits(value);
      });
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    MaxPoolForwardKernel(const float* __restrict__ x, PoolGeometry g,
                         float* __restrict__ y, int32_t* __restrict__ where,
                         int64_t total) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    const int64_t c = i % g.channels;
    const int64_t ow = i / g.channels % g.out_width;
    const int64_t oh = i / (int64_t{g.channels} * g.out_width) % g.out_height;
    const int64_t b = i / (int64_t{g.channels} * g.out_width * g.out_height);
    y[i] = km::MaxPoolValue(x, g, b, oh, ow, c, where + i);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    MaxPoolBackwardKernel(const float* __restrict__ dy,
                          const int32_t* __restrict__ where, PoolGeometry g,
                          float* __restrict__ dx, int64_t total) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    const int64_t c = i % g.channels;
    const int64_t w = i / g.channels % g.width;
    const int64_t h = i / (int64_t{g.channels} * g.width) % g.height;
    const int64_t b = i / (int64_t{g.channels} * g.width * g.height);
    dx[i] = km::MaxPoolInputGradient(dy, where, g, b, h, w, c);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    GlobalAvgPoolForwardKernel(const float* __restrict__ x, int64_t total,
                               int spatial, int channels, bool nchw,
                               float* __restrict__ y) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    y[i] = nchw ? km::PlaneMean(x, i, spatial)
                : km::SpatialMean(x, i / channels, i % channels, spatial,
                                  channels);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    GlobalAvgPoolBackwardKernel(const float* __restrict__ dy, int64_t total,
                                int spatial, int channels, bool nchw,
                                float* __restrict__ dx) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < total; i += stride) {
    // dy[b, c]: for NCHW, i's plane (b·channels + c) is that index.
    const int64_t pooled =
        nchw ? i / spatial
             : i / (int64_t{spatial} * channels) * channels + i % channels;
    dx[i] = km::SpatialMeanGradient(dy[pooled], spatial);
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    AddKernel(float* __restrict__ y, const float* __restrict__ x,
              int64_t count) {
  const int64_t stride = GridStride<int64_t>();
  for (int64_t i = GridStrideFirst<int64_t>(); i < count; i += stride) {
    y[i] = km::Sum(y[i], x[i]);
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

cudaError_t ReluBackwardOfSum(cudaStream_t stream, const float* y,
                              const float* x, const uint16_t* x_bf16,
                              const float* dy, const uint16_t* dy_bf16,
                              float* out, int64_t count) {
  if (count <= 0) return cudaSuccess;
  ReluBackwardOfSumKernel<<<launch_config::PlanElementwise(count).blocks,
                            kThreadsPerBlock, 0, stream>>>(y, x, x_bf16, dy,
                                                           dy_bf16, out, count);
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

cudaError_t RoundToBfloat16(cudaStream_t stream, const float* in,
                            const NhwcWalk& walk, uint16_t* out) {
  const int64_t count = walk.count();
  if (count <= 0) return cudaSuccess;
  RoundToBfloat16Kernel<<<launch_config::PlanElementwise(count).blocks,
                          kThreadsPerBlock, 0, stream>>>(in, walk, out);
  return cudaGetLastError();
}

cudaError_t WidenFromBfloat16(cudaStream_t stream, const uint16_t* in,
                              const NhwcWalk& walk, float* out) {
  const int64_t count = walk.count();
  if (count <= 0) return cudaSuccess;
  WidenFromBfloat16Kernel<<<launch_config::PlanElementwise(count).blocks,
                            kThreadsPerBlock, 0, stream>>>(in, walk, out);
  return cudaGetLastError();
}

cudaError_t RoundToBfloat16InPlace(cudaStream_t stream, float* x,
                                   int64_t count) {
  if (count <= 0) return cudaSuccess;
  RoundInPlaceKernel<<<launch_config::PlanElementwise(count).blocks,
                       kThreadsPerBlock, 0, stream>>>(x, count);
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

cudaError_t Im2Col(cudaStream_t stream, const float* input,
                   const ConvGeometry& g, float* columns) {
  const int64_t total = g.column_rows() * g.column_cols();
  if (total <= 0) return cudaSuccess;
  Im2ColKernel<<<launch_config::PlanElementwise(total).blocks, kThreadsPerBlock,
                 0, stream>>>(input, g, columns, total);
  return cudaGetLastError();
}

cudaError_t Col2Im(cudaStream_t stream, const float* columns,
                   const ConvGeometry& g, float* input_grad) {
  const int64_t total = g.input_count();
  if (total <= 0) return cudaSuccess;
  Col2ImKernel<<<launch_config::PlanElementwise(total).blocks, kThreadsPerBlock,
                 0, stream>>>(columns, g, input_grad, total);
  return cudaGetLastError();
}

// A batch-norm pass is one or two launches: a channel-tile kernel (one
// block of kSumRowsTile × kSumRowsTile threads per kSumRowsTile channels)
// and an element-wise one; each returns the launch's error.
template <typename Kernel, typename... Args>
cudaError_t LaunchChannelTiles(cudaStream_t stream, int channels, Kernel kernel,
                               Args... args) {
  const dim3 threads(kSumRowsTile, kSumRowsTile);
  kernel<<<launch_config::SumRowsBlocks(channels), threads, 0, stream>>>(
      args...);
  return cudaGetLastError();
}

// A sliced plan's first pass: one block of kSumRowsTile × kSumRowsTile
// threads per (channel tile, row slice).
template <typename Kernel, typename Terms>
cudaError_t LaunchChannelSlices(cudaStream_t stream,
                                const launch_config::ChannelSumsLaunch& plan,
                                Kernel kernel, Terms terms, int64_t rows,
                                int channels, double* partials) {
  const dim3 threads(kSumRowsTile, kSumRowsTile);
  const dim3 blocks(plan.channel_tiles, plan.row_slices);
  kernel<<<blocks, threads, 0, stream>>>(terms, rows, plan.rows_per_slice,
                                         channels, partials);
  return cudaGetLastError();
}

// The NCHW plan's passes (launch_config::PlanPlaneSums): one block of
// kSumRowsThreadsPerBlock threads per (channel, image slice).
template <typename Kernel, typename Terms>
cudaError_t LaunchPlaneSlices(cudaStream_t stream,
                              const launch_config::PlaneSumsLaunch& plan,
                              Kernel kernel, Terms terms, int64_t images,
                              int64_t plane, double* partials) {
  const dim3 blocks(plan.channels, plan.image_slices);
  kernel<<<blocks, kSumRowsThreadsPerBlock, 0, stream>>>(
      terms, images, plan.images_per_slice, plan.channels, plane, partials);
  return cudaGetLastError();
}

template <typename Kernel, typename... Args>
cudaError_t LaunchPlanes(cudaStream_t stream, int channels, Kernel kernel,
                         Args... args) {
  kernel<<<channels, kSumRowsThreadsPerBlock, 0, stream>>>(args...);
  return cudaGetLastError();
}

template <typename Kernel, typename... Args>
cudaError_t LaunchChannelFinish(cudaStream_t stream, int channels,
                                Kernel kernel, Args... args) {
  kernel<<<launch_config::ChannelFinishBlocks(channels), kThreadsPerBlock, 0,
           stream>>>(args...);
  return cudaGetLastError();
}

// An element-wise batch-norm pass over `total` elements: the kernel takes the
// plan's narrow_index after `args`.
template <typename Kernel, typename... Args>
cudaError_t LaunchChannelElementwise(cudaStream_t stream, int64_t total,
                                     Kernel kernel, Args... args) {
  const launch_config::ElementwiseLaunch launch =
      launch_config::PlanElementwise(total);
  kernel<<<launch.blocks, kThreadsPerBlock, 0, stream>>>(args...,
                                                         launch.narrow_index);
  return cudaGetLastError();
}

cudaError_t BatchNormForwardTraining(
    cudaStream_t stream, const float* x, const uint16_t* x_bf16, int64_t rows,
    int channels, int64_t plane, const float* gamma, const float* beta,
    float momentum, float epsilon, float* y, float* saved_mean,
    float* saved_inv_std, float* running_mean, float* running_var,
    const float* residual, bool relu, uint16_t* bf16_copy,
    double* channel_partials) {
  if (rows <= 0 || channels <= 0 || plane <= 0) return cudaSuccess;
  const launch_config::ChannelSumsLaunch plan =
      launch_config::PlanChannelSums(rows, channels);
  const int64_t images = rows / plane;
  const launch_config::PlaneSumsLaunch planes =
      launch_config::PlanPlaneSums(images, channels, plane);
  cudaError_t error = cudaSuccess;
  if (plane > 1 && planes.sliced()) {
    error = LaunchPlaneSlices(
        stream, planes, BatchNormPlaneStatisticsSliceKernel,
        StatisticsTerms{x, x_bf16}, images, plane, channel_partials);
    if (error != cudaSuccess) return error;
    error = LaunchChannelFinish(
        stream, channels, BatchNormStatisticsFinishKernel,
        static_cast<const double*>(channel_partials), planes.image_slices, rows,
        channels, momentum, epsilon, saved_mean, saved_inv_std, running_mean,
        running_var);
  } else if (plane > 1) {
    error = LaunchPlanes(stream, channels, BatchNormPlaneStatisticsKernel, x,
                         x_bf16, images, channels, plane, momentum, epsilon,
                         saved_mean, saved_inv_std, running_mean, running_var);
  } else if (plan.sliced()) {
    error = LaunchChannelSlices(stream, plan, BatchNormStatisticsSliceKernel,
                                StatisticsTerms{x, x_bf16}, rows, channels,
                                channel_partials);
    if (error != cudaSuccess) return error;
    error = LaunchChannelFinish(
        stream, channels, BatchNormStatisticsFinishKernel,
        static_cast<const double*>(channel_partials), plan.row_slices, rows,
        channels, momentum, epsilon, saved_mean, saved_inv_std, running_mean,
        running_var);
  } else {
    error = LaunchChannelTiles(stream, channels, BatchNormStatisticsKernel, x,
                               x_bf16, rows, channels, momentum, epsilon,
                               saved_mean, saved_inv_std, running_mean,
                               running_var);
  }
  if (error != cudaSuccess) return error;
  const int64_t total = rows * channels;
  return LaunchChannelElementwise(
      stream, total, BatchNormApplyKernel, x, x_bf16, total, channels, plane,
      gamma, beta, saved_mean, saved_inv_std, y, residual, relu, bf16_copy);
}

cudaError_t BatchNormForwardInference(
    cudaStream_t stream, const float* x, const uint16_t* x_bf16, int64_t rows,
    int channels, int64_t plane, const float* gamma, const float* beta,
    const float* running_mean, const float* running_var, float epsilon,
    float* y, const float* residual, bool relu, uint16_t* bf16_copy) {
  if (rows <= 0 || channels <= 0 || plane <= 0) return cudaSuccess;
  const int64_t total = rows * channels;
  return LaunchChannelElementwise(stream, total, BatchNormInferenceKernel, x,
                                  x_bf16, total, channels, plane, gamma, beta,
                                  running_mean, running_var, epsilon, y,
                                  residual, relu, bf16_copy);
}

cudaError_t BatchNormBackward(
    cudaStream_t stream, const float* x, const uint16_t* x_bf16,
    const float* dy, const uint16_t* dy_bf16, int64_t rows, int channels,
    int64_t plane, const float* gamma, const float* saved_mean,
    const float* saved_inv_std, float* dx, float* dgamma, float* dbeta,
    const float* relu_output, uint16_t* dx_bf16, double* channel_partials) {
  if (rows <= 0 || channels <= 0 || plane <= 0) return cudaSuccess;
  const launch_config::ChannelSumsLaunch plan =
      launch_config::PlanChannelSums(rows, channels);
  const int64_t images = rows / plane;
  const launch_config::PlaneSumsLaunch planes =
      launch_config::PlanPlaneSums(images, channels, plane);
  const GradientTerms terms{x,          x_bf16,        dy,         dy_bf16,
                            saved_mean, saved_inv_std, relu_output};
  cudaError_t error = cudaSuccess;
  if (plane > 1 && planes.sliced()) {
    error =
        LaunchPlaneSlices(stream, planes, BatchNormPlaneGradientSumsSliceKernel,
                          terms, images, plane, channel_partials);
    if (error != cudaSuccess) return error;
    error =
        LaunchChannelFinish(stream, channels, BatchNormGradientSumsFinishKernel,
                            static_cast<const double*>(channel_partials),
                            planes.image_slices, channels, dgamma, dbeta);
  } else if (plane > 1) {
    error = LaunchPlanes(stream, channels, BatchNormPlaneGradientSumsKernel, x,
                         x_bf16, dy, dy_bf16, images, channels, plane,
                         saved_mean, saved_inv_std, relu_output, dgamma, dbeta);
  } else if (plan.sliced()) {
    error = LaunchChannelSlices(stream, plan, BatchNormGradientSumsSliceKernel,
                                terms, rows, channels, channel_partials);
    if (error != cudaSuccess) return error;
    error =
        LaunchChannelFinish(stream, channels, BatchNormGradientSumsFinishKernel,
                            static_cast<const double*>(channel_partials),
                            plan.row_slices, channels, dgamma, dbeta);
  } else {
    error = LaunchChannelTiles(stream, channels, BatchNormGradientSumsKernel, x,
                               x_bf16, dy, dy_bf16, rows, channels, saved_mean,
                               saved_inv_std, relu_output, dgamma, dbeta);
  }
  if (error != cudaSuccess) return error;
  return LaunchChannelElementwise(
      stream, rows * channels, BatchNormInputGradientKernel, x, x_bf16, dy,
      dy_bf16, rows, channels, plane, gamma, saved_mean, saved_inv_std, dgamma,
      dbeta, relu_output, dx, dx_bf16);
}

cudaError_t MaxPoolForward(cudaStream_t stream, const float* x,
                           const PoolGeometry& g, float* y, int32_t* where) {
  const int64_t total = g.output_count();
  if (total <= 0) return cudaSuccess;
  MaxPoolForwardKernel<<<launch_config::PlanElementwise(total).blocks,
                         kThreadsPerBlock, 0, stream>>>(x, g, y, where, total);
  return cudaGetLastError();
}

cudaError_t MaxPoolBackward(cudaStream_t stream, const float* dy,
                            const int32_t* where, const PoolGeometry& g,
                            float* dx) {
  const int64_t total = g.input_count();
  if (total <= 0) return cudaSuccess;
  MaxPoolBackwardKernel<<<launch_config::PlanElementwise(total).blocks,
                          kThreadsPerBlock, 0, stream>>>(dy, where, g, dx,
                                                         total);
  return cudaGetLastError();
}

cudaError_t GlobalAvgPoolForward(cudaStream_t stream, const float* x, int batch,
                                 int spatial, int channels, bool nchw,
                                 float* y) {
  const int64_t total = int64_t{batch} * channels;
  if (total <= 0 || spatial <= 0) return cudaSuccess;
  GlobalAvgPoolForwardKernel<<<launch_config::PlanElementwise(total).blocks,
                               kThreadsPerBlock, 0, stream>>>(
      x, total, spatial, channels, nchw, y);
  return cudaGetLastError();
}

cudaError_t GlobalAvgPoolBackward(cudaStream_t stream, const float* dy,
                                  int batch, int spatial, int channels,
                                  bool nchw, float* dx) {
  const int64_t total = int64_t{batch} * spatial * channels;
  if (total <= 0) return cudaSuccess;
  GlobalAvgPoolBackwardKernel<<<launch_config::PlanElementwise(total).blocks,
                                kThreadsPerBlock, 0, stream>>>(
      dy, total, spatial, channels, nchw, dx);
  return cudaGetLastError();
}

cudaError_t Add(cudaStream_t stream, float* y, const float* x, int64_t count) {
  if (count <= 0) return cudaSuccess;
  AddKernel<<<launch_config::PlanElementwise(count).blocks, kThreadsPerBlock, 0,
              stream>>>(y, x, count);
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace gradsync
