#include "core/device/null_device.h"

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::StatusOr<void*> NullDevice::AllocateBytes(size_t bytes) {
  return absl::UnimplementedError(absl::StrCat(
      "NullDevice ", name_, " has no memory (asked for ", bytes, " bytes)"));
}

absl::Status NullDevice::CopyToDevice(void*, const void*, size_t bytes) {
  return absl::UnimplementedError(absl::StrCat(
      "NullDevice ", name_, " has no memory (copy of ", bytes, " bytes in)"));
}

absl::Status NullDevice::CopyToHost(void*, const void*, size_t bytes) {
  return absl::UnimplementedError(absl::StrCat(
      "NullDevice ", name_, " has no memory (copy of ", bytes, " bytes out)"));
}

}  // namespace gradsync
