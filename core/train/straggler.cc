#include "core/train/straggler.h"

#include <random>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gradsync {
namespace {

constexpr double kMaxDelayMs = 60000;

absl::Status BadItem(absl::string_view item, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--straggler: '", item, "' ", why,
                   "; expected RANK:MS[:EVERY], e.g. 3:40 (worker 3 sleeps "
                   "40 ms every step) or 1:200:10 (every 10th step)"));
}

}  // namespace

absl::StatusOr<std::vector<StragglerSpec>> ParseStragglers(
    absl::string_view text) {
  std::vector<StragglerSpec> specs;
  if (text.empty()) return specs;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> fields = absl::StrSplit(item, ':');
    if (fields.size() < 2 || fields.size() > 3) {
      return BadItem(item, "does not have two or three fields");
    }
    StragglerSpec spec;
    if (!absl::SimpleAtoi(fields[0], &spec.rank)) {
      return BadItem(item, "does not start with a worker rank");
    }
    if (!absl::SimpleAtod(fields[1], &spec.ms)) {
      return BadItem(item, "has no number of milliseconds");
    }
    if (fields.size() == 3 &&
        (!absl::SimpleAtoi(fields[2], &spec.every) || spec.every < 1)) {
      return BadItem(item, "has an EVERY that is not a positive step count");
    }
    specs.push_back(spec);
  }
  return specs;
}

absl::Status CheckSlowness(const Slowness& slowness, int world_size) {
  std::set<int> seen;
  for (const StragglerSpec& spec : slowness.stragglers) {
    const std::string item =
        absl::StrCat(spec.rank, ":", spec.ms, ":", spec.every);
    if (spec.rank < 0 || spec.rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("--straggler=", item, ": there is no worker ", spec.rank,
                       " in a job of ", world_size, " workers"));
    }
    if (!seen.insert(spec.rank).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--straggler: worker ", spec.rank, " is listed twice"));
    }
    if (!(spec.ms >= 0 && spec.ms <= kMaxDelayMs)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--straggler=", item, ": the sleep must be within [0, ",
                       kMaxDelayMs, "] ms"));
    }
  }
  if (!(slowness.jitter_ms >= 0 && slowness.jitter_ms <= kMaxDelayMs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler_jitter_ms=", slowness.jitter_ms,
                     " must be within [0, ", kMaxDelayMs, "]"));
  }
  return absl::OkStatus();
}

double SlownessDelayMs(const Slowness& slowness, int rank, int64_t step) {
  double ms = 0;
  for (const StragglerSpec& spec : slowness.stragglers) {
    if (spec.rank == rank && step % spec.every == 0) ms += spec.ms;
  }
  if (slowness.jitter_ms > 0) {
    // A generator per (seed, rank, step): reproducible whatever came before.
    std::seed_seq seed{static_cast<uint32_t>(slowness.seed),
                       static_cast<uint32_t>(slowness.seed >> 32),
                       static_cast<uint32_t>(rank), static_cast<uint32_t>(step),
                       static_cast<uint32_t>(step >> 32)};
    std::mt19937_64 generator(seed);
    ms += std::uniform_real_distribution<double>(0,
                                                 slowness.jitter_ms)(generator);
  }
  return ms;
}

}  // namespace gradsync
