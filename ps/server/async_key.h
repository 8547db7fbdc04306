// One key under stale-synchronous or asynchronous training
// (--ps_consistency=ssp|asp, server mode only). Each worker's push of the key
// is applied on its own, block by block as it arrives: the block's gradient
// divided by N, stepped by the block's optimizer with the BSP learning rate
// (so N pushes move the parameters as far as one BSP step; for SGD without
// momentum and no staleness they are the same sum). The key counts, per
// worker, the steps that worker pushed completely (its clock); the key's
// clock is the slowest worker's. A pull of step t by worker r is answered
// once r's own push of t is applied and
//   SSP with staleness s: every worker pushed step t - s (key clock > t - s),
//   ASP:                  no further condition,
// with the current parameters: they hold every worker's gradients of the
// steps before the key's clock, and perhaps some of later steps (SSP's
// guarantee, as in Ho et al., NIPS 2013). A worker computes step t + 1 only
// after that pull, so it runs at most s steps ahead of the slowest. The
// staleness of a gradient of step t is t minus the key's clock when its
// parameters were read: 0 under BSP, at most s under SSP. Steps at which the
// trainer checkpoints, and the run's last step, are barriers in every mode
// (the pull waits for every worker's push of that step), so a checkpoint is
// one consistent state, resume means "every worker continues from it", and
// every worker ends with the same model; pulls of such a step read the
// checkpoint's snapshot (ps/server/shard_checkpoint.h), which no later push
// changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ps/consistency.h"
#include "ps/server/shard_checkpoint.h"
#include "ps/server/shard_key.h"
#include "ps/server/shard_statistics.h"

namespace gradsync {

class AsyncKey : public ShardKey {
 public:
  // `setting.parameters` is never null: SSP and ASP run the optimizer on the
  // servers (CheckConsistency refuses them otherwise); each push takes 1/N
  // of `setting.lr`. `consistency`: SSP (with its `staleness` bound) or ASP.
  AsyncKey(const Shape& shape, Setting setting, ps::Consistency consistency,
           int64_t staleness);

  absl::Status Push(const ps::KeyPart& part, Waiters* notify) override;
  absl::Status CheckPull(const ps::Header& header,
                         const std::string& context) const override;
  bool AddPull(int64_t step, int rank,
               const std::shared_ptr<KeyWaiter>& waiter) override;
  int64_t FinalFloats(int64_t step, int rank) const override;
  // Also fills `reply`'s slowest_clock (the key's clock the floats were read
  // at) and, with the first part, wait_saved_us.
  absl::StatusOr<int64_t> Read(int64_t step, int rank, int64_t offset,
                               int64_t max_floats,
                               absl::FunctionRef<char*(int64_t floats)> place,
                               ps::Header* reply) override;
  std::vector<MissingPush> MissingWorkers(int64_t step,
                                          int rank) const override;
  int64_t StepsDone() const override;

 private:
  enum class Readiness { kPast, kWait, kReady };
  // Whether worker `rank`'s pull of `step` may be answered, must wait, or
  // asks for a step it is past.
  Readiness ReadinessOf(int64_t step, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The key clock a pull of `step` needs (every worker pushed the steps
  // before it): step + 1 at a barrier, step + 1 - s under SSP, no bound
  // under ASP.
  int64_t RequiredClock(int64_t step) const;
  // Applies worker `rank`'s staged floats [begin, end), whole blocks (or the
  // key's end).
  void Apply(int rank, int64_t begin, int64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Worker `rank` pushed all of `step`.
  void AdvanceClock(int rank, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // " (SSP, staleness 2)" or " (ASP)", for messages.
  std::string Note() const { return ConsistencyNote(consistency_, staleness_); }

  const ps::Consistency consistency_;
  const int64_t staleness_;

  // Per worker: the steps it pushed completely (its clock), its current push
  // (staged until applied, block by block: every whole block of `received_`
  // is), and the key's clock when it last read the key.
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> staged_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> read_clock_ ABSL_GUARDED_BY(mu_);
  // The key's clock: min over workers of `clock_`.
  int64_t slowest_ ABSL_GUARDED_BY(mu_);
  // Pulls answered before every worker had pushed their step (BSP would
  // still hold them), until that happens: the wait they saved.
  struct EarlyRead {
    int worker;
    int64_t step;
    absl::Time at;
  };
  std::vector<EarlyRead> early_ ABSL_GUARDED_BY(mu_);
  // Per worker: the wait those saved, not yet told to it (Header's
  // wait_saved_us).
  std::vector<int64_t> unreported_saved_ns_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradsync
