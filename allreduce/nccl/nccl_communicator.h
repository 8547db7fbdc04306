// One NCCL communicator of a job, set up and waited on the same way by the
// --sync=nccl strategy (allreduce/nccl/nccl_sync.cc) and the NCCL line of
// bench/allreduce_benchmark (bench/nccl_allreduce.cc). CUDA builds only.
//
// Set-up: rank 0 creates NCCL's unique id and broadcasts it (base64) through
// the Rendezvous; every rank then creates its communicator non-blocking
// (ncclConfig_t::blocking = 0), so that the set-up, like every later wait,
// has a deadline instead of hanging on a peer that never comes.
//
// Waits: the host never blocks inside CUDA or NCCL. It polls the event (or
// stream) and NCCL's asynchronous error, and gives up at the deadline, at
// NCCL's first asynchronous error, or as soon as the rendezvous reports a
// lost member (a dead peer never joins a collective).
//
// Failure: a communicator that failed, timed out or lost a peer may have
// work that never ends; ncclCommDestroy on it can block for ever. Every
// failure therefore ends it with ncclCommAbort at once, and only a
// communicator that finished cleanly is finalized and destroyed.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

// OK for ncclSuccess and ncclInProgress (a non-blocking call under way);
// otherwise the call, NCCL's error string and the communicator's last error.
absl::Status NcclCallStatus(ncclResult_t result, const char* call,
                            ncclComm_t comm);

struct NcclCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  // The rendezvous key rank 0 publishes the unique id under; two
  // communicators of one job need different keys.
  std::string unique_id_key = "nccl/unique_id";
  // Every wait gives up after this, naming the rank and what it waited for.
  absl::Duration timeout = absl::Seconds(60);
  // Put in front of every error ("nccl sync", "nccl benchmark").
  std::string owner = "nccl";
};

class NcclCommunicator {
 public:
  // Shares the unique id through `rendezvous` (which may be null for one
  // rank) and creates this rank's communicator on the current CUDA device.
  // `rendezvous` must outlive the communicator.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const NcclCommunicatorOptions& options, Rendezvous* rendezvous);
  // Destroys a healthy communicator, aborts a failed one.
  ~NcclCommunicator();

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Null once aborted.
  ncclComm_t get() const { return comm_; }
  // The error that ended the communicator; OK while it is usable.
  const absl::Status& error() const { return error_; }

  // For the result of a call that enqueued work on the communicator: an
  // error aborts it; ncclInProgress (a non-blocking communicator still
  // enqueuing) is waited for, as NCCL requires before the next call.
  absl::Status CheckEnqueued(ncclResult_t result, const char* call,
                             const std::string& what);
  // Waits on the host until `event` has completed (or `stream` has, when
  // `event` is null), with the deadline, watching NCCL's asynchronous errors
  // and the rendezvous's losses.
  absl::Status WaitForEvent(cudaEvent_t event, const std::string& what);
  absl::Status WaitForStream(cudaStream_t stream, const std::string& what);
  // Ends a healthy communicator cleanly (ncclCommFinalize, waited for, then
  // destroyed); aborts one that fails to finalize. Idempotent.
  absl::Status Finalize();
  // Ends the communicator at once and keeps `error` as the reason.
  absl::Status AbortWith(absl::Status error);

 private:
  NcclCommunicator(const NcclCommunicatorOptions& options,
                   Rendezvous* rendezvous)
      : options_(options), rendezvous_(rendezvous) {}
  absl::StatusOr<ncclUniqueId> ShareUniqueId();
  // Polls until the communicator's pending non-blocking operation is done.
  absl::Status WaitForPending(const std::string& what);
  // Done(): cudaSuccess when complete, cudaErrorNotReady while pending.
  template <typename Query>
  absl::Status PollUntilDone(Query done, const char* call,
                             const std::string& what);
  // "nccl sync: rank 2 <what>".
  std::string Context(const std::string& what) const;

  const NcclCommunicatorOptions options_;
  Rendezvous* const rendezvous_;
  ncclComm_t comm_ = nullptr;
  absl::Status error_;
};

}  // namespace gradsync
