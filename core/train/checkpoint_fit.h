// Whether a checkpoint fits the run that would resume from it: the same
// model, the same data order (seed, batch size, world size), the same
// optimizer in the same place, the same gradient compression (whose
// error-feedback residuals were saved beside it), and a position inside this
// run's epochs.
// Kept apart from the trainer so every refusal can be read (and tested) in
// one place.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/optim/checkpoint.h"

namespace gradsync {

// What a resuming run is: each field is compared with the checkpoint's.
struct RunShape {
  std::string context;  // prefix of every error, e.g. "worker 1: --resume"
  std::string path;     // the checkpoint's file, named in every error
  std::string model;
  int64_t num_params = 0;
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int world_size = 1;
  std::string optimizer;
  bool optimizer_on_servers = false;
  int64_t optimizer_buffers = 0;  // 0 when the servers hold the state
  int64_t model_buffers = 0;      // floats of batch-norm running statistics
  int64_t steps_per_epoch = 0;
  // --compression as CompressionSpec prints it; compared with the one the
  // checkpoint records (none recorded before format version 4).
  std::string compression;
};

// OK when `checkpoint` can continue `run` exactly as the uninterrupted run
// would have; otherwise FailedPrecondition (the run differs: the error says
// which flag to set) or DataLoss (the file does not hold what it claims).
absl::Status CheckCheckpointFits(const Checkpoint& checkpoint,
                                 const RunShape& run);

}  // namespace gradsync
