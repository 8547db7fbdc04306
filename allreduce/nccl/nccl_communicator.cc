#include "allreduce/nccl/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"
#include "core/device/cuda_device.h"

namespace gradsync {
namespace {

// How often host-side waits look at CUDA and NCCL. Short next to a step,
// long enough not to burn a core.
constexpr auto kPollInterval = std::chrono::microseconds(50);

}  // namespace

absl::Status NcclCallStatus(ncclResult_t result, const char* call,
                            ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::InternalError(absl::StrCat(
      call, " failed: ", ncclGetErrorString(result),
      detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                           : ""));
}

std::string NcclCommunicator::Context(const std::string& what) const {
  return absl::StrCat(options_.owner, ": rank ", options_.rank, " ", what);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclCommunicatorOptions& options, Rendezvous* rendezvous) {
  if (options.world_size > 1 && rendezvous == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.owner, ": ", options.world_size,
                     " ranks need a rendezvous to share NCCL's unique id"));
  }
  std::unique_ptr<NcclCommunicator> communicator(
      new NcclCommunicator(options, rendezvous));
  ASSIGN_OR_RETURN(ncclUniqueId id, communicator->ShareUniqueId());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a rank that never joins is a deadline error
  const ncclResult_t result = ncclCommInitRankConfig(
      &communicator->comm_, options.world_size, id, options.rank, &config);
  const std::string what = absl::StrCat("creating the communicator of ",
                                        options.world_size, " ranks");
  RETURN_IF_ERROR(
      communicator->CheckEnqueued(result, "ncclCommInitRankConfig", what));
  RETURN_IF_ERROR(communicator->WaitForPending(what));
  return communicator;
}

absl::StatusOr<ncclUniqueId> NcclCommunicator::ShareUniqueId() {
  ncclUniqueId id;
  std::string encoded;
  if (options_.rank == 0) {
    RETURN_IF_ERROR(Annotate(
        NcclCallStatus(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr),
        Context("creating NCCL's unique id")));
    encoded =
        absl::Base64Escape(absl::string_view(id.internal, sizeof(id.internal)));
  }
  if (rendezvous_ == nullptr) return id;
  absl::StatusOr<std::string> shared =
      rendezvous_->Broadcast(options_.unique_id_key, options_.rank,
                             /*root=*/0, encoded, options_.timeout);
  if (!shared.ok()) {
    return Annotate(shared.status(),
                    Context("sharing rank 0's NCCL unique id"));
  }
  if (options_.rank == 0) return id;
  std::string raw;
  if (!absl::Base64Unescape(*shared, &raw) ||
      raw.size() != sizeof(id.internal)) {
    return absl::DataLossError(Context(absl::StrCat(
        "got a unique id under '", options_.unique_id_key, "' that is not ",
        sizeof(id.internal), " bytes of base64")));
  }
  std::memcpy(id.internal, raw.data(), sizeof(id.internal));
  return id;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  if (error_.ok()) {
    // A healthy communicator with nothing pending ends cleanly; if the
    // finalize itself fails, Finalize has aborted it.
    Finalize().IgnoreError();
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

absl::Status NcclCommunicator::AbortWith(absl::Status error) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  if (error_.ok()) error_ = std::move(error);
  return error_;
}

absl::Status NcclCommunicator::CheckEnqueued(ncclResult_t result,
                                             const char* call,
                                             const std::string& what) {
  if (!error_.ok()) return error_;
  absl::Status status = NcclCallStatus(result, call, comm_);
  if (!status.ok()) return AbortWith(Annotate(status, Context(what)));
  if (result == ncclInProgress) return WaitForPending(what);
  return absl::OkStatus();
}

template <typename Query>
absl::Status NcclCommunicator::PollUntilDone(Query done, const char* call,
                                             const std::string& what) {
  if (!error_.ok()) return error_;
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    const cudaError_t query = done();
    if (query == cudaSuccess) return absl::OkStatus();
    if (query != cudaErrorNotReady) {
      return AbortWith(
          Annotate(CudaCallStatus(query, call, "the NCCL stream's device"),
                   Context(what)));
    }
    // "Not ready" must not stay in the runtime's last-error slot, where the
    // next healthy kernel launch's cudaGetLastError() would report it.
    (void)cudaGetLastError();
    ncclResult_t state = ncclSuccess;
    const absl::Status asked = NcclCallStatus(
        ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_);
    if (!asked.ok()) return AbortWith(Annotate(asked, Context(what)));
    if (state != ncclSuccess && state != ncclInProgress) {
      return AbortWith(Annotate(
          NcclCallStatus(state, "an NCCL operation (asynchronous)", comm_),
          Context(what)));
    }
    if (rendezvous_ != nullptr && rendezvous_->has_lost()) {
      return AbortWith(Annotate(rendezvous_->lost(), Context(what)));
    }
    if (absl::Now() >= deadline) {
      return AbortWith(absl::DeadlineExceededError(Context(absl::StrCat(
          what, ": not done after ", absl::FormatDuration(options_.timeout),
          " (a peer is stuck, never joined or died; see its log)"))));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::Status NcclCommunicator::WaitForPending(const std::string& what) {
  if (!error_.ok()) return error_;
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    ncclResult_t state = ncclSuccess;
    const absl::Status asked = NcclCallStatus(
        ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_);
    if (!asked.ok()) return AbortWith(Annotate(asked, Context(what)));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return AbortWith(
          Annotate(NcclCallStatus(state, "ncclCommGetAsyncError", comm_),
                   Context(what)));
    }
    if (rendezvous_ != nullptr && rendezvous_->has_lost()) {
      return AbortWith(Annotate(rendezvous_->lost(), Context(what)));
    }
    if (absl::Now() >= deadline) {
      return AbortWith(absl::DeadlineExceededError(Context(absl::StrCat(
          what, ": not done after ", absl::FormatDuration(options_.timeout),
          " (a peer never joined or died; see its log)"))));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::Status NcclCommunicator::WaitForEvent(cudaEvent_t event,
                                            const std::string& what) {
  return PollUntilDone([event] { return cudaEventQuery(event); },
                       "cudaEventQuery", what);
}

absl::Status NcclCommunicator::WaitForStream(cudaStream_t stream,
                                             const std::string& what) {
  return PollUntilDone([stream] { return cudaStreamQuery(stream); },
                       "cudaStreamQuery", what);
}

absl::Status NcclCommunicator::Finalize() {
  if (comm_ == nullptr || !error_.ok()) return error_;
  const std::string what = "finalizing the communicator";
  RETURN_IF_ERROR(
      CheckEnqueued(ncclCommFinalize(comm_), "ncclCommFinalize", what));
  RETURN_IF_ERROR(WaitForPending(what));
  const absl::Status destroyed =
      NcclCallStatus(ncclCommDestroy(comm_), "ncclCommDestroy", comm_);
  comm_ = nullptr;
  return Annotate(destroyed, Context(what));
}

}  // namespace gradsync
