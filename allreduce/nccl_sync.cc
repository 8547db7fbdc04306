// --sync=nccl (CUDA builds only): ncclAllReduce with ncclAvg, bucket by bucket,
// on a communication stream of its own.
//
// Ordering without a device-wide synchronize: BucketReady(b) records an event
// on the compute stream and makes the communication stream wait for it, then
// enqueues the all-reduce of bucket b there; the host never blocks. Finish
// records a "done" event on the communication stream, makes the compute
// stream wait for it (so the optimizer sees the averaged gradients), and waits
// on the host for that one event only, polling NCCL's asynchronous error so a
// dead peer becomes an error after --timeout_s instead of a hang.
//
// The compute stream is, for now, the legacy default stream: an event recorded
// there completes only after all earlier work of every blocking stream on the
// device, so the ordering is right whichever (blocking) stream the CUDA device
// computes on. When the device exposes its stream, record there instead.
//
// Rendezvous: rank 0 creates the NCCL unique id and publishes it (base64)
// through the coordinator under "nccl/unique_id"; the others Get it. The
// communicator is created non-blocking so that its set-up, too, has a deadline.
//
// Several ranks on one GPU: NCCL refuses two ranks of one communicator on the
// same device of the same host ("Duplicate GPU detected"). Give every process
// a distinct NCCL_HOSTID (the launcher does, e.g. NCCL_HOSTID=<job>-<rank>);
// NCCL then treats them as different hosts and uses its socket transport.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "core/device/cuda_device.h"
#include "core/sync/gradient_sync.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

absl::Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("nccl sync: ", call, " failed: ", cudaGetErrorName(error),
                   " (", cudaGetErrorString(error), ")"));
}

absl::Status NcclStatus(ncclResult_t result, const char* call,
                        ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress)
    return absl::OkStatus();
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::InternalError(absl::StrCat(
      "nccl sync: ", call, " failed: ", ncclGetErrorString(result),
      detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                           : ""));
}

#define GS_CUDA(call) RETURN_IF_ERROR(CudaStatus((call), #call))
#define GS_NCCL(call, comm) RETURN_IF_ERROR(NcclStatus((call), #call, (comm)))

// How often host-side waits look at the event and NCCL's error state. Short
// next to a step, long enough not to burn a core.
constexpr auto kPollInterval = std::chrono::microseconds(50);

class NcclSync : public GradientSync {
 public:
  explicit NcclSync(const SyncContext& context) : context_(context) {}
  ~NcclSync() override { Release(); }

  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override {
    if (device.type() != DeviceType::kCuda) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sync=nccl all-reduces GPU memory, but the device is ",
          device.name(), "; use --device=cuda, or --sync=ring on CPUs"));
    }
    grads_ = buffers.grads;
    for (const Bucket& bucket : layout.buckets()) {
      buckets_.push_back(Span{bucket.offset, bucket.numel});
    }
    // Order NCCL after the compute stream the model queues its work on; a
    // device that is not gradsync's CudaDevice (tests) uses the legacy stream.
    if (CudaDevice* cuda = AsCudaDevice(device)) {
      compute_stream_ = cuda->stream();
      gpu_ = cuda->gpu_index();
      GS_CUDA(cudaSetDevice(gpu_));
    } else {
      compute_stream_ = cudaStreamLegacy;
      GS_CUDA(cudaGetDevice(&gpu_));
    }
    GS_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    ready_events_.resize(buckets_.size(), nullptr);
    for (cudaEvent_t& event : ready_events_) {
      GS_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    GS_CUDA(cudaEventCreate(&start_event_));
    GS_CUDA(cudaEventCreate(&done_event_));
    RETURN_IF_ERROR(CreateCommunicator());
    GS_LOG(INFO) << "nccl: rank " << context_.identity.rank << " of "
                 << context_.identity.world_size << " on GPU " << gpu_ << ", "
                 << buckets_.size() << " buckets, NCCL " << NCCL_MAJOR << "."
                 << NCCL_MINOR;
    return absl::OkStatus();
  }

  void BucketReady(int bucket) override {
    if (!error_.ok()) return;  // reported by Finish
    error_ = Enqueue(bucket);
  }

  absl::Status Finish(StepStats& stats) override {
    if (!error_.ok()) return error_;
    if (comm_ == nullptr)
      return absl::FailedPreconditionError("nccl: Finish before Setup");
    if (enqueued_ != static_cast<int>(buckets_.size())) {
      error_ = absl::FailedPreconditionError(
          absl::StrCat("nccl: Finish in step ", step_, " after ", enqueued_,
                       " of ", buckets_.size(), " buckets were ready"));
    }
    if (!error_.ok()) return error_;
    GS_CUDA(cudaEventRecord(done_event_, comm_stream_));
    // The optimizer, queued on the compute stream, must see the averages.
    GS_CUDA(cudaStreamWaitEvent(compute_stream_, done_event_, 0));
    RETURN_IF_ERROR(WaitForEvent(done_event_, absl::StrCat("step ", step_)));

    float elapsed_ms = 0;
    GS_CUDA(cudaEventElapsedTime(&elapsed_ms, start_event_, done_event_));
    stats.extra.emplace_back("allreduce_ms", elapsed_ms);
    // NCCL does not report bytes; these are what its ring algorithm moves,
    // 2(N-1)/N of each bucket (it may choose a tree for small buckets).
    const int n = context_.identity.world_size;
    int64_t bytes = 0;
    for (const Span& span : buckets_) bytes += span.numel * 4 * 2 * (n - 1) / n;
    stats.bytes_sent += bytes;
    stats.bytes_recv += bytes;
    total_bytes_ += bytes;
    enqueued_ = 0;
    ++step_;
    return absl::OkStatus();
  }

  absl::Status Shutdown() override {
    absl::Status status;
    if (comm_ != nullptr && error_.ok()) {
      status = NcclStatus(ncclCommFinalize(comm_), "ncclCommFinalize", comm_);
      if (status.ok())
        status = WaitForCommunicator("finalizing the communicator");
      if (!status.ok() && error_.ok()) error_ = status;
    }
    Release();
    return status;
  }

  std::string SummaryJson() const override {
    const nlohmann::json summary = {
        {"nccl_version", absl::StrCat(NCCL_MAJOR, ".", NCCL_MINOR)},
        {"gpu", gpu_},
        {"bytes_are_ring_estimates", true},
        {"bytes_sent", total_bytes_},
    };
    return summary.dump();
  }

 private:
  struct Span {
    int64_t offset = 0;
    int64_t numel = 0;
  };

  absl::Status CreateCommunicator() {
    ncclUniqueId id;
    const std::string key = "nccl/unique_id";
    if (context_.identity.rank == 0) {
      GS_NCCL(ncclGetUniqueId(&id), nullptr);
      if (context_.identity.world_size > 1) {
        RETURN_IF_ERROR(
            Annotate(context_.rendezvous->Set(
                         key, absl::Base64Escape(absl::string_view(
                                  id.internal, sizeof(id.internal)))),
                     "nccl: rank 0 publishing the NCCL unique id"));
      }
    } else {
      absl::StatusOr<std::string> encoded =
          context_.rendezvous->Get(key, context_.timeout);
      if (!encoded.ok()) {
        return Annotate(encoded.status(),
                        absl::StrCat("nccl: rank ", context_.identity.rank,
                                     " waiting for rank 0's NCCL unique id"));
      }
      std::string raw;
      if (!absl::Base64Unescape(*encoded, &raw) ||
          raw.size() != sizeof(id.internal)) {
        return absl::DataLossError(absl::StrCat(
            "nccl: rank ", context_.identity.rank, ": the NCCL unique id under '", key,
            "' is not ", sizeof(id.internal), " bytes of base64"));
      }
      std::memcpy(id.internal, raw.data(), sizeof(id.internal));
    }
    // Non-blocking, so that a rank that never joins is a deadline error.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    GS_NCCL(ncclCommInitRankConfig(&comm_, context_.identity.world_size, id,
                                   context_.identity.rank, &config),
            comm_);
    return WaitForCommunicator(absl::StrCat("creating the communicator of ",
                                            context_.identity.world_size, " ranks"));
  }

  // The job's first lost member, if any (core/coordinator.h): a peer that is
  // gone never joins a collective, so a wait for one ends at once.
  absl::Status LostMember() const {
    return context_.rendezvous != nullptr && context_.rendezvous->has_lost()
               ? context_.rendezvous->lost()
               : absl::OkStatus();
  }

  // Aborts the communicator (the only way to free its stream) and keeps
  // `error` as the sync's error from now on.
  absl::Status AbortWith(absl::Status error) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    error_ = std::move(error);
    return error_;
  }

  // Polls a non-blocking communicator until its pending operation is done.
  absl::Status WaitForCommunicator(const std::string& what) {
    const absl::Time deadline = absl::Now() + context_.timeout;
    while (true) {
      ncclResult_t state = ncclSuccess;
      GS_NCCL(ncclCommGetAsyncError(comm_, &state), comm_);
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return Annotate(NcclStatus(state, "ncclCommGetAsyncError", comm_),
                        absl::StrCat("rank ", context_.identity.rank, " ", what));
      }
      if (absl::Status lost = LostMember(); !lost.ok()) {
        return AbortWith(Annotate(lost, absl::StrCat("nccl: rank ", context_.identity.rank, " ", what)));
      }
      if (absl::Now() >= deadline) {
        return AbortWith(absl::DeadlineExceededError(absl::StrCat(
            "nccl: rank ", context_.identity.rank, " ", what, ": not done after ",
            absl::FormatDuration(context_.timeout),
            " (a peer never joined or died; see its log)")));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  absl::Status Enqueue(int bucket) {
    if (bucket < 0 || bucket >= static_cast<int>(buckets_.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("nccl: BucketReady(", bucket, ") out of range (",
                       buckets_.size(), " buckets)"));
    }
    cudaEvent_t ready = ready_events_[bucket];
    GS_CUDA(cudaEventRecord(ready, compute_stream_));
    GS_CUDA(cudaStreamWaitEvent(comm_stream_, ready, 0));
    if (enqueued_ == 0) GS_CUDA(cudaEventRecord(start_event_, comm_stream_));
    float* data = grads_ + buckets_[bucket].offset;
    const ncclResult_t result =
        ncclAllReduce(data, data, static_cast<size_t>(buckets_[bucket].numel),
                      ncclFloat, ncclAvg, comm_, comm_stream_);
    GS_NCCL(result, comm_);
    // A non-blocking communicator may still be enqueuing; NCCL asks that it
    // finish before the next call on the communicator.
    if (result == ncclInProgress) {
      RETURN_IF_ERROR(WaitForCommunicator(
          absl::StrCat("enqueuing bucket ", bucket, " of step ", step_)));
    }
    ++enqueued_;
    return absl::OkStatus();
  }

  // Waits for `event` on the host, with the deadline, watching NCCL's errors.
  absl::Status WaitForEvent(cudaEvent_t event, const std::string& what) {
    const absl::Time deadline = absl::Now() + context_.timeout;
    while (true) {
      const cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) {
        return Annotate(CudaStatus(query, "cudaEventQuery"), what);
      }
      ncclResult_t state = ncclSuccess;
      GS_NCCL(ncclCommGetAsyncError(comm_, &state), comm_);
      if (state != ncclSuccess && state != ncclInProgress) {
        return Annotate(
            NcclStatus(state, "ncclAllReduce (asynchronous)", comm_),
            absl::StrCat("rank ", context_.identity.rank, ", ", what));
      }
      if (absl::Status lost = LostMember(); !lost.ok()) {
        return AbortWith(Annotate(lost, absl::StrCat("nccl: rank ", context_.identity.rank, ", ", what)));
      }
      if (absl::Now() >= deadline) {
        return AbortWith(absl::DeadlineExceededError(
            absl::StrCat("nccl: rank ", context_.identity.rank, ", ", what,
                         ": the all-reduces did not finish within ",
                         absl::FormatDuration(context_.timeout),
                         " (a peer is stuck or dead; see its log)")));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  void Release() {
    if (comm_ != nullptr) {
      // A communicator in an error state may have work that never ends;
      // only abort releases it.
      if (error_.ok()) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    for (cudaEvent_t& event : ready_events_) {
      if (event != nullptr) cudaEventDestroy(event);
      event = nullptr;
    }
    if (start_event_ != nullptr) cudaEventDestroy(start_event_);
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
    start_event_ = done_event_ = nullptr;
    comm_stream_ = nullptr;
  }

  const SyncContext context_;
  std::vector<Span> buckets_;
  float* grads_ = nullptr;
  int gpu_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaStream_t compute_stream_ = nullptr;  // the model's; NCCL waits on its events
  std::vector<cudaEvent_t> ready_events_;
  cudaEvent_t start_event_ = nullptr;
  cudaEvent_t done_event_ = nullptr;
  int enqueued_ = 0;
  int64_t step_ = 0;
  int64_t total_bytes_ = 0;
  absl::Status error_;
};

absl::StatusOr<std::unique_ptr<GradientSync>> CreateNcclSync(
    const SyncContext& context) {
  if (context.identity.world_size > 1 && context.rendezvous == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--sync=nccl with ", context.identity.world_size,
        " workers needs the coordinator to share NCCL's unique id"));
  }
  return std::unique_ptr<GradientSync>(new NcclSync(context));
}

}  // namespace

GRADSYNC_REGISTER_SYNC(nccl, CreateNcclSync);

}  // namespace gradsync
