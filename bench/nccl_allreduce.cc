#include "bench/nccl_allreduce.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allreduce/nccl/nccl_communicator.h"
#include "core/base/status_macros.h"
#include "core/device/cuda_device.h"
#include "core/device/gpu_selection.h"

namespace gradsync {
namespace {

#define GS_CUDA(call) \
  RETURN_IF_ERROR(::gradsync::CudaCallStatus((call), #call, "nccl benchmark"))

constexpr char kUniqueIdKey[] = "bench-nccl/unique_id";

}  // namespace

struct NcclAllReduce::Impl {
  std::unique_ptr<NcclCommunicator> comm;
  cudaStream_t stream = nullptr;
  float* data = nullptr;
  float* token = nullptr;

  ~Impl() {
    comm.reset();  // before the stream it may still use
    if (data != nullptr) cudaFree(data);
    if (token != nullptr) cudaFree(token);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::Status AllReduce(float* buffer, int64_t count,
                         const std::string& what) {
    RETURN_IF_ERROR(comm->CheckEnqueued(
        ncclAllReduce(buffer, buffer, static_cast<size_t>(count), ncclFloat,
                      ncclSum, comm->get(), stream),
        "ncclAllReduce", what));
    return comm->WaitForStream(stream, what);
  }
};

NcclAllReduce::NcclAllReduce(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
NcclAllReduce::~NcclAllReduce() = default;

absl::StatusOr<std::unique_ptr<NcclAllReduce>> NcclAllReduce::Create(
    int rank, int world_size, Rendezvous* rendezvous, absl::Duration timeout,
    int64_t max_floats) {
  auto impl = std::make_unique<Impl>();
  int gpus = 0;
  GS_CUDA(cudaGetDeviceCount(&gpus));
  if (gpus < 1) {
    return absl::FailedPreconditionError(
        "nccl benchmark: no GPU visible (drop 'nccl' from --algorithms)");
  }
  // The benchmark's ranks all run on this host.
  RETURN_IF_ERROR(Annotate(OneGpuPerRank(world_size, gpus), "nccl benchmark"));
  GS_CUDA(cudaSetDevice(rank));
  GS_CUDA(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  GS_CUDA(cudaMalloc(&impl->data,
                     std::max<int64_t>(max_floats, 1) * sizeof(float)));
  GS_CUDA(cudaMalloc(&impl->token, sizeof(float)));
  NcclCommunicatorOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.unique_id_key = kUniqueIdKey;
  options.timeout = timeout;
  options.owner = "nccl benchmark";
  ASSIGN_OR_RETURN(impl->comm, NcclCommunicator::Create(options, rendezvous));
  return std::unique_ptr<NcclAllReduce>(new NcclAllReduce(std::move(impl)));
}

absl::Status NcclAllReduce::Upload(const float* host, int64_t count) {
  // On the benchmark's stream, which NCCL's all-reduces also use, so the
  // copy is ordered before them (a plain cudaMemcpy runs on the legacy
  // stream, which a non-blocking stream does not wait for).
  GS_CUDA(cudaMemcpyAsync(impl_->data, host, count * sizeof(float),
                          cudaMemcpyHostToDevice, impl_->stream));
  return impl_->comm->WaitForStream(impl_->stream, "uploading the input");
}

absl::Status NcclAllReduce::Run(int64_t count) {
  return impl_->AllReduce(impl_->data, count,
                          absl::StrCat("all-reducing ", count, " floats"));
}

absl::Status NcclAllReduce::Download(float* host, int64_t count) {
  GS_CUDA(cudaMemcpyAsync(host, impl_->data, count * sizeof(float),
                          cudaMemcpyDeviceToHost, impl_->stream));
  return impl_->comm->WaitForStream(impl_->stream, "downloading the result");
}

absl::Status NcclAllReduce::Barrier() {
  return impl_->AllReduce(impl_->token, 1, "in a barrier");
}

}  // namespace gradsync
