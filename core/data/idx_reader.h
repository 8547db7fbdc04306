// Reader for the IDX format of MNIST-style data sets (plain or gzip, through
// zlib). Validates the magic number, element type, dimensions and length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // unsigned bytes (type 0x08), row-major
};

// Reads `path`; gzip is detected by its magic bytes, not the file name.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

}  // namespace gradsync
