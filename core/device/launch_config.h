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

// GS_HOST_DEVICE: SliceRows is called by the kernels too.
#include "core/device/layer_geometry.h"

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

// --- Batch-norm channel sums: channel tiles × row slices ---------------------
// The per-channel sums of batch norm (mean and variance forward; the sums of
// dy and dy·x̂ backward) run over rows = batch · height · width, which is
// large exactly where channels are few (ResNet-18's first stage: 64 channels
// of batch · 32 · 32 rows). One block per kSumRowsTile channels, as SumRows
// does, then gives 2 to 16 blocks for the whole GPU, each walking every row.
// So the rows are also cut into slices, one block per (tile, slice) in a
// grid of channel_tiles × row_slices: each block leaves its slice's two sums
// per channel in a partials buffer (slice-major: partial[slice · channels +
// c]), and a second, element-wise kernel adds a channel's slices in slice
// order and finishes the channel as before. Every sum is in double and in a
// fixed order, so the result does not depend on scheduling.
//
// The grid aims at kChannelSumsTargetBlocks blocks (2 resident 1024-thread
// blocks per SM: 132 SMs on an H100 hold 264, so about two waves), but a
// slice keeps at least kMinRowsPerSlice rows, so that each of a block's
// kSumRowsTile row lanes adds several rows for the price of one partial. A
// plan with one slice needs no partials: the one-pass kernel writes the
// channel's result directly, as before.

inline constexpr int kChannelSumsTargetBlocks = 512;
inline constexpr int64_t kMinRowsPerSlice = int64_t{8} * kSumRowsTile;
// Partials per sum the device allocates once: row_slices · channels never
// exceeds it when row_slices > 1 (row_slices <= target / channel_tiles, and
// channels <= channel_tiles · kSumRowsTile).
inline constexpr int kMaxChannelSumPartials =
    kChannelSumsTargetBlocks * kSumRowsTile;
// CUDA's limit on gridDim.y.
inline constexpr int kMaxGridY = 65535;

struct ChannelSumsLaunch {
  int channel_tiles = 0;       // gridDim.x; 0 for an empty tensor
  int row_slices = 0;          // gridDim.y
  int64_t rows_per_slice = 0;  // every slice but the last has this many
  constexpr bool sliced() const { return row_slices > 1; }
};

constexpr ChannelSumsLaunch PlanChannelSums(int64_t rows, int channels) {
  ChannelSumsLaunch launch;
  if (rows <= 0 || channels <= 0) return launch;
  launch.channel_tiles = SumRowsBlocks(channels);
  const int64_t by_grid = kChannelSumsTargetBlocks / launch.channel_tiles;
  const int64_t by_rows = rows / kMinRowsPerSlice;
  int64_t slices = by_grid < by_rows ? by_grid : by_rows;
  if (slices < 1) slices = 1;
  launch.rows_per_slice = CeilDiv(rows, slices);
  // Rounding rows_per_slice up may leave the last slices empty: drop them.
  launch.row_slices = static_cast<int>(CeilDiv(rows, launch.rows_per_slice));
  return launch;
}

// The rows [begin, end) of slice `slice`, as the sliced kernels take them
// (blockIdx.y = slice).
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};
GS_HOST_DEVICE constexpr RowRange SliceRows(int64_t rows,
                                            int64_t rows_per_slice, int slice) {
  RowRange range;
  range.begin = static_cast<int64_t>(slice) * rows_per_slice;
  range.end =
      range.begin + rows_per_slice < rows ? range.begin + rows_per_slice : rows;
  return range;
}

// --- Batch-norm channel sums over NCHW activations: channels × image slices --
// Over [images × channels × plane] tensors (ActivationLayout::kNchw) one
// channel's values are runs of `plane` floats, one run per image: one block
// of kSumRowsThreadsPerBlock threads per (channel, slice of images), its
// threads walking the slice's runs as one flat range, so that neighbouring
// threads read neighbouring floats however short the runs are. The slices
// aim at the same kChannelSumsTargetBlocks blocks, keep at least
// kMinValuesPerPlaneSlice values, and leave their sums in the same
// slice-major partials as the NHWC plan (partial[slice · channels + c]), for
// the same finishing kernels; each block adds its threads' partials in a
// fixed tree, so the result does not depend on scheduling.
inline constexpr int64_t kMinValuesPerPlaneSlice =
    int64_t{8} * kSumRowsThreadsPerBlock;

struct PlaneSumsLaunch {
  int channels = 0;              // gridDim.x; 0 for an empty tensor
  int image_slices = 0;          // gridDim.y
  int64_t images_per_slice = 0;  // every slice but the last has this many
  constexpr bool sliced() const { return image_slices > 1; }
};

constexpr PlaneSumsLaunch PlanPlaneSums(int64_t images, int channels,
                                        int64_t plane) {
  PlaneSumsLaunch launch;
  if (images <= 0 || channels <= 0 || plane <= 0) return launch;
  launch.channels = channels;
  const int64_t by_grid = kChannelSumsTargetBlocks / channels;
  const int64_t by_values = images * plane / kMinValuesPerPlaneSlice;
  int64_t slices = by_grid < by_values ? by_grid : by_values;
  if (slices < 1) slices = 1;
  launch.images_per_slice = CeilDiv(images, slices);
  launch.image_slices =
      static_cast<int>(CeilDiv(images, launch.images_per_slice));
  return launch;
}

// Thread `thread`'s walk over images [begin, end) of one channel of an NCHW
// tensor (the kernels' PlaneSums): it visits flat positions thread,
// thread + kSumRowsThreadsPerBlock, ... of the images' runs of `plane`
// floats taken as one sequence, each as (image, pixel), stepping without a
// division; the block's threads together visit every position once.
struct PlaneWalk {
  int64_t image = 0;
  int64_t pixel = 0;
  int64_t plane = 1;
  int64_t image_step = 0;
  int64_t pixel_step = 0;

  GS_HOST_DEVICE PlaneWalk(int64_t begin, int64_t plane_floats, int thread)
      : image(begin + thread / plane_floats),
        pixel(thread % plane_floats),
        plane(plane_floats),
        image_step(kSumRowsThreadsPerBlock / plane_floats),
        pixel_step(kSumRowsThreadsPerBlock % plane_floats) {}
  GS_HOST_DEVICE void Next() {
    image += image_step;
    pixel += pixel_step;
    if (pixel >= plane) {
      pixel -= plane;
      ++image;
    }
  }
};

// The element-wise finishing kernel of a sliced plan: one thread per
// channel, kThreadsPerBlock to a block.
constexpr int ChannelFinishBlocks(int channels) {
  return channels <= 0 ? 0
                       : static_cast<int>(CeilDiv(channels, kThreadsPerBlock));
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
static_assert(kChannelSumsTargetBlocks <= kMaxGridY,
              "a channel-sums grid's slices must fit in gridDim.y");
static_assert(GridStride(kMaxElementwiseBlocks, kThreadsPerBlock) <
                  std::numeric_limits<int32_t>::max(),
              "the element-wise stride must fit in int");

}  // namespace launch_config
}  // namespace gradsync
