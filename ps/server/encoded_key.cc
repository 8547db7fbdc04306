// A key's encoded pushes and results on the server (see encoded_key.h).
#include "ps/server/encoded_key.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradsync {

EncodedKey::EncodedKey(int64_t numel, KeyEncoding encoding, int num_workers)
    : numel_(numel), encoding_(encoding), pushes_(num_workers) {}

absl::StatusOr<std::optional<std::vector<float>>> EncodedKey::AddPart(
    const ps::KeyPart& part, const std::string& context) {
  const ps::Header& header = part.header();
  const int64_t size = part.encoded_bytes();
  const int64_t bytes = static_cast<int64_t>(part.data().size());
  // Bounded before anything is buffered: a push can only be this large.
  if (size < 1 || size > MaxEncodedBytes(numel_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": an encoding of ", size, " bytes for a key of ", numel_,
        " floats (at most ", MaxEncodedBytes(numel_), ")"));
  }
  absl::MutexLock lock(&mu_);
  Assembly& push = pushes_[header.rank()];
  const bool first = push.step < 0;
  if (!first && (push.step != header.step() || push.size != size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": a part of a ", size, "-byte encoding while the worker's ",
        push.size, "-byte push of step ", push.step, " is unfinished"));
  }
  const int64_t received = first ? 0 : static_cast<int64_t>(push.bytes.size());
  if (part.offset() != received || bytes < 1 || bytes > size - received) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": encoded part [", part.offset(), ", ",
        part.offset() + bytes, ") of a ", size,
        "-byte encoding does not continue the ", received,
        " bytes received (parts come in order and fill the encoding)"));
  }
  if (received + bytes < size) {
    if (first) {
      push.step = header.step();
      push.size = size;
      push.bytes.reserve(size);
    }
    push.bytes.append(part.data());
    return std::optional<std::vector<float>>();
  }
  // The last part: checked whole before the key sees any of it.
  std::string whole;
  absl::string_view all = part.data();
  if (!first) {
    whole = push.bytes;
    whole.append(part.data());
    all = whole;
  }
  absl::StatusOr<EncodedBucket> parsed = ParseKeyPush(all, encoding_, numel_);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", parsed.status().message()));
  }
  std::vector<float> floats(numel_, 0.0f);
  absl::Status decoded = AddDecoded(*parsed, absl::MakeSpan(floats));
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", decoded.message()));
  }
  push = Assembly();
  return std::optional<std::vector<float>>(std::move(floats));
}

absl::StatusOr<const std::string*> EncodedKey::ResultOf(
    int64_t step, ReadFloats read_floats) {
  if (step < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no encoded result for step ", step));
  }
  Result& result = results_[step % 2];
  if (result.step != step) {
    absl::StatusOr<std::vector<float>> floats = read_floats();
    if (!floats.ok()) return floats.status();
    result.bytes = EncodeKeyResult(*floats, encoding_);
    result.step = step;
  }
  return &result.bytes;
}

absl::StatusOr<int64_t> EncodedKey::ResultBytes(int64_t step,
                                                ReadFloats read_floats) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const std::string*> result = ResultOf(step, read_floats);
  if (!result.ok()) return result.status();
  return static_cast<int64_t>((*result)->size());
}

absl::StatusOr<int64_t> EncodedKey::ReadResult(
    int64_t step, int64_t offset, int64_t max_bytes, ReadFloats read_floats,
    absl::FunctionRef<char*(int64_t bytes)> place) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const std::string*> result = ResultOf(step, read_floats);
  if (!result.ok()) return result.status();
  const int64_t size = static_cast<int64_t>((*result)->size());
  if (offset < 0 || offset >= size || max_bytes < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("encoded result of step ", step, " from byte ", offset,
                     " is not available (it has ", size, " bytes)"));
  }
  const int64_t n = std::min(max_bytes, size - offset);
  std::memcpy(place(n), (*result)->data() + offset, static_cast<size_t>(n));
  return n;
}

}  // namespace gradsync
