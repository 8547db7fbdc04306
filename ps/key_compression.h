// How one parameter-server key travels under --compression and --ps_pull:
// the rules the workers and the servers share, so both sides derive the
// same answer from the registration (no state, no gRPC, no flags).
//
// Push. A worker encodes each ready bucket once (core/sync/compression.h,
// error feedback in the worker) and cuts the encoding at its keys' bounds:
// fp16/bf16 halves, onebit signs (each key keeps the bucket's two scales),
// top-k/random-k (index, value) pairs split by index range with indices
// relative to the key. A row-sparse tensor's key (an embedding table's rows,
// ParamSpec::sparse_row_width) always pushes its touched rows, exactly
// (SparseRowsOf), whatever --compression says. `none` pushes float32 as
// before: no encoding at all.
//
// Pull (--ps_update=worker). The server sums the decoded pushes in float32
// and averages as before; what goes back:
//   union (default for top-k/random-k, always for row-sparse keys): the
//     average at every element (row) where it is not zero, i.e. over the
//     union of the pushed indices (at most N·k pairs), or as float32 when
//     that is no larger; exact: decoding it gives the server's float32
//     average bit for bit.
//   topk: the k largest magnitudes of the average (gTop-k, Shi et al.
//     2019), k = the key's share of --compression's ratio. What it drops is
//     lost: the workers' residuals hold only what each worker did not push.
//   same (fp16/bf16's default): the average rounded once, on the server, to
//     the push's 16-bit format.
//   dense: the float32 average, as without compression (onebit's only one:
//     a sum of signs is not a sign).
// With --ps_update=server the servers decode and step their optimizer as
// before, and pulls are the new parameters in float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/sync/compression.h"
#include "proto/parameter_server.pb.h"

namespace gradsync {

// --ps_pull. kAuto resolves to union (top-k, random-k), same (fp16, bf16)
// or dense (none, onebit); kSame is only ever a resolved value.
enum class PsPull { kAuto, kDense, kUnion, kTopK, kSame };

// "auto", "dense", "union", "topk" ("same" too: what registrations carry).
absl::StatusOr<PsPull> ParsePsPull(absl::string_view name);
const char* PsPullName(PsPull pull);

// kAuto resolved for `compression`; InvalidArgument saying why for a pull
// that cannot work (union or topk without top-k/random-k, or with
// --ps_update=server whose pulls are parameters; same without fp16/bf16).
absl::StatusOr<PsPull> ResolvePsPull(PsPull pull,
                                     const CompressionSpec& compression,
                                     ps::UpdateMode update_mode);

// What one key's pushes and results carry.
struct KeyEncoding {
  // Pushes carry an encoding of kind `push` (KeyPart.encoded_bytes != 0);
  // false: float32 data, as without compression.
  bool encoded_push = false;
  Encoding push = Encoding::kFloat32;
  int32_t row_width = 1;  // kSparse pushes: 1, or a row-sparse key's rows
  // Worker mode: how results travel (kDense: float32 data as before).
  PsPull result = PsPull::kDense;
  int64_t topk = 0;  // kTopK: elements kept of the key's average
  bool encoded_result() const { return result != PsPull::kDense; }
};

// `pull` resolved (ResolvePsPull); `row_width` > 0 for a row-sparse key.
KeyEncoding KeyEncodingOf(const CompressionSpec& compression, PsPull pull,
                          ps::UpdateMode update_mode, int32_t row_width,
                          int64_t numel);

// "fp16", "(index, value) pairs", "rows of 64", ...: for messages.
std::string DescribePush(const KeyEncoding& encoding);

// The largest encoding of a key of `numel` floats any method writes (all
// rows as pairs): a bound a server checks before it buffers a push.
int64_t MaxEncodedBytes(int64_t numel);

// A worker's complete push of a key, parsed and checked against what the
// key takes: the byte format's own checks (sizes, index order and range),
// then the key's length, encoding and row width. InvalidArgument saying
// what is wrong.
absl::StatusOr<EncodedBucket> ParseKeyPush(absl::string_view bytes,
                                           const KeyEncoding& encoding,
                                           int64_t numel);

// The server's worker-mode result of a key as `encoding.result` says, from
// its float32 average.
std::string EncodeKeyResult(absl::Span<const float> average,
                            const KeyEncoding& encoding);

// A worker's pulled result: `dst` (the key's floats) becomes the decoded
// encoding (zero where it holds nothing). InvalidArgument for bytes that do
// not parse or do not fit `dst`.
absl::Status DecodeKeyResult(absl::string_view bytes, absl::Span<float> dst);

// A key's floats within its bucket.
struct KeyRange {
  int64_t offset = 0;  // in floats, from the bucket's start
  int64_t numel = 0;
};

// Cuts a bucket's encoding into its keys' encodings (each serialized in the
// byte format), in the order of `keys`. Internal error for keys outside the
// bucket or, for sparse rows, not on row bounds.
absl::StatusOr<std::vector<std::string>> SplitIntoKeys(
    const EncodedBucket& bucket, const std::vector<KeyRange>& keys);

}  // namespace gradsync
