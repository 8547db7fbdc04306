// Settings of a parameter-server job that are allowed but were measured or
// predicted to go wrong, each turned into one warning that names the fix
// (worker 0 logs them at start-up). Rules, not flags: plain values in, text
// out; the key-size imbalance warning is in settings.h, which reaches these
// checks for every job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "core/optim/optimizer_options.h"
#include "proto/parameter_server.pb.h"
#include "ps/stream_window_rule.h"

namespace gradsync {

// SGD momentum above this under SSP/ASP is warned about: the experiments
// that converged ran 0.5 (README, "Momentum and asynchrony").
constexpr double kAsyncMomentumLimit = 0.5;

// SSP or ASP with SGD momentum above kAsyncMomentumLimit: asynchrony adds
// momentum of its own (Mitliagkas et al. 2016) and the server steps the
// momentum once per push; the run the warning quotes is in
// docs/results/stragglers.md, "Momentum and asynchrony".
std::optional<std::string> AsyncMomentumWarning(
    ps::Consistency consistency, const OptimizerOptions& optimizer);

// The α–β model's time for one step's push and pull through the busiest
// link of a PS job with separate servers: max(S, N f S)/B for the bytes (f
// the largest server share), N b/B for the last block (b = min(key, 1 MiB))
// and a round trip. 0 where the link rate is not known.
double PredictedPsStepSeconds(int64_t model_bytes, int num_workers,
                              double largest_share, int64_t key_bytes,
                              const LinkFigures& link);

// --timeout_s within twice the predicted step: a step that is merely slow
// would fail as a lost peer. Suggests four times the prediction.
std::optional<std::string> TimeoutWarning(absl::Duration timeout,
                                          double predicted_step_s,
                                          const std::string& what);

}  // namespace gradsync
