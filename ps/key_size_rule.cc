// The parameter server's key-size rule (see key_size_rule.h).
#include "ps/key_size_rule.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/base/power_of_two.h"
#include "ps/client/partitioner.h"

namespace gradsync {

double ImbalanceAgainstTargets(const std::vector<int64_t>& server_bytes,
                               const std::vector<double>& shares) {
  const int64_t total =
      std::accumulate(server_bytes.begin(), server_bytes.end(), int64_t{0});
  if (total == 0) return 1.0;
  double worst = 0;
  for (size_t s = 0; s < server_bytes.size() && s < shares.size(); ++s) {
    if (shares[s] <= 0) continue;
    worst = std::max(worst, server_bytes[s] / (shares[s] * total));
  }
  return worst;
}

absl::StatusOr<KeySizeChoice> ChooseKeySize(const ParamLayout& layout,
                                            const std::vector<double>& shares,
                                            int num_workers) {
  if (shares.empty()) {
    return absl::InvalidArgumentError(
        "key size rule: no parameter servers; need at least one");
  }
  double smallest_share = 0;
  for (double share : shares) {
    if (share > 0 && (smallest_share == 0 || share < smallest_share)) {
      smallest_share = share;
    }
  }
  const int64_t total = layout.total_bytes();
  // Per step, the busiest server's link carries N f S (or the S every
  // worker sends, where f < 1/N): N times this. The last key leaves it N
  // times after its pushes are in.
  const double link_bytes =
      total * std::max(smallest_share, 1.0 / std::max(num_workers, 1));
  const int64_t start = std::clamp(
      LargestPowerOfTwoAtMost(static_cast<int64_t>(link_bytes * kTailFraction)),
      kPreferredMinKeyBytes, kMaxKeyBytes);

  KeySizeChoice best;
  // Steps of an eighth (in whole 4 KiB units) rather than halving: a model
  // of a few large tensors often balances at a size between two powers of
  // two, and larger keys cost less CPU.
  for (int64_t key = start; key >= kMinKeyBytes;
       key = std::min(key - 4096, (key * 7 / 8) / 4096 * 4096)) {
    absl::StatusOr<Partition> partition =
        Partition::Create(layout, shares, key);
    if (!partition.ok()) return partition.status();
    const double imbalance =
        ImbalanceAgainstTargets(partition->server_bytes(), shares);
    if (best.key_bytes == 0 || imbalance < best.imbalance - 1e-9) {
      best.key_bytes = key;
      best.imbalance = imbalance;
    }
    if (imbalance <= kTargetImbalance) break;
  }
  const int servers = static_cast<int>(shares.size());
  best.reason = absl::StrFormat(
      "auto: %.2f MB over K=%d servers, N=%d (the busiest link carries N x "
      "%.3f MB); %d KiB keys: a tenth of that share (so the last key's tail, "
      "N x key, is a tenth of the link's bytes) as a power of two in [%d, %d] "
      "KiB, cut by eighths (down to "
      "%d KiB) until every server is within %.0f%% of its share "
      "(max/target %.3f%s)",
      total / 1e6, servers, num_workers, link_bytes / 1e6,
      best.key_bytes / 1024, kPreferredMinKeyBytes / 1024, kMaxKeyBytes / 1024,
      kMinKeyBytes / 1024, 100 * (kTargetImbalance - 1), best.imbalance,
      best.imbalance <= kTargetImbalance
          ? ""
          : "; not reached: a few tensors dominate the model");
  return best;
}

}  // namespace gradsync
