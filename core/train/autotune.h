// --autotune's arithmetic: the bucket caps it tries, the verdict over every
// rank's timings, and the lines it writes. The trial steps themselves run in
// the trainer (trainer.cc), which alone can undo them.
//
// Like Horovod's autotune it measures instead of modelling, but it tries a
// handful of caps around the derived one rather than searching: the step
// time of a cap is a smooth, mostly U-shaped function (too small: per-bucket
// latency; too large: no overlap with backward), so ×1/4 .. ×4 of the rule's
// value brackets its minimum (the rule's floor of 1 MiB makes ×4 the whole
// model for models up to 4 MiB, the cap that wins where there is no compute
// to overlap), and each trial costs real steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

// Below this a bucket's fixed costs (a gRPC call per server, 2(N-1) ring
// latencies) outweigh its bytes on any link gradsync targets; a quarter of
// the rule's 1 MiB floor.
constexpr int64_t kMinAutotuneBucketBytes = int64_t{256} << 10;

// The caps to try: `derived_bytes` first (the layout already set up), then
// ×1/4, ×1/2, ×2 and ×4, each clamped to [kMinAutotuneBucketBytes,
// kMaxBucketBytes] and rounded to whole KiB; duplicates dropped.
std::vector<int64_t> BucketCandidates(int64_t derived_bytes);

struct AutotuneTrial {
  int64_t bucket_bytes = 0;
  int num_buckets = 0;
  int steps = 0;                     // timed steps (after one untimed)
  int64_t samples = 0;               // per timed step, over all workers
  std::vector<double> rank_step_ms;  // each rank's median of the timed steps
  // The job's step time: a step ends when the slowest rank's does.
  double step_ms() const;
};

// The index of the trial with the lowest step_ms(); the earliest of equals
// (the derived cap comes first, so it wins ties). -1 when `trials` is empty.
int FastestTrial(const std::vector<AutotuneTrial>& trials);

// One JSON line (no newline) for the run's autotune.jsonl:
// {"trial":1,"bucket_mb":0.25,"buckets":10,"steps":3,"step_ms":41.2,
//  "rank_step_ms":[40.1,41.2],"samples_per_s":6213.6,"chosen":false}
std::string TrialJsonLine(const AutotuneTrial& trial, int index, bool chosen);

// The manifest's source for the chosen cap: "autotune: fastest of 4 trials
// (<cap> MiB <median step> ms, ...)", one entry per trial.
std::string AutotuneSource(const std::vector<AutotuneTrial>& trials,
                           int chosen);

// A rank's per-trial medians as sent through the rendezvous, and back.
std::string EncodeTrialMillis(const std::vector<double>& millis);
absl::StatusOr<std::vector<double>> DecodeTrialMillis(const std::string& text,
                                                      int rank,
                                                      size_t expected);

// The whole file autotune.jsonl: one TrialJsonLine per trial, newline-ended.
std::string TrialLog(const std::vector<AutotuneTrial>& trials, int chosen);

// Every rank's choice of trial, the same on every rank: worker 0 gathers each
// rank's per-trial medians `my_millis` (filling `trials`' rank_step_ms on
// worker 0), picks the FastestTrial and broadcasts it, so no rank can pick
// differently on a near tie. Without a rendezvous (one worker) the choice is
// local.
absl::StatusOr<int> AgreeOnFastestTrial(std::vector<AutotuneTrial>& trials,
                                        const std::vector<double>& my_millis,
                                        Rendezvous* rendezvous,
                                        const ProcessIdentity& identity,
                                        absl::Duration timeout);

}  // namespace gradsync
