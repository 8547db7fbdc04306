// CIFAR-10 from its binary version (the "CIFAR-10 binary version (suitable for
// C programs)" archive, cifar-10-binary.tar.gz, published on the CIFAR page of
// the University of Toronto, https://www.cs.toronto.edu/~kriz/cifar.html).
//
// The archive unpacks into cifar-10-batches-bin/ with data_batch_1.bin ..
// data_batch_5.bin (50,000 training images) and test_batch.bin (10,000 test
// images). Every file is a plain sequence of 3073-byte records: one label byte
// (0..9), then 3072 pixel bytes, the 1024 red values of the 32×32 image row by
// row, then the green, then the blue: already CHW, the layout of Dataset's
// rows.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/dataset.h"

namespace gradsync {

inline constexpr int kCifar10Channels = 3;
inline constexpr int kCifar10Height = 32;
inline constexpr int kCifar10Width = 32;
inline constexpr int kCifar10Classes = 10;
inline constexpr int kCifar10PixelBytes =
    kCifar10Channels * kCifar10Height * kCifar10Width;              // 3072
inline constexpr int kCifar10RecordBytes = 1 + kCifar10PixelBytes;  // 3073

// Per-channel (R, G, B) mean and standard deviation of the pixels of the
// 50,000 training images after scaling to [0, 1], over all images and
// positions: 125.3/255, 123.0/255, 113.9/255 and 63.0/255, 62.1/255,
// 66.7/255 in fb.resnet.torch's datasets/cifar10.lua, to more digits as
// recomputed in several public threads. The (0.2023, 0.1994, 0.2010) often
// copied from kuangliu/pytorch-cifar is the mean of per-image standard
// deviations instead, a different statistic.
inline constexpr std::array<float, 3> kCifar10Mean = {0.49139968f, 0.48215841f,
                                                      0.44653091f};
inline constexpr std::array<float, 3> kCifar10Std = {0.24703223f, 0.24348513f,
                                                     0.26158784f};

// Reads the training batches and the test batch from `dir`, or from
// `dir`/cifar-10-batches-bin when `dir` holds the unpacked archive's folder.
// Pixels become x / 255 and then (x - mean[c]) / std[c] with the constants
// above, so a black pixel is -mean/std (Dataset::normalization records this).
//
// Errors: a missing file names the path, the expected layout and where the
// data set is published; a file whose size is not a positive multiple of 3073
// bytes (names the incomplete record), or with a label above 9 (names the
// record), is refused. Nothing is returned half-loaded.
absl::StatusOr<DatasetPair> LoadCifar10(const std::string& dir);

}  // namespace gradsync
