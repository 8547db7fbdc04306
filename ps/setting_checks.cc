// Warnings for PS settings that were measured or predicted to go wrong (see
// setting_checks.h).
#include "ps/setting_checks.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace gradsync {

std::optional<std::string> AsyncMomentumWarning(
    ps::Consistency consistency, const OptimizerOptions& optimizer) {
  if (consistency == ps::CONSISTENCY_BSP || optimizer.kind != "sgd" ||
      optimizer.momentum <= kAsyncMomentumLimit) {
    return std::nullopt;
  }
  return absl::StrFormat(
      "--ps_consistency=%s with SGD momentum %.2f: asynchrony adds momentum "
      "of its own and the servers step the momentum once per push; ASP at "
      "0.9 ended an epoch at 10%% accuracy where the ring reached 80.7%% "
      "(README, \"Momentum and asynchrony\"); set --momentum=%.1f or lower",
      consistency == ps::CONSISTENCY_SSP ? "ssp" : "asp", optimizer.momentum,
      kAsyncMomentumLimit);
}

double PredictedPsStepSeconds(int64_t model_bytes, int num_workers,
                              double largest_share, int64_t key_bytes,
                              const LinkFigures& link) {
  if (!(link.rate_bytes_per_s > 0)) return 0;
  const double size = static_cast<double>(model_bytes);
  const double busiest = std::max(size, num_workers * largest_share * size);
  const double tail =
      num_workers * static_cast<double>(std::min<int64_t>(key_bytes, 1 << 20));
  return (busiest + tail) / link.rate_bytes_per_s + link.round_trip_s;
}

std::optional<std::string> TimeoutWarning(absl::Duration timeout,
                                          double predicted_step_s,
                                          const std::string& what) {
  const double seconds = absl::ToDoubleSeconds(timeout);
  if (!(predicted_step_s > 0) || seconds >= 2 * predicted_step_s) {
    return std::nullopt;
  }
  return absl::StrFormat(
      "--timeout_s=%g is shorter than twice the predicted step of %s (%.1f s "
      "by the alpha-beta model): a step that is merely slow would fail as a "
      "lost peer; set --timeout_s=%.0f",
      seconds, what, predicted_step_s, std::ceil(4 * predicted_step_s));
}

}  // namespace gradsync
