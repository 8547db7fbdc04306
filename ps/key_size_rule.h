// The rule that chooses the parameter server's key size (--ps_chunk_kb's
// "auto") from the gradient's layout and the servers' target shares, so that
// every server holds its share of the bytes. A rule, not a flag: it links no
// flag library, and every worker computes the same answer from the same
// layout and shares (the servers check at registration that the keys agree).
//
// Why the key size matters: keys are the unit the partitioner places, so a
// key as large as a tensor leaves K servers unequal (a model of a few large
// tensors on many servers leaves some servers with most of the bytes and
// others with none), and a server's results wait for its last key, so a
// large key also lengthens the tail of every step (ps/README.md, "Distance
// from the bandwidth model", items 2 and 7). Small keys cost CPU per key
// (message framing, locks, bookkeeping), which on a small machine becomes
// the bound.
//
// The rule: start from a tenth of S·max(f, 1/N), for the smallest positive
// share f and N workers — after a key's last pushes arrive its results still
// leave the server N times, a tail of N·key/B (bench/cost_model.py's N·b),
// which is then at most a tenth of the busiest link's max(N·f·S, S)/B, and a
// server holds ten keys or more, so the largest-first placement can even
// servers out — rounded down to a power of two and held
// within [kPreferredMinKeyBytes, kMaxKeyBytes]; then cut it by eighths (in 4
// KiB units), down to kMinKeyBytes, until every server's bytes are within
// kTargetImbalance of its target. How this rule's keys compare with the α–β
// model on emulated links: docs/results/ps-bandwidth-model.md, "Notes from
// the code".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/param_layout.h"

namespace gradsync {

// Above this the whole-key placement only gets worse and a key already
// streams in several messages (--ps_message_kb, 1 MiB), so nothing is gained.
constexpr int64_t kMaxKeyBytes = int64_t{4} << 20;
// The smallest start: the smallest key that kept the servers' CPU from
// becoming the bound on the emulated links, where smaller ones did not (the
// sweep: docs/results/ps-bandwidth-model.md, "Notes from the code").
constexpr int64_t kPreferredMinKeyBytes = int64_t{64} << 10;
// Smaller keys are taken only when balance needs them; below this the
// per-key cost dominates.
constexpr int64_t kMinKeyBytes = int64_t{16} << 10;
// The last key's tail is at most this part of the busiest link's bytes.
constexpr double kTailFraction = 0.1;
// Every server within 10 % of its target share.
constexpr double kTargetImbalance = 1.10;

struct KeySizeChoice {
  int64_t key_bytes = 0;
  // max over servers of (bytes held) / (target share × total bytes); 1.0 is
  // perfect. With equal shares this is Partition::imbalance().
  double imbalance = 0;
  // One line for logs and the manifest: "auto: 2.5 MB over K=8 servers
  // (0.31 MB each); 64 KiB keys (...), max/target 1.00".
  std::string reason;
};

// The key size for `layout` over servers with target `shares` (non-negative,
// summing to 1, as Partition::Create takes them) in a job of `num_workers`.
// Where no size in [kMinKeyBytes, kMaxKeyBytes] reaches kTargetImbalance (a
// model of one huge tensor and a few tiny ones on many servers), the most
// balanced one, and the reason says so.
absl::StatusOr<KeySizeChoice> ChooseKeySize(const ParamLayout& layout,
                                            const std::vector<double>& shares,
                                            int num_workers);

// max over servers with a positive target of bytes / (share × total).
double ImbalanceAgainstTargets(const std::vector<int64_t>& server_bytes,
                               const std::vector<double>& shares);

}  // namespace gradsync
