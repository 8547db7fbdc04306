// NCCL's all-reduce for bench/allreduce_benchmark (--config=cuda builds only):
// the `nccl` algorithm, measured as nccl-tests measures it — device buffers,
// time from the first enqueue to the stream's completion, no host copies in
// the timed loop. One communicator per rank process, set up through the
// rendezvous by allreduce/nccl/nccl_communicator.h (shared with --sync=nccl); rank
// r uses GPU r, one GPU per rank (NCCL does not support several ranks on one
// GPU: ranks beyond the visible GPUs are refused).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

class NcclAllReduce {
 public:
  // Creates the communicator and device buffers for up to `max_floats`.
  // Every wait (the unique id, the communicator, a collective) ends after
  // `timeout` with an error naming the rank and what it waited for.
  static absl::StatusOr<std::unique_ptr<NcclAllReduce>> Create(
      int rank, int world_size, Rendezvous* rendezvous, absl::Duration timeout,
      int64_t max_floats);
  ~NcclAllReduce();

  // Host → device, the first `count` floats.
  absl::Status Upload(const float* host, int64_t count);
  // In-place sum of the first `count` device floats over all ranks, waited
  // for.
  absl::Status Run(int64_t count);
  // Device → host.
  absl::Status Download(float* host, int64_t count);
  // A one-float all-reduce: returns once every rank has called it.
  absl::Status Barrier();

  struct Impl;

 private:
  explicit NcclAllReduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
