// The worker's command-line flags, declared once here (Abseil flags) with their
// defaults and help text, echoed into every run's manifest. Strategy-specific
// flags live with their strategy (ps/, allreduce/).
#pragma once

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/train/trainer.h"

ABSL_DECLARE_FLAG(std::string, sync);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, gpus);
ABSL_DECLARE_FLAG(std::string, metrics_dir);
ABSL_DECLARE_FLAG(int, threads);

namespace gradsync {

// Everything the trainer needs, validated; errors name the flag.
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags();
absl::StatusOr<MlpOptions> MlpOptionsFromFlags();
// The model --model names: the MLP of --layers, or a synthetic model
// (synthetic_model.h) shaped to accept `data`'s samples.
absl::StatusOr<std::unique_ptr<Model>> CreateModelFromFlags(
    const DatasetPair& data);
// True for the strategies whose job has parameter servers: ps, and hybrid
// (its row-sparse tensors go to them).
bool UsesParameterServers(const std::string& sync);
// True when --model names a synthetic model (no real predictions, so no
// evaluation).
bool IsSyntheticModelFlag();
absl::StatusOr<DatasetPair> LoadDatasetFromFlags();
// What LoadDatasetFromFlags refuses before it reads anything (--data's name,
// its combination with --model, a synthetic image shape): for `gradsync
// launch`, before it starts the workers.
absl::Status CheckDataFlags();

// --checkpoint checked at start-up for the process that writes it (worker 0,
// or a launcher before it starts one): core/optim/checkpoint_path.h, with
// --resume, --overwrite_checkpoint and `num_servers` shards beside it.
absl::Status CheckCheckpointPathFromFlags(int num_servers);
// --device, --threads and (CUDA) --gpus for the process with `local_rank` of
// the `local_world` on this machine.
absl::StatusOr<DeviceOptions> DeviceOptionsFromFlags(int local_rank,
                                                     int local_world);

}  // namespace gradsync
