// The launch shapes of the CUDA kernels (cuda_kernels.cu) as plain C++: how
// many blocks of how many threads, how far a grid-stride loop jumps, and when
// a 32-bit index is safe. cuda_kernels.cu takes every shape from here, and
// launch_config_test.cc checks them on any machine (every element visited
// once, grids within the cap and CUDA's limits, no index overflow), since no
// GPU is lent to this project's machines to find out otherwise.
//
// A grid-stride loop, as the kernels write it:
//   for (Index i = first; i < count; i += stride) ...
// with first = blockIdx.x · blockDim.x + threadIdx.x < stride and stride =
// blockDim.x · gridDim.x. Its largest value is not count - 1 but the index
// after a thread's last element, (count - 1) + stride at most, computed before
// `i < count` ends the loop: that is what must fit in Index.
#pragma once

#include <cstdint>
#include <limits>

namespace gradsync {
namespace launch_config {

inline constexpr int kWarpSize = 32;

// Threads per block of the element-wise, softmax and loss kernels, and their
// __launch_bounds__. 256 leaves the block scheduler room for 8 blocks per SM.
inline constexpr int kThreadsPerBlock = 256;

// The element-wise grid's cap: 132 SMs (H100 SXM; 108 on an A100) × 8
// resident 256-thread blocks is about 1056 blocks, so 4096 fills the GPU
// several times over while a large buffer's blocks stay cheap to schedule (the
// grid-stride loop covers the rest).
inline constexpr int kMaxElementwiseBlocks = 4096;

// CUDA's limit on gridDim.x (compute capability 3.0 and later).
inline constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();

// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b.
constexpr int64_t CeilDiv(int64_t a, int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

// --- Element-wise kernels (grid-stride loops) ------------------------------

struct ElementwiseLaunch {
  int blocks = 0;  // of kThreadsPerBlock threads; 0 for an empty range
  // Whether the loop may count in int: 32-bit division and modulo (AddRowBias
  // takes i % cols) are several times cheaper than 64-bit ones on the GPU.
  bool narrow_index = false;
};

// The distance one grid-stride step jumps: every thread of the grid.
constexpr int64_t GridStride(int blocks, int threads_per_block) {
  return static_cast<int64_t>(blocks) * threads_per_block;
}

// Whether every value of a grid-stride loop over [0, count) with this stride,
// (count - 1) + stride included, fits in int.
constexpr bool FitsNarrowIndex(int64_t count, int64_t stride) {
  return count >= 0 && stride > 0 &&
         stride <= std::numeric_limits<int32_t>::max() &&
         count <= std::numeric_limits<int32_t>::max() - stride + 1;
}

// One thread per element up to the cap; narrow_index where it is safe.
constexpr ElementwiseLaunch PlanElementwise(int64_t count) {
  ElementwiseLaunch launch;
  if (count <= 0) return launch;
  const int64_t blocks = CeilDiv(count, kThreadsPerBlock);
  launch.blocks = static_cast<int>(
      blocks < kMaxElementwiseBlocks ? blocks : kMaxElementwiseBlocks);
  launch.narrow_index =
      FitsNarrowIndex(count, GridStride(launch.blocks, kThreadsPerBlock));
  return launch;
}

// --- SumRows: one block per kSumRowsTile columns ----------------------------
// Threads (x, y) of a kSumRowsTile × kSumRowsTile block: x picks the column
// (consecutive threads, consecutive addresses), y the first row, and each
// thread adds every kSumRowsTile-th row from there. The kernel counts rows
// and columns in int64_t: rows + kSumRowsTile and the last block's columns
// may pass INT_MAX where rows or cols is near it.

inline constexpr int kSumRowsTile = 32;
inline constexpr int kSumRowsThreadsPerBlock = kSumRowsTile * kSumRowsTile;

constexpr int SumRowsBlocks(int cols) {
  return cols <= 0 ? 0 : static_cast<int>(CeilDiv(cols, kSumRowsTile));
}

// --- SoftmaxCrossEntropy: one warp per row ----------------------------------
// Each block of kThreadsPerBlock threads has kSoftmaxRowsPerBlock warps; warp
// w of block b takes rows b·kSoftmaxRowsPerBlock + w, then strides by the
// grid's warp count (the kernel counts rows in int64_t). Each block leaves
// one partial loss sum, so the grid is capped at kMaxLossPartials blocks, the
// size of the partials buffer the device allocates once.

inline constexpr int kSoftmaxRowsPerBlock = kThreadsPerBlock / kWarpSize;
inline constexpr int kMaxLossPartials = 1024;

constexpr int SoftmaxBlocks(int rows) {
  if (rows <= 0) return 0;
  const int64_t blocks = CeilDiv(rows, kSoftmaxRowsPerBlock);
  return static_cast<int>(blocks < kMaxLossPartials ? blocks
                                                    : kMaxLossPartials);
}

// The loss finalization is one block of kThreadsPerBlock threads striding
// over at most kMaxLossPartials partial sums.
inline constexpr int kLossFinalizeThreads = kThreadsPerBlock;

static_assert(kThreadsPerBlock % kWarpSize == 0,
              "softmax warps must fill a block");
static_assert(kSumRowsThreadsPerBlock <= 1024,
              "CUDA blocks have at most 1024 threads");
static_assert(GridStride(kMaxElementwiseBlocks, kThreadsPerBlock) <
                  std::numeric_limits<int32_t>::max(),
              "the element-wise stride must fit in int");

}  // namespace launch_config
}  // namespace gradsync
