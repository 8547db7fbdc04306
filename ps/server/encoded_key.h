// The server's side of one key's encodings (ps/key_compression.h): each
// worker's encoded push assembled from its parts and checked before
// anything is summed, and the key's encoded result, made once per step
// from the float32 result the key (ps/server/bsp_key.h) holds. The key itself
// stays a float32 sum: a complete push is decoded into float32 and handed to
// it as one part, so BSP, SSP/ASP and the server-side optimizer work on
// compressed pushes unchanged. No gRPC, no flags.
//
// Lock order: this lock, then the key's (ResultBytes and ReadResult call
// `read_floats`, which takes the key's lock, with this one held).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/parameter_server.pb.h"
#include "ps/key_compression.h"

namespace gradsync {

class EncodedKey {
 public:
  EncodedKey(int64_t numel, KeyEncoding encoding, int num_workers);
  EncodedKey(const EncodedKey&) = delete;
  EncodedKey& operator=(const EncodedKey&) = delete;

  const KeyEncoding& encoding() const { return encoding_; }

  // One part of worker header.rank()'s encoded push (KeyPart.encoded_bytes
  // != 0), already checked to name this key. Returns the push decoded into
  // float32 once its last part is in, nullopt before. Errors start with
  // `context`; a refused part changes nothing.
  absl::StatusOr<std::optional<std::vector<float>>> AddPart(
      const ps::KeyPart& part, const std::string& context);

  // The key's float32 result for a step, all numel floats (the key's Read).
  using ReadFloats = absl::FunctionRef<absl::StatusOr<std::vector<float>>()>;
  // The size in bytes of the encoded result of `step`, made from
  // `read_floats` the first time it is asked for (the result must be final).
  absl::StatusOr<int64_t> ResultBytes(int64_t step, ReadFloats read_floats);
  // Copies up to `max_bytes` of that encoding from `offset` into the memory
  // `place` returns for their count; returns the count.
  absl::StatusOr<int64_t> ReadResult(
      int64_t step, int64_t offset, int64_t max_bytes, ReadFloats read_floats,
      absl::FunctionRef<char*(int64_t bytes)> place);

 private:
  struct Assembly {
    int64_t step = -1;  // the push being assembled; -1: none
    int64_t size = 0;   // its encoding's bytes
    std::string bytes;  // received so far
  };
  struct Result {
    int64_t step = -1;
    std::string bytes;
  };
  // The result of `step` (two slots by parity: pulls of a step finish
  // before the step after next completes, as for the key's sums).
  absl::StatusOr<const std::string*> ResultOf(int64_t step,
                                              ReadFloats read_floats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t numel_;
  const KeyEncoding encoding_;
  absl::Mutex mu_;
  std::vector<Assembly> pushes_ ABSL_GUARDED_BY(mu_);  // per worker
  Result results_[2] ABSL_GUARDED_BY(mu_);
};

}  // namespace gradsync
