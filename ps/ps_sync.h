// --sync=ps: the parameter-server strategy behind the GradientSync seam.
//
// Setup partitions the layout's parameters into keys over the K servers and
// registers with them; BucketReady starts the bucket's pushes and pulls and
// returns; Finish waits for them and leaves the averaged gradients in the
// gradient buffer (--ps_update=worker) or the servers' new parameters in the
// parameter buffer (--ps_update=server). With --ps_colocate, worker r also
// runs server r in-process (K = N).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/gradient_sync.h"
#include "core/optimizer.h"
#include "proto/parameter_server.pb.h"

namespace gradsync {

struct PsSyncOptions {
  ps::UpdateMode update_mode = ps::UPDATE_WORKER;
  int64_t chunk_bytes = int64_t{4} << 20;
  int64_t message_bytes = int64_t{1} << 20;
  // Server mode: the workers' optimizer, with the learning rate already
  // scaled for the world size (core's ScaleLearningRate).
  OptimizerOptions optimizer;
  bool colocate = false;
  // Server k's "host:port". Empty: taken from SyncContext::members (role
  // kServer), or for colocate from the coordinator.
  std::vector<std::string> server_addresses;
};

absl::StatusOr<std::unique_ptr<GradientSync>> CreatePsSync(
    const SyncContext& context, const PsSyncOptions& options);

// PsSyncOptions from --ps_* flags and the worker's optimizer flags
// (--optimizer, --lr, --lr_scaling, --momentum, --weight_decay, --beta1,
// --beta2, --epsilon), which belong to the trainer and are looked up by name.
absl::StatusOr<PsSyncOptions> PsSyncOptionsFromFlags(int world_size);

}  // namespace gradsync
