// Slowness injected into training on purpose, so strategies can be compared
// under the same stragglers (--straggler, --straggler_jitter_ms): a worker
// sleeps before its step's compute, as if its device were slower. Any
// strategy; the sleep is reported per step as "straggle_ms".
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradsync {

// Worker `rank` sleeps `ms` before every `every`-th step (steps counted from
// 0 of the whole run: step % every == 0).
struct StragglerSpec {
  int rank = 0;
  double ms = 0;
  int64_t every = 1;
};

struct Slowness {
  std::vector<StragglerSpec> stragglers;
  // Every worker also sleeps a uniform random time in [0, jitter_ms) before
  // each step, drawn from (seed, rank, step): the same in every run.
  double jitter_ms = 0;
  uint64_t seed = 1;
};

// "RANK:MS[:EVERY]", several separated by commas ("3:40", "1:20:5,2:10").
// Empty text: none. Errors name the item and say what is expected.
absl::StatusOr<std::vector<StragglerSpec>> ParseStragglers(
    absl::string_view text);

// Refuses ranks outside the job, a rank listed twice, and sleeps that are
// negative or longer than a minute per step.
absl::Status CheckSlowness(const Slowness& slowness, int world_size);

// How long worker `rank` sleeps before step `step`, in milliseconds.
double SlownessDelayMs(const Slowness& slowness, int rank, int64_t step);

}  // namespace gradsync
