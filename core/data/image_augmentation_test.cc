// Tests for crop-and-flip augmentation: the draws' range and spread, their
// determinism, the pixels against a reference that pads, crops and flips
// explicitly, the black padding of normalised data, and identity when off.
#include "core/data/image_augmentation.h"

#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// A 2-channel 5×6 image set (not square, so height and width cannot be
// swapped unnoticed) whose values are all distinct and nonzero.
Dataset SmallImages(int64_t size) {
  Dataset data;
  data.name = "small-images";
  data.size = size;
  data.channels = 2;
  data.height = 5;
  data.width = 6;
  data.feature_dim = 2 * 5 * 6;
  data.num_classes = 2;
  for (int64_t i = 0; i < size; ++i) {
    data.labels.push_back(i % 2);
    for (int f = 0; f < data.feature_dim; ++f) {
      data.features.push_back(1000.0f * (i + 1) + f);
    }
  }
  return data;
}

// The recipe written out the slow way: build the padded image, cut the crop
// at the draw's corner, mirror it if drawn.
std::vector<float> Reference(const Dataset& data, int64_t sample,
                             const CropFlipDraw& draw, int padding,
                             const std::vector<float>& black) {
  const int h = data.height, w = data.width;
  const int ph = h + 2 * padding, pw = w + 2 * padding;
  std::vector<float> out(data.feature_dim);
  for (int c = 0; c < data.channels; ++c) {
    std::vector<float> padded(ph * pw, black[c]);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        padded[(y + padding) * pw + x + padding] =
            data.row(sample)[(c * h + y) * w + x];
      }
    }
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const float v = padded[(y + draw.top) * pw + x + draw.left];
        const int out_x = draw.flip ? w - 1 - x : x;
        out[(c * h + y) * w + out_x] = v;
      }
    }
  }
  return out;
}

TEST(ImageAugmentationTest, ParsesTheModeNames) {
  EXPECT_EQ(*ParseAugmentationMode("none"), AugmentationMode::kNone);
  EXPECT_EQ(*ParseAugmentationMode("crop_flip"), AugmentationMode::kCropFlip);
  EXPECT_EQ(AugmentationModeName(AugmentationMode::kCropFlip), "crop_flip");
  const absl::Status status = ParseAugmentationMode("flip").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("none or crop_flip"));
}

TEST(ImageAugmentationTest, DrawsCoverEveryCornerAndBothFlipsWithinBounds) {
  constexpr int kPadding = 4;
  std::set<int> tops, lefts;
  int flips = 0, draws = 0;
  int corner_counts[9][9] = {};
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    for (int64_t sample = 0; sample < 4000; ++sample) {
      const CropFlipDraw draw = DrawCropFlip(7, epoch, sample, kPadding);
      ASSERT_GE(draw.top, 0);
      ASSERT_LE(draw.top, 2 * kPadding);
      ASSERT_GE(draw.left, 0);
      ASSERT_LE(draw.left, 2 * kPadding);
      tops.insert(draw.top);
      lefts.insert(draw.left);
      ++corner_counts[draw.top][draw.left];
      flips += draw.flip;
      ++draws;
    }
  }
  EXPECT_EQ(tops.size(), 9u);
  EXPECT_EQ(lefts.size(), 9u);
  // 20000 draws: each of the 81 corners expects 247 (sd about 16), a flip
  // 10000 (sd 71); bounds of about 6 sd fail only on a real bias.
  for (int t = 0; t < 9; ++t) {
    for (int l = 0; l < 9; ++l) {
      EXPECT_GT(corner_counts[t][l], 150) << t << "," << l;
      EXPECT_LT(corner_counts[t][l], 350) << t << "," << l;
    }
  }
  EXPECT_GT(flips, draws / 2 - 450);
  EXPECT_LT(flips, draws / 2 + 450);
}

TEST(ImageAugmentationTest, DrawIsAFunctionOfSeedEpochAndSampleOnly) {
  int same_across_epochs = 0, same_across_seeds = 0;
  for (int64_t sample = 0; sample < 200; ++sample) {
    const CropFlipDraw a = DrawCropFlip(1, 3, sample, 4);
    const CropFlipDraw b = DrawCropFlip(1, 3, sample, 4);
    EXPECT_EQ(a.top, b.top);
    EXPECT_EQ(a.left, b.left);
    EXPECT_EQ(a.flip, b.flip);
    const CropFlipDraw next_epoch = DrawCropFlip(1, 4, sample, 4);
    const CropFlipDraw other_seed = DrawCropFlip(2, 3, sample, 4);
    same_across_epochs += a.top == next_epoch.top &&
                          a.left == next_epoch.left &&
                          a.flip == next_epoch.flip;
    same_across_seeds += a.top == other_seed.top && a.left == other_seed.left &&
                         a.flip == other_seed.flip;
  }
  // Independent draws coincide with probability 1/162: about 1 in 200.
  EXPECT_LT(same_across_epochs, 10);
  EXPECT_LT(same_across_seeds, 10);
}

TEST(ImageAugmentationTest, PixelsMatchPadCropFlipDoneExplicitly) {
  const Dataset data = SmallImages(50);
  for (int padding : {0, 1, 4}) {
    absl::StatusOr<ImageAugmentation> augmentation = ImageAugmentation::Create(
        {AugmentationMode::kCropFlip, padding}, data, /*seed=*/11);
    ASSERT_TRUE(augmentation.ok()) << augmentation.status();
    std::vector<float> out(data.feature_dim);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      for (int64_t sample = 0; sample < data.size; ++sample) {
        augmentation->Write(sample, epoch, out.data());
        const CropFlipDraw draw = DrawCropFlip(11, epoch, sample, padding);
        EXPECT_EQ(out, Reference(data, sample, draw, padding, {0.0f, 0.0f}))
            << "padding " << padding << " epoch " << epoch << " sample "
            << sample << " top " << draw.top << " left " << draw.left
            << " flip " << draw.flip;
      }
    }
  }
}

TEST(ImageAugmentationTest, FlipMirrorsRowsAndCentreCropKeepsTheImage) {
  // With padding 0 the only choice is the flip: the output is the image or
  // its mirror, never anything else.
  const Dataset data = SmallImages(40);
  absl::StatusOr<ImageAugmentation> augmentation =
      ImageAugmentation::Create({AugmentationMode::kCropFlip, 0}, data, 5);
  ASSERT_TRUE(augmentation.ok());
  std::vector<float> out(data.feature_dim);
  int mirrored = 0;
  for (int64_t sample = 0; sample < data.size; ++sample) {
    augmentation->Write(sample, 0, out.data());
    const bool flip = DrawCropFlip(5, 0, sample, 0).flip;
    mirrored += flip;
    for (int c = 0; c < 2; ++c) {
      for (int y = 0; y < 5; ++y) {
        for (int x = 0; x < 6; ++x) {
          const int source_x = flip ? 5 - x : x;
          ASSERT_EQ(out[(c * 5 + y) * 6 + x],
                    data.row(sample)[(c * 5 + y) * 6 + source_x]);
        }
      }
    }
  }
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, data.size);
}

TEST(ImageAugmentationTest, PaddingIsBlackBeforeNormalisation) {
  Dataset data = SmallImages(60);
  data.channel_mean = {0.5f, 0.25f};
  data.channel_std = {0.25f, 0.5f};
  const std::vector<float> black = {-2.0f, -0.5f};
  absl::StatusOr<ImageAugmentation> augmentation =
      ImageAugmentation::Create({AugmentationMode::kCropFlip, 4}, data, 3);
  ASSERT_TRUE(augmentation.ok());
  std::vector<float> out(data.feature_dim);
  bool saw_padding = false;
  for (int64_t sample = 0; sample < data.size; ++sample) {
    augmentation->Write(sample, 2, out.data());
    const CropFlipDraw draw = DrawCropFlip(3, 2, sample, 4);
    ASSERT_EQ(out, Reference(data, sample, draw, 4, black));
    saw_padding |= draw.top != 4 || draw.left != 4;
  }
  EXPECT_TRUE(saw_padding);
}

TEST(ImageAugmentationTest, OrderOfCallsDoesNotMatter) {
  // A rank may read sample 7 before or after sample 3, in one batch or
  // another: the result must not change.
  const Dataset data = SmallImages(10);
  absl::StatusOr<ImageAugmentation> augmentation =
      ImageAugmentation::Create({AugmentationMode::kCropFlip, 4}, data, 9);
  ASSERT_TRUE(augmentation.ok());
  std::vector<std::vector<float>> forward(10, std::vector<float>(60));
  std::vector<std::vector<float>> backward(10, std::vector<float>(60));
  for (int64_t s = 0; s < 10; ++s) augmentation->Write(s, 1, forward[s].data());
  for (int64_t s = 9; s >= 0; --s)
    augmentation->Write(s, 1, backward[s].data());
  EXPECT_EQ(forward, backward);
}

TEST(ImageAugmentationTest, NoneCopiesTheRowAndWorksOnFlatData) {
  Dataset flat = SmallImages(5);
  flat.channels = flat.height = flat.width = 0;
  absl::StatusOr<ImageAugmentation> augmentation =
      ImageAugmentation::Create({AugmentationMode::kNone, 4}, flat, 1);
  ASSERT_TRUE(augmentation.ok());
  std::vector<float> out(flat.feature_dim);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t s = 0; s < flat.size; ++s) {
      augmentation->Write(s, epoch, out.data());
      EXPECT_EQ(
          out, std::vector<float>(flat.row(s), flat.row(s) + flat.feature_dim));
    }
  }
}

TEST(ImageAugmentationTest, CropFlipNeedsAnImageShape) {
  Dataset flat = SmallImages(5);
  flat.channels = flat.height = flat.width = 0;
  flat.name = "synthetic";
  absl::Status status =
      ImageAugmentation::Create({AugmentationMode::kCropFlip, 4}, flat, 1)
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              testing::AllOf(HasSubstr("synthetic"), HasSubstr("--augment")));

  status = ImageAugmentation::Create({AugmentationMode::kCropFlip, -1},
                                     SmallImages(5), 1)
               .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradsync
