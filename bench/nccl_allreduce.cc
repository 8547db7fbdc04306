#include "bench/nccl_allreduce.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

absl::Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("nccl benchmark: ", call,
                                          " failed: ", cudaGetErrorName(error),
                                          " (", cudaGetErrorString(error), ")"));
}

absl::Status NcclStatus(ncclResult_t result, const char* call,
                        ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::InternalError(absl::StrCat(
      "nccl benchmark: ", call, " failed: ", ncclGetErrorString(result),
      detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                           : ""));
}

#define GS_CUDA(call) RETURN_IF_ERROR(CudaStatus((call), #call))
#define GS_NCCL(call, comm) RETURN_IF_ERROR(NcclStatus((call), #call, (comm)))

constexpr char kUniqueIdKey[] = "bench-nccl/unique_id";

}  // namespace

struct NcclAllReduce::Impl {
  int rank = 0;
  absl::Duration timeout;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* data = nullptr;
  float* token = nullptr;

  ~Impl() {
    if (comm != nullptr) ncclCommDestroy(comm);
    if (data != nullptr) cudaFree(data);
    if (token != nullptr) cudaFree(token);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Polls the non-blocking communicator until its pending call is done.
  absl::Status WaitForCommunicator(const std::string& what) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      ncclResult_t state = ncclSuccess;
      GS_NCCL(ncclCommGetAsyncError(comm, &state), comm);
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return Annotate(NcclStatus(state, "ncclCommGetAsyncError", comm),
                        absl::StrCat("rank ", rank, " ", what));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("nccl benchmark: rank ", rank, " ", what,
                         ": not done after ", absl::FormatDuration(timeout),
                         " (a peer never joined or died; see its log)"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Waits for the stream with the deadline, watching NCCL's errors (a dead
  // peer would otherwise leave cudaStreamSynchronize waiting for ever).
  absl::Status WaitForStream(const std::string& what) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const cudaError_t done = cudaStreamQuery(stream);
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) {
        return Annotate(CudaStatus(done, "cudaStreamQuery"), what);
      }
      ncclResult_t state = ncclSuccess;
      GS_NCCL(ncclCommGetAsyncError(comm, &state), comm);
      if (state != ncclSuccess && state != ncclInProgress) {
        return Annotate(NcclStatus(state, "ncclCommGetAsyncError", comm),
                        absl::StrCat("rank ", rank, " ", what));
      }
      if (absl::Now() >= deadline) {
        ncclCommAbort(comm);
        comm = nullptr;
        return absl::DeadlineExceededError(
            absl::StrCat("nccl benchmark: rank ", rank, " ", what,
                         ": not done after ", absl::FormatDuration(timeout)));
      }
    }
  }

  absl::Status AllReduce(float* buffer, int64_t count,
                         const std::string& what) {
    const ncclResult_t result =
        ncclAllReduce(buffer, buffer, static_cast<size_t>(count), ncclFloat,
                      ncclSum, comm, stream);
    GS_NCCL(result, comm);
    if (result == ncclInProgress) RETURN_IF_ERROR(WaitForCommunicator(what));
    return WaitForStream(what);
  }
};

NcclAllReduce::NcclAllReduce(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
NcclAllReduce::~NcclAllReduce() = default;

absl::StatusOr<std::unique_ptr<NcclAllReduce>> NcclAllReduce::Create(
    int rank, int world_size, CoordinatorClient* coordinator,
    absl::Duration timeout, int64_t max_floats) {
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->timeout = timeout;
  int gpus = 0;
  GS_CUDA(cudaGetDeviceCount(&gpus));
  if (gpus < 1) {
    return absl::FailedPreconditionError(
        "nccl benchmark: no GPU visible (drop 'nccl' from --algorithms)");
  }
  GS_CUDA(cudaSetDevice(rank % gpus));
  // Ranks sharing a GPU must look like separate hosts to NCCL, which then
  // uses its socket transport between them; with a GPU each, leave NCCL its
  // intra-node transports (P2P, NVLink).
  if (world_size > gpus && std::getenv("NCCL_HOSTID") == nullptr) {
    setenv("NCCL_HOSTID", absl::StrCat("allreduce-benchmark-rank", rank).c_str(), 1);
  }
  GS_CUDA(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  GS_CUDA(cudaMalloc(&impl->data, std::max<int64_t>(max_floats, 1) * sizeof(float)));
  GS_CUDA(cudaMalloc(&impl->token, sizeof(float)));

  ncclUniqueId id;
  if (rank == 0) {
    GS_NCCL(ncclGetUniqueId(&id), nullptr);
    RETURN_IF_ERROR(coordinator->Set(
        kUniqueIdKey,
        absl::Base64Escape(absl::string_view(id.internal, sizeof(id.internal)))));
  } else {
    absl::StatusOr<std::string> encoded = coordinator->Get(kUniqueIdKey, timeout);
    if (!encoded.ok()) {
      return Annotate(encoded.status(),
                      absl::StrCat("nccl benchmark: rank ", rank,
                                   " waiting for rank 0's NCCL unique id"));
    }
    std::string raw;
    if (!absl::Base64Unescape(*encoded, &raw) || raw.size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat(
          "nccl benchmark: rank ", rank, ": malformed NCCL unique id under ",
          kUniqueIdKey));
    }
    std::memcpy(id.internal, raw.data(), sizeof(id.internal));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  GS_NCCL(ncclCommInitRankConfig(&impl->comm, world_size, id, rank, &config),
          impl->comm);
  RETURN_IF_ERROR(impl->WaitForCommunicator(
      absl::StrCat("creating the communicator of ", world_size, " ranks")));
  return std::unique_ptr<NcclAllReduce>(new NcclAllReduce(std::move(impl)));
}

absl::Status NcclAllReduce::Upload(const float* host, int64_t count) {
  GS_CUDA(cudaMemcpy(impl_->data, host, count * sizeof(float),
                     cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status NcclAllReduce::Run(int64_t count) {
  return impl_->AllReduce(impl_->data, count,
                          absl::StrCat("all-reducing ", count, " floats"));
}

absl::Status NcclAllReduce::Download(float* host, int64_t count) {
  GS_CUDA(cudaMemcpy(host, impl_->data, count * sizeof(float),
                     cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status NcclAllReduce::Barrier() {
  return impl_->AllReduce(impl_->token, 1, "in a barrier");
}

}  // namespace gradsync
