// Error-feedback residuals and their checkpoint files (error_feedback.h).
#include "core/sync/error_feedback.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/optim/checkpoint.h"

namespace gradsync {

std::string ErrorFeedback::PathFor(const std::string& checkpoint_path,
                                   int rank) {
  return absl::StrCat(checkpoint_path, ".residual", rank);
}

std::string ErrorFeedback::Identity() const {
  return absl::StrCat("error-feedback residual: worker ", rank_, " of ",
                      world_size_, ", --compression=", spec_.ToString());
}

bool ErrorFeedback::IsCheckpointStep(int64_t steps_done) const {
  if (schedule_.checkpoint_path.empty()) return false;
  // The steps at which the trainer's worker 0 writes (core/train/trainer.cc).
  return (schedule_.checkpoint_every > 0 &&
          steps_done % schedule_.checkpoint_every == 0) ||
         (schedule_.steps_per_epoch > 0 &&
          steps_done % schedule_.steps_per_epoch == 0) ||
         steps_done == schedule_.total_steps;
}

absl::Status ErrorFeedback::Setup(int64_t total_numel,
                                  const TrainingSchedule& schedule) {
  schedule_ = schedule;
  if (!spec_.UsesErrorFeedback()) {
    residual_.clear();
    return absl::OkStatus();
  }
  residual_.assign(total_numel, 0.0f);
  if (!schedule.resume) return absl::OkStatus();
  const std::string path = PathFor(schedule.checkpoint_path, rank_);
  const std::string previous = path + ".previous";
  std::string found;
  for (const std::string& candidate : {path, previous}) {
    absl::StatusOr<Checkpoint> read = ReadCheckpoint(candidate);
    if (absl::IsNotFound(read.status())) continue;
    if (!read.ok()) return read.status();
    found = absl::StrCat(found, found.empty() ? "" : ", ", candidate,
                         " holds step ", read->step);
    if (read->step != schedule.start_step) continue;
    if (read->model != Identity() ||
        static_cast<int64_t>(read->params.size()) != total_numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--resume: ", candidate, " is \"", read->model, "\" with ",
          read->params.size(), " floats, but this run is \"", Identity(),
          "\" with ", total_numel,
          " (resume with the compression, worker count and model that wrote "
          "the checkpoint)"));
    }
    residual_ = std::move(read->params);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--resume with --compression=", spec_.ToString(), ": worker ", rank_,
      " needs its error-feedback residual of step ", schedule.start_step,
      " in ", path, " (or ", previous, "), but ",
      found.empty() ? "neither exists" : found,
      "; resume from a checkpoint written with this compression, or start "
      "over without --resume"));
}

absl::Span<float> ErrorFeedback::Of(int64_t offset, int64_t numel) {
  if (residual_.empty()) return {};
  return absl::MakeSpan(residual_).subspan(offset, numel);
}

absl::Status ErrorFeedback::AfterStep(int64_t steps_done) {
  if (residual_.empty() || !IsCheckpointStep(steps_done)) {
    return absl::OkStatus();
  }
  const std::string path = PathFor(schedule_.checkpoint_path, rank_);
  // The file of the checkpoint before, for a job stopped between this write
  // and worker 0's (see the header). A missing file is not an error.
  std::rename(path.c_str(), (path + ".previous").c_str());
  Checkpoint checkpoint;
  checkpoint.model = Identity();
  checkpoint.step = steps_done;
  checkpoint.world_size = world_size_;
  checkpoint.params = residual_;
  absl::Status written = WriteCheckpoint(path, checkpoint);
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("worker ", rank_,
                                     ": writing the error-feedback residual: ",
                                     written.message()));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
