// Checks that every worker holds what worker 0 holds — the step a run starts
// from, the parameters at start-up and after steps — through the
// rendezvous, with a message that says which flag or strategy to blame.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

class ReplicaAgreement {
 public:
  // `rendezvous` null (one worker) makes every check pass.
  ReplicaAgreement(Rendezvous* rendezvous, const ProcessIdentity& identity,
                   absl::Duration timeout)
      : rendezvous_(rendezvous), identity_(identity), timeout_(timeout) {}

  // Every rank must continue from the same step, or the strategies would
  // pair different steps' gradients (a rank that read an older copy of the
  // checkpoint, or one started without --resume).
  absl::Status CheckSameStartStep(int64_t step) const;

  // What every worker derived from its flags, its model and its data before
  // the strategy starts (the parameter layout: model, parameters, buckets),
  // as (name, value) pairs in the same order on every worker, against worker
  // 0's: flags are compared at Join, but a worker whose host holds other
  // data builds another model from the same flags, and the strategies would
  // pair buckets that do not match. The first pair that differs is named
  // with both values and `advice`.
  absl::Status CheckSameDerivedSettings(
      const std::vector<std::pair<std::string, std::string>>& settings,
      const std::string& advice) const;

  // A CRC-32 of `params` (this rank's, on the host) against worker 0's: the
  // cheapest proof that all replicas hold the same model. `when`: "at
  // start-up" or "after step s", also the round's name.
  absl::Status CheckSameParameters(const std::vector<float>& params,
                                   const std::string& when) const;

 private:
  bool Alone() const {
    return rendezvous_ == nullptr || identity_.world_size == 1;
  }

  Rendezvous* const rendezvous_;
  const ProcessIdentity identity_;
  const absl::Duration timeout_;
};

}  // namespace gradsync
