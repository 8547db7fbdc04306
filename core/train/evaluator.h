// Test-set accuracy of a data-parallel job: each worker scores its shard of
// the test set and the counts are summed through the rendezvous, with
// worker 0's batch-norm statistics on every worker first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/model/model.h"

namespace gradsync {

class Evaluator {
 public:
  // `inputs` is a device buffer of at least `max_batch` input rows, shared
  // with the training step (evaluation never runs inside a step); `model`
  // is bound for batches of `max_batch`.
  Evaluator(Model& model, Device& device, const Dataset& test,
            Rendezvous* rendezvous, const ProcessIdentity& identity,
            absl::Duration timeout, float* inputs, int max_batch)
      : model_(model),
        device_(device),
        test_(test),
        rendezvous_(rendezvous),
        identity_(identity),
        timeout_(timeout),
        inputs_(inputs),
        max_batch_(max_batch) {}

  // The test accuracy over the first `samples` test images (0: all): every
  // rank evaluates its share and the counts are summed through the
  // rendezvous under `round`, or, `alone`, worker 0 evaluates them all on
  // its own parameters and the others return -1.
  absl::StatusOr<double> Evaluate(const std::string& round, bool alone,
                                  int64_t samples);

 private:
  absl::Status TakeWorkerZerosBuffers(const std::string& round);

  Model& model_;
  Device& device_;
  const Dataset& test_;
  Rendezvous* const rendezvous_;
  const ProcessIdentity identity_;
  const absl::Duration timeout_;
  float* const inputs_;
  const int max_batch_;
  std::vector<float> host_inputs_;  // one batch of rows, filled per batch
};

}  // namespace gradsync
