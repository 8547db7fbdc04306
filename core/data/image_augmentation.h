// Training-time augmentation of image samples, applied as a batch is built:
// the standard CIFAR recipe of a random 32×32 crop of the image padded by 4
// black pixels on every side, then a horizontal flip with probability 1/2
// (torchvision's RandomCrop(32, padding=4) and RandomHorizontalFlip()).
//
// Every random choice is a pure function of (seed, epoch, sample index in the
// training set), with no generator state carried between samples. So a
// sample is augmented the same way whichever rank reads it, in whichever
// batch, under every strategy and number of workers: N workers with batch b
// still see exactly the samples one worker with batch N·b sees, and a resumed
// run the ones the original would have seen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/dataset.h"

namespace gradsync {

enum class AugmentationMode {
  kNone,      // samples as stored
  kCropFlip,  // random crop after padding, random horizontal flip
};

// "none" or "crop_flip"; anything else is an error listing both.
absl::StatusOr<AugmentationMode> ParseAugmentationMode(absl::string_view name);
std::string AugmentationModeName(AugmentationMode mode);

struct AugmentationOptions {
  AugmentationMode mode = AugmentationMode::kNone;
  // kCropFlip: black pixels added on each side before the crop (4 in the
  // standard recipe; 0 leaves only the flip).
  int padding = 4;
};

// The choices for one sample: the crop's top-left corner in the padded image
// (each in [0, 2·padding]; padding, padding is the uncropped image) and
// whether the crop is mirrored left to right.
struct CropFlipDraw {
  int top = 0;
  int left = 0;
  bool flip = false;
};

// The draw of `sample` in `epoch` for `seed`: uniform over the (2·padding+1)²
// corners and the two flips.
CropFlipDraw DrawCropFlip(uint64_t seed, int64_t epoch, int64_t sample,
                          int padding);

// Writes a data set's training samples, augmented or not, into a batch. Holds
// a pointer to the data set, which must outlive it.
class ImageAugmentation {
 public:
  // Refuses kCropFlip on a data set without an image shape (channels, height,
  // width), or a negative padding, naming the data set.
  static absl::StatusOr<ImageAugmentation> Create(
      const AugmentationOptions& options, const Dataset& data, uint64_t seed);

  // Writes row `sample` of the data set as augmented for `epoch` into
  // out[0 .. feature_dim). With kNone, a copy of the row.
  void Write(int64_t sample, int64_t epoch, float* out) const;

  AugmentationMode mode() const { return options_.mode; }

 private:
  ImageAugmentation(const AugmentationOptions& options, const Dataset& data,
                    uint64_t seed, std::vector<float> black);

  AugmentationOptions options_;
  const Dataset* data_;
  uint64_t seed_;
  // Per channel: the stored value of a black pixel (0 before normalisation),
  // which is what the padding is made of.
  std::vector<float> black_;
};

}  // namespace gradsync
