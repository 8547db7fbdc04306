// Whether a checkpoint fits the run that resumes from it (checkpoint_fit.h).
#include "core/train/checkpoint_fit.h"

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::Status CheckCheckpointFits(const Checkpoint& c, const RunShape& run) {
  const std::string& context = run.context;
  const std::string& path = run.path;
  auto mismatch = [&](const std::string& what, const auto& theirs,
                      const auto& ours, const std::string& advice) {
    return absl::FailedPreconditionError(
        absl::StrCat(context, ": checkpoint ", path, " was written with ", what,
                     " ", theirs, " but this run has ", ours, "; ", advice));
  };
  if (c.model != run.model) {
    return mismatch("model", c.model, run.model,
                    "resume with the same --model and --layers");
  }
  if (static_cast<int64_t>(c.params.size()) != run.num_params || !c.keys.empty()) {
    return absl::DataLossError(
        absl::StrCat(context, ": checkpoint ", path, " holds ", c.params.size(),
                     " parameters, the model has ", run.num_params,
                     c.keys.empty() ? "" : " (it is a server's shard)"));
  }
  // The compression changes every step's update, and with error feedback
  // each worker's residual (saved beside the checkpoint for this
  // compression) is part of the state: a resume under another one would
  // silently continue another run. Files before version 4 record none.
  if (!c.compression.empty() && c.compression != run.compression) {
    return mismatch("--compression", c.compression, run.compression,
                    absl::StrCat("resume with --compression=", c.compression,
                                 ", or start over without --resume"));
  }
  const std::string same_data =
      "the data order depends on --seed, --batch_size and the number of "
      "workers";
  if (c.seed != run.seed)
    return mismatch("--seed", c.seed, run.seed, same_data);
  if (c.batch_size != run.batch_size) {
    return mismatch("--batch_size", c.batch_size, run.batch_size,
                    same_data);
  }
  if (c.world_size != run.world_size) {
    return mismatch("a world size of", c.world_size,
                    absl::StrCat(run.world_size, " workers"), same_data);
  }
  if (c.optimizer != run.optimizer) {
    return mismatch("--optimizer", c.optimizer, run.optimizer,
                    "its state does not carry over");
  }
  if (c.optimizer_on_servers != run.optimizer_on_servers) {
    return mismatch(
        "the optimizer on the", c.optimizer_on_servers ? "servers" : "workers",
        run.optimizer_on_servers ? "it on the servers" : "it on the workers",
        "resume with the same --sync and --ps_update");
  }
  if (static_cast<int64_t>(c.optimizer_state.size()) != run.optimizer_buffers) {
    return mismatch("optimizer buffers", c.optimizer_state.size(),
                    absl::StrCat(run.optimizer_buffers, " buffers"),
                    "resume with the same --optimizer and --momentum");
  }
  // Batch-norm running statistics: worker 0's, which every worker would
  // have taken before its next evaluation anyway. Without them a resumed
  // run would evaluate with fresh statistics, so a checkpoint that lacks
  // them is refused rather than resumed from.
  if (run.model_buffers > 0 && c.buffers.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        context, ": checkpoint ", path, " (format version ", c.format_version,
        ") carries no model buffers, but ", run.model, " keeps ",
        run.model_buffers,
        " floats of batch-norm running statistics; a resumed run would "
        "evaluate with fresh ones. ",
        c.format_version < 3
            ? "The file was written before checkpoints carried them"
            : "The file was written for a model without them",
        ": start the run again without --resume"));
  }
  if (static_cast<int64_t>(c.buffers.size()) != run.model_buffers) {
    return absl::DataLossError(
        absl::StrCat(context, ": checkpoint ", path, " holds ",
                     c.buffers.size(), " floats of model buffers, the model ",
                     run.model, " has ", run.model_buffers));
  }
  if (c.step < 0 || c.epoch < 0 || c.epoch_step < 0 ||
      c.epoch_step >= run.steps_per_epoch ||
      c.step != c.epoch * run.steps_per_epoch + c.epoch_step) {
    return absl::DataLossError(
        absl::StrCat(context, ": checkpoint ", path, "'s position (step ",
                     c.step, ", epoch ", c.epoch, ", step ", c.epoch_step,
                     " of the epoch) does not fit ", run.steps_per_epoch,
                     " steps per epoch; was it written with another data set "
                     "or --drop_last?"));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
