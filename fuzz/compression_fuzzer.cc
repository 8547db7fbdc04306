// libFuzzer target: ParseEncodedBucket (core/sync/compression.h), which the
// ring's all-gather runs on every peer's bytes. Checks, besides ASan/UBSan's:
// an accepted encoding re-serializes to exactly the bytes parsed, its
// SerializedBytes is their length, and decoding it into a bucket of its
// numel never fails (the parser already refused what AddDecoded would).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/sync/compression.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gradsync::EncodedBucket> parsed =
      gradsync::ParseEncodedBucket(bytes);
  if (!parsed.ok()) return 0;
  std::string again;
  gradsync::AppendSerialized(*parsed, &again);
  if (again != bytes) std::abort();
  if (gradsync::SerializedBytes(*parsed) != static_cast<int64_t>(size)) {
    std::abort();
  }
  // A sparse encoding may name a numel far beyond its bytes; decoding needs
  // that many floats, so only modest ones are decoded here.
  if (parsed->numel <= (int64_t{1} << 20)) {
    std::vector<float> bucket(parsed->numel, 0.0f);
    if (!gradsync::AddDecoded(*parsed, absl::MakeSpan(bucket)).ok()) {
      std::abort();
    }
  }
  return 0;
}
