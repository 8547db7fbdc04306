// The error-feedback residuals of one worker (compression.h): one float per
// gradient element, kept across steps, and saved beside the trainer's
// checkpoints so that --resume continues compressed training exactly.
//
// The residual is this worker's alone (what its own compressor dropped), so
// every worker writes its own file, <--checkpoint>.residual<rank>, at the
// steps worker 0 writes the checkpoint (TrainingSchedule), atomically
// (core/optim/checkpoint.h: temporary file, fsync, rename). A strategy saves
// after its Finish of that step, before the trainer writes the checkpoint, so
// a job killed in between leaves a residual one checkpoint ahead: the file it
// replaces is kept as <...>.previous, and a resume takes whichever of the two
// holds the checkpoint's step. A missing file, another step, another worker
// count, another compression or another size is refused with an error naming
// the file and what to do.
//
// Flat over the whole gradient (not per bucket), so --autotune's Rebucket
// keeps every element's residual where it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/sync/compression.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {

class ErrorFeedback {
 public:
  ErrorFeedback(CompressionSpec spec, int rank, int world_size)
      : spec_(spec), rank_(rank), world_size_(world_size) {}

  // Zero residuals for `total_numel` floats, or, when schedule.resume and
  // the method keeps residuals, this worker's file at schedule.start_step.
  absl::Status Setup(int64_t total_numel, const TrainingSchedule& schedule);

  // The residual of the floats [offset, offset + numel); empty when the
  // method keeps none (what Compressor::Encode accepts then).
  absl::Span<float> Of(int64_t offset, int64_t numel);

  // After a step's synchronization, `steps_done` global steps in all: writes
  // this worker's file when the trainer checkpoints at that step.
  absl::Status AfterStep(int64_t steps_done);

  bool IsCheckpointStep(int64_t steps_done) const;
  // <checkpoint_path>.residual<rank>.
  static std::string PathFor(const std::string& checkpoint_path, int rank);
  const std::vector<float>& residual() const { return residual_; }

 private:
  // What the file's `model` field says: the file is this worker's, for this
  // compression.
  std::string Identity() const;

  const CompressionSpec spec_;
  const int rank_;
  const int world_size_;
  TrainingSchedule schedule_;
  std::vector<float> residual_;
};

}  // namespace gradsync
