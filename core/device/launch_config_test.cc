// Tests of the CUDA kernels' launch shapes (launch_config.h) on the host: the
// loops of cuda_kernels.cu are replayed thread by thread over the grids these
// functions choose, so a shape that skips or repeats an element, or an index
// that overflows, fails here rather than on a GPU.
#include "core/device/launch_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace launch_config {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
// The stride of a capped element-wise grid: 4096 · 256 = 2^20.
constexpr int64_t kCappedStride =
    int64_t{kMaxElementwiseBlocks} * kThreadsPerBlock;

// How often each element of [0, count) is visited by the grid-stride loop of
// a grid of `blocks` × `threads`, thread by thread as on the GPU.
std::vector<int> VisitsOfGridStride(int64_t count, int blocks, int threads) {
  std::vector<int> visits(count, 0);
  const int64_t stride = GridStride(blocks, threads);
  for (int64_t first = 0; first < stride; ++first) {
    for (int64_t i = first; i < count; i += stride) ++visits[i];
  }
  return visits;
}

bool EachOnce(const std::vector<int>& visits) {
  for (int v : visits) {
    if (v != 1) return false;
  }
  return true;
}

TEST(LaunchConfigTest, ElementwiseGridVisitsEveryElementOnce) {
  for (int64_t count :
       {int64_t{1}, int64_t{2}, int64_t{255}, int64_t{256}, int64_t{257},
        int64_t{70000}, kCappedStride - 1, kCappedStride, kCappedStride + 1,
        3 * kCappedStride + 12345}) {
    const ElementwiseLaunch launch = PlanElementwise(count);
    ASSERT_GE(launch.blocks, 1) << count;
    EXPECT_TRUE(
        EachOnce(VisitsOfGridStride(count, launch.blocks, kThreadsPerBlock)))
        << count;
  }
}

TEST(LaunchConfigTest, ElementwiseGridIsOneThreadPerElementUpToTheCap) {
  EXPECT_EQ(PlanElementwise(0).blocks, 0);
  EXPECT_EQ(PlanElementwise(-5).blocks, 0);
  EXPECT_EQ(PlanElementwise(1).blocks, 1);
  EXPECT_EQ(PlanElementwise(256).blocks, 1);
  EXPECT_EQ(PlanElementwise(257).blocks, 2);
  EXPECT_EQ(PlanElementwise(kCappedStride).blocks, kMaxElementwiseBlocks);
  EXPECT_EQ(PlanElementwise(kCappedStride + 1).blocks, kMaxElementwiseBlocks);
  // No overflow on the way to the cap, even for counts no GPU holds.
  EXPECT_EQ(PlanElementwise(std::numeric_limits<int64_t>::max()).blocks,
            kMaxElementwiseBlocks);
  EXPECT_LE(int64_t{kMaxElementwiseBlocks}, kMaxGridX);
}

// The defect this header fixed: AddRowBias counted in int whenever the element
// count fit in int, but its loop computes i + stride before `i < count`
// stops it, so a count near 2^31 wrapped to a negative index (and kept
// writing). The cut-off is count - 1 + stride <= INT_MAX.
TEST(LaunchConfigTest, NarrowIndexCutOffLeavesRoomForTheStride) {
  const int64_t boundary = kIntMax - kCappedStride + 1;  // 2^31 - 2^20
  EXPECT_TRUE(PlanElementwise(boundary).narrow_index);
  EXPECT_FALSE(PlanElementwise(boundary + 1).narrow_index);
  EXPECT_FALSE(PlanElementwise(kIntMax).narrow_index);  // the old cut-off
  EXPECT_FALSE(PlanElementwise(kIntMax + 1).narrow_index);
  EXPECT_TRUE(PlanElementwise(1).narrow_index);
  EXPECT_TRUE(PlanElementwise(70000).narrow_index);

  // The thread that owns the last element takes one more step before the loop
  // ends; replay that step in int arithmetic.
  for (int64_t count : {boundary, boundary + 1, kIntMax}) {
    const ElementwiseLaunch launch = PlanElementwise(count);
    const int64_t stride = GridStride(launch.blocks, kThreadsPerBlock);
    int32_t next = 0;
    const bool overflows = __builtin_add_overflow(
        static_cast<int32_t>(count - 1), static_cast<int32_t>(stride), &next);
    EXPECT_EQ(launch.narrow_index, !overflows) << count;
  }
}

TEST(LaunchConfigTest, FitsNarrowIndexAtItsEdges) {
  EXPECT_TRUE(FitsNarrowIndex(0, 1));
  EXPECT_TRUE(FitsNarrowIndex(kIntMax, 1));  // last step lands on INT_MAX
  EXPECT_FALSE(FitsNarrowIndex(kIntMax, 2));
  EXPECT_TRUE(FitsNarrowIndex(1, kIntMax));
  EXPECT_FALSE(FitsNarrowIndex(2, kIntMax));
  EXPECT_FALSE(FitsNarrowIndex(1, kIntMax + 1));
  EXPECT_FALSE(FitsNarrowIndex(-1, 256));
  EXPECT_FALSE(FitsNarrowIndex(10, 0));
}

// AddRowBias's rows × cols as the launch sees them: a shape whose product is
// just over the cut-off takes the 64-bit kernel.
TEST(LaunchConfigTest, AddRowBiasShapesAroundTheCutOff) {
  const int cols = 1024;
  const int rows_at = static_cast<int>((kIntMax - kCappedStride + 1) / cols);
  EXPECT_TRUE(PlanElementwise(int64_t{rows_at} * cols).narrow_index);
  EXPECT_FALSE(PlanElementwise(int64_t{rows_at + 1} * cols).narrow_index);
}

// SumRows: block b, thread (x, y) sums column b·32 + x over rows y, y + 32,
// ...; every (row, column) is added exactly once.
TEST(LaunchConfigTest, SumRowsGridVisitsEveryEntryOnce) {
  for (auto [rows, cols] : {std::pair<int, int>{1, 1},
                            {1, 33},
                            {31, 10},
                            {32, 32},
                            {33, 64},
                            {100, 70},
                            {1000, 1}}) {
    const int blocks = SumRowsBlocks(cols);
    std::vector<int> visits(static_cast<size_t>(rows) * cols, 0);
    for (int b = 0; b < blocks; ++b) {
      for (int x = 0; x < kSumRowsTile; ++x) {
        const int64_t col = int64_t{b} * kSumRowsTile + x;
        if (col >= cols) continue;
        for (int y = 0; y < kSumRowsTile; ++y) {
          for (int64_t r = y; r < rows; r += kSumRowsTile) {
            ++visits[r * cols + col];
          }
        }
      }
    }
    EXPECT_TRUE(EachOnce(visits)) << rows << "x" << cols;
  }
  EXPECT_EQ(SumRowsBlocks(0), 0);
  EXPECT_EQ(SumRowsBlocks(32), 1);
  EXPECT_EQ(SumRowsBlocks(33), 2);
  // INT_MAX columns: no overflow in the count, and within CUDA's grid limit.
  EXPECT_EQ(SumRowsBlocks(std::numeric_limits<int>::max()), 67108864);
  EXPECT_LE(int64_t{SumRowsBlocks(std::numeric_limits<int>::max())}, kMaxGridX);
}

// SoftmaxCrossEntropy: warp w of block b starts at row b·8 + w and strides by
// the grid's warps; 20000 rows exceed 1024 blocks × 8 warps, so warps loop.
TEST(LaunchConfigTest, SoftmaxGridVisitsEveryRowOnce) {
  for (int rows : {1, 7, 8, 9, 300, 8192, 8193, 20000}) {
    const int blocks = SoftmaxBlocks(rows);
    ASSERT_GE(blocks, 1);
    ASSERT_LE(blocks, kMaxLossPartials);
    std::vector<int> visits(rows, 0);
    const int64_t stride = int64_t{blocks} * kSoftmaxRowsPerBlock;
    for (int b = 0; b < blocks; ++b) {
      for (int w = 0; w < kSoftmaxRowsPerBlock; ++w) {
        for (int64_t row = int64_t{b} * kSoftmaxRowsPerBlock + w; row < rows;
             row += stride) {
          ++visits[row];
        }
      }
    }
    EXPECT_TRUE(EachOnce(visits)) << rows;
  }
  EXPECT_EQ(SoftmaxBlocks(0), 0);
  EXPECT_EQ(SoftmaxBlocks(8), 1);
  EXPECT_EQ(SoftmaxBlocks(9), 2);
  EXPECT_EQ(SoftmaxBlocks(std::numeric_limits<int>::max()), kMaxLossPartials);
}

// The loss finalization's single block covers every partial the softmax grid
// can leave.
TEST(LaunchConfigTest, LossFinalizeCoversEveryPartial) {
  std::vector<int> visits(kMaxLossPartials, 0);
  for (int t = 0; t < kLossFinalizeThreads; ++t) {
    for (int i = t; i < kMaxLossPartials; i += kLossFinalizeThreads) {
      ++visits[i];
    }
  }
  EXPECT_TRUE(EachOnce(visits));
}

// Batch norm's channel sums: the sliced grid's blocks, replayed lane by lane
// as ChannelSumsSliceKernel walks them, add every (row, channel) once, and
// the partials of a slice fit the buffer the device allocates once.
TEST(LaunchConfigTest, ChannelSumsGridVisitsEveryElementOnce) {
  const std::vector<std::pair<int64_t, int>> shapes = {
      {1, 1},     {255, 3},    {256, 64},   {257, 64},  {4096, 33},
      {8192, 64}, {32768, 64}, {1000, 512}, {20000, 7}, {300, 4096}};
  for (const auto& [rows, channels] : shapes) {
    const ChannelSumsLaunch plan = PlanChannelSums(rows, channels);
    ASSERT_GE(plan.row_slices, 1) << rows << "x" << channels;
    std::vector<int> visits(rows * channels, 0);
    std::vector<int> partial_writes(int64_t{plan.row_slices} * channels, 0);
    for (int tile = 0; tile < plan.channel_tiles; ++tile) {
      for (int slice = 0; slice < plan.row_slices; ++slice) {
        const RowRange range = SliceRows(rows, plan.rows_per_slice, slice);
        for (int x = 0; x < kSumRowsTile; ++x) {
          const int64_t c = int64_t{tile} * kSumRowsTile + x;
          if (c >= channels) continue;
          for (int y = 0; y < kSumRowsTile; ++y) {
            for (int64_t r = range.begin + y; r < range.end;
                 r += kSumRowsTile) {
              ++visits[r * channels + c];
            }
          }
          ++partial_writes[int64_t{slice} * channels + c];
        }
      }
    }
    EXPECT_TRUE(EachOnce(visits)) << rows << "x" << channels;
    EXPECT_TRUE(EachOnce(partial_writes)) << rows << "x" << channels;
  }
}

// SliceRows' `slices` slices of `per_slice` cover [0, count) in order, none
// empty.
void ExpectSlicesCover(int64_t count, int64_t per_slice, int slices) {
  int64_t next = 0;
  for (int slice = 0; slice < slices; ++slice) {
    const RowRange range = SliceRows(count, per_slice, slice);
    EXPECT_EQ(range.begin, next);
    EXPECT_LT(range.begin, range.end);
    next = range.end;
  }
  EXPECT_EQ(next, count);
}

// The plan's properties over ResNet-18's batch-norm shapes (CIFAR form:
// 64, 128, 256, 512 channels at 32², 16², 8², 4² pixels) and extremes: slices
// are contiguous, in order and never empty; a sliced plan keeps at least
// kMinRowsPerSlice rows per slice and its partials within
// kMaxChannelSumPartials; the grid stays within CUDA's limits and the
// target; where the rows allow, it fills the GPU.
TEST(LaunchConfigTest, ChannelSumsPlanFillsTheGpuWithinItsBuffer) {
  std::vector<std::pair<int64_t, int>> shapes = {
      {1, 1}, {1, 100000}, {kIntMax, 1}, {int64_t{1} << 40, 64}};
  for (int64_t batch : {1, 16, 32, 128, 256, 1024}) {
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t side = 32 >> stage;
      shapes.push_back({batch * side * side, 64 << stage});
    }
  }
  for (const auto& [rows, channels] : shapes) {
    SCOPED_TRACE(testing::Message() << rows << " rows x " << channels);
    const ChannelSumsLaunch plan = PlanChannelSums(rows, channels);
    EXPECT_EQ(plan.channel_tiles, SumRowsBlocks(channels));
    ASSERT_GE(plan.row_slices, 1);
    EXPECT_LE(plan.row_slices, kMaxGridY);
    ExpectSlicesCover(rows, plan.rows_per_slice, plan.row_slices);
    const int64_t blocks = int64_t{plan.channel_tiles} * plan.row_slices;
    if (plan.sliced()) {
      EXPECT_GE(plan.rows_per_slice, kMinRowsPerSlice);
      EXPECT_LE(int64_t{plan.row_slices} * channels, kMaxChannelSumPartials);
      EXPECT_LE(blocks, kChannelSumsTargetBlocks);
    } else {
      EXPECT_EQ(plan.rows_per_slice, rows);
    }
    // Enough rows for the target: at least half of it (two resident blocks
    // per SM on a 132-SM GPU is 264).
    if (plan.channel_tiles <= kChannelSumsTargetBlocks &&
        rows >= kMinRowsPerSlice *
                    (kChannelSumsTargetBlocks / plan.channel_tiles)) {
      EXPECT_GE(blocks, kChannelSumsTargetBlocks / 2);
    }
  }
  // ResNet-18's first stage at batch 128 was 2 blocks unsliced.
  EXPECT_GE(int64_t{PlanChannelSums(128 * 32 * 32, 64).row_slices} * 2, 256);
  EXPECT_EQ(PlanChannelSums(0, 64).row_slices, 0);
  EXPECT_EQ(PlanChannelSums(64, 0).channel_tiles, 0);
  EXPECT_EQ(ChannelFinishBlocks(0), 0);
  EXPECT_EQ(ChannelFinishBlocks(64), 1);
  EXPECT_EQ(ChannelFinishBlocks(kThreadsPerBlock + 1), 2);
}

// The NCHW plan: its slices cover every image once, in order; a sliced plan
// fits the partials the device allocates and the grid's target, and the
// ResNet-18 shapes that have the values for it fill at least half the target.
TEST(LaunchConfigTest, PlaneSumsSliceImagesWithinThePartials) {
  for (int64_t batch : {1, 3, 16, 32, 128, 256, 1024}) {
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t side = 32 >> stage;
      const int channels = 64 << stage;
      const int64_t plane = side * side;
      SCOPED_TRACE(testing::Message()
                   << batch << " x " << channels << " x " << plane);
      const PlaneSumsLaunch plan = PlanPlaneSums(batch, channels, plane);
      EXPECT_EQ(plan.channels, channels);
      ASSERT_GE(plan.image_slices, 1);
      EXPECT_LE(plan.image_slices, kMaxGridY);
      ExpectSlicesCover(batch, plan.images_per_slice, plan.image_slices);
      const int64_t blocks = int64_t{channels} * plan.image_slices;
      if (plan.sliced()) {
        EXPECT_LE(blocks, kMaxChannelSumPartials);
        EXPECT_LE(blocks, kChannelSumsTargetBlocks);
        EXPECT_GE(plan.images_per_slice * plane, kMinValuesPerPlaneSlice);
      } else {
        EXPECT_EQ(plan.images_per_slice, batch);
      }
      if (channels <= kChannelSumsTargetBlocks &&
          batch * plane >=
              kMinValuesPerPlaneSlice * (kChannelSumsTargetBlocks / channels)) {
        EXPECT_GE(blocks, kChannelSumsTargetBlocks / 2);
      }
    }
  }
  EXPECT_EQ(PlanPlaneSums(0, 64, 16).image_slices, 0);
  EXPECT_EQ(PlanPlaneSums(8, 0, 16).channels, 0);
  EXPECT_EQ(PlanPlaneSums(8, 64, 0).image_slices, 0);
}

// A block's threads walk every (image, pixel) of a slice exactly once and
// nothing outside it, whatever the plane's size against the block's:
// smaller (ResNet's 4x4 and 8x8), dividing it or not, equal, larger
// (ImageNet's 112x112).
TEST(LaunchConfigTest, PlaneWalksVisitEverySliceElementOnce) {
  for (int64_t plane :
       {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{107}, int64_t{1000},
        int64_t{1024}, int64_t{1025}, int64_t{112 * 112}}) {
    for (const auto& [begin, end] :
         {std::pair<int64_t, int64_t>{0, 1}, {5, 9}, {2, 40}}) {
      SCOPED_TRACE(testing::Message() << "plane " << plane << ", images ["
                                      << begin << ", " << end << ")");
      std::vector<int> visits((end - begin) * plane, 0);
      int64_t outside = 0;
      for (int t = 0; t < kSumRowsThreadsPerBlock; ++t) {
        for (PlaneWalk walk(begin, plane, t); walk.image < end; walk.Next()) {
          if (walk.image < begin || walk.pixel < 0 || walk.pixel >= plane) {
            ++outside;
            continue;
          }
          ++visits[(walk.image - begin) * plane + walk.pixel];
        }
      }
      EXPECT_EQ(outside, 0);
      EXPECT_EQ(std::count(visits.begin(), visits.end(), 1),
                static_cast<int64_t>(visits.size()));
    }
  }
}

}  // namespace
}  // namespace launch_config
}  // namespace gradsync
