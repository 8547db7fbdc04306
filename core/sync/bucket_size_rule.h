// The rule that chooses the gradient bucket cap (--bucket_mb's "auto") from
// the model's size, and the warning for a cap that defeats overlap. A rule,
// not a flag: it links no flag library, and every rank computes the same cap
// from the same model.
//
// Why: a bucket is handed to the strategy as soon as backward has produced it,
// so communication of late layers overlaps backward of early ones — but only
// if there is more than one bucket. DDP's fixed 25 MiB holds gradsync's 2 MiB
// MLP, or any model under 25 MiB, in one bucket, sent after backward ends.
//
// The rule: a quarter of the model (at least four buckets, so three quarters
// of the bytes can leave while backward still runs), within [kMinBucketBytes,
// kMaxBucketBytes]. The floor keeps each bucket's fixed costs small beside
// its bytes (the ring pays 2(N-1) latencies per bucket, which at N = 8 and a
// data-centre latency stay a small part of 1 MiB's transfer time even at
// 10 Gbit/s);
// the ceiling is DDP's 25 MiB. A parameter larger than the cap is a bucket of
// its own (param_layout.h), so the count can differ from four.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/sync/param_layout.h"

namespace gradsync {

constexpr int64_t kMinBucketBytes = int64_t{1} << 20;
constexpr int64_t kMaxBucketBytes = int64_t{25} << 20;
constexpr int kTargetBuckets = 4;

struct BucketSizeChoice {
  int64_t bucket_bytes = 0;
  std::string reason;  // "auto: 2.14 MB model / 4, within [1, 25] MiB ..."
};

BucketSizeChoice ChooseBucketBytes(int64_t model_bytes);

// When an explicit cap put a model of several parameters into one bucket:
// one message naming the cap, the model's size and the cap that overlaps.
std::optional<std::string> SingleBucketWarning(const ParamLayout& layout,
                                               double bucket_mb);

}  // namespace gradsync
