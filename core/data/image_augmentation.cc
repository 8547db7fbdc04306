// Crop-and-flip augmentation, computed per output pixel so that no padded
// copy of the image is ever built.
#include "core/data/image_augmentation.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gradsync {
namespace {

// splitmix64's finaliser: a bijection of 64-bit values whose outputs look
// independent for neighbouring inputs, so chaining it over (seed, epoch,
// sample) gives every sample of every epoch its own draw.
uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Keeps the augmentation's draws apart from other users of the same --seed
// (parameter initialisation, the sampler's shuffles): "augment" in ASCII.
constexpr uint64_t kAugmentationStream = 0x61756720656E74ull;

}  // namespace

absl::StatusOr<AugmentationMode> ParseAugmentationMode(absl::string_view name) {
  if (name == "none") return AugmentationMode::kNone;
  if (name == "crop_flip") return AugmentationMode::kCropFlip;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown augmentation \"", name,
                   "\"; choose none or crop_flip (random crop after "
                   "padding, random horizontal flip)"));
}

std::string AugmentationModeName(AugmentationMode mode) {
  switch (mode) {
    case AugmentationMode::kNone:
      return "none";
    case AugmentationMode::kCropFlip:
      return "crop_flip";
  }
  return "unknown";
}

CropFlipDraw DrawCropFlip(uint64_t seed, int64_t epoch, int64_t sample,
                          int padding) {
  const uint64_t z =
      Mix(Mix(Mix(seed ^ kAugmentationStream) ^ static_cast<uint64_t>(epoch)) ^
          static_cast<uint64_t>(sample));
  // One 64-bit value holds all three choices; taking them by division keeps
  // the bias below positions / 2^64, far beneath anything measurable.
  const uint64_t positions = 2 * static_cast<uint64_t>(padding) + 1;
  CropFlipDraw draw;
  draw.top = static_cast<int>(z % positions);
  draw.left = static_cast<int>((z / positions) % positions);
  draw.flip = ((z / positions / positions) & 1) != 0;
  return draw;
}

absl::StatusOr<ImageAugmentation> ImageAugmentation::Create(
    const AugmentationOptions& options, const Dataset& data, uint64_t seed) {
  std::vector<float> black;
  if (options.mode == AugmentationMode::kCropFlip) {
    if (data.channels < 1 || data.height < 1 || data.width < 1 ||
        int64_t{data.channels} * data.height * data.width != data.feature_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "augmentation crop_flip needs images, but ", data.name,
          " has no image shape (channels ", data.channels, ", height ",
          data.height, ", width ", data.width, " for ", data.feature_dim,
          " features); use --augment=none"));
    }
    if (options.padding < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "augmentation padding ", options.padding, " must be >= 0"));
    }
    black.assign(data.channels, 0.0f);
    if (!data.channel_mean.empty()) {
      if (data.channel_mean.size() != static_cast<size_t>(data.channels) ||
          data.channel_std.size() != static_cast<size_t>(data.channels)) {
        return absl::InvalidArgumentError(
            absl::StrCat(data.name, " has ", data.channels, " channels but ",
                         data.channel_mean.size(), " means and ",
                         data.channel_std.size(), " standard deviations"));
      }
      for (int c = 0; c < data.channels; ++c) {
        black[c] = -data.channel_mean[c] / data.channel_std[c];
      }
    }
  }
  return ImageAugmentation(options, data, seed, std::move(black));
}

ImageAugmentation::ImageAugmentation(const AugmentationOptions& options,
                                     const Dataset& data, uint64_t seed,
                                     std::vector<float> black)
    : options_(options), data_(&data), seed_(seed), black_(std::move(black)) {}

void ImageAugmentation::Write(int64_t sample, int64_t epoch, float* out) const {
  const float* row = data_->row(sample);
  if (options_.mode == AugmentationMode::kNone) {
    std::copy_n(row, data_->feature_dim, out);
    return;
  }
  const int height = data_->height;
  const int width = data_->width;
  const int padding = options_.padding;
  const CropFlipDraw draw = DrawCropFlip(seed_, epoch, sample, padding);
  // Output pixel (y, x) is padded pixel (y + top, x' + left), where x' is x
  // or its mirror; in the source that is (y + top - padding, ...).
  const int dy = draw.top - padding;
  const int dx = draw.left - padding;
  for (int c = 0; c < data_->channels; ++c) {
    const float* plane = row + int64_t{c} * height * width;
    float* out_plane = out + int64_t{c} * height * width;
    for (int y = 0; y < height; ++y) {
      const int source_y = y + dy;
      float* out_row = out_plane + int64_t{y} * width;
      if (source_y < 0 || source_y >= height) {
        std::fill_n(out_row, width, black_[c]);
        continue;
      }
      const float* source_row = plane + int64_t{source_y} * width;
      for (int x = 0; x < width; ++x) {
        const int cropped_x = draw.flip ? width - 1 - x : x;
        const int source_x = cropped_x + dx;
        out_row[x] = source_x >= 0 && source_x < width ? source_row[source_x]
                                                       : black_[c];
      }
    }
  }
}

}  // namespace gradsync
