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
// The next step's forward may start before Finish (--overlap_next_forward):
// each enqueued all-reduce records a "reduced" event on the communication
// stream, and WaitBucket(b) makes the compute stream wait for bucket b's and
// waits on the host for it the way Finish waits for "done" (same deadline,
// same polling of NCCL's errors), so the trainer's per-bucket wait is the
// time the bucket's all-reduce was still running, as on the CPU strategies.
//
// The compute stream is, for now, the legacy default stream: an event recorded
// there completes only after all earlier work of every blocking stream on the
// device, so the ordering is right whichever (blocking) stream the CUDA device
// computes on. When the device exposes its stream, record there instead.
//
// The communicator, its set-up through the rendezvous and every wait on it
// (deadlines, asynchronous errors, lost peers, abort on failure) are
// allreduce/nccl/nccl_communicator.h, shared with the NCCL benchmark.
//
// One GPU per rank. NCCL 2.28 does not support several ranks of one
// communicator on one GPU: it refuses them ("Duplicate GPU detected"), and
// NCCL_HOSTID, which gets past that check, leaves a job that may hang and,
// on a multi-GPU node, without NVLink/P2P. Setup refuses a host with more
// ranks than visible GPUs.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "allreduce/nccl/nccl_communicator.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/device/cuda_device.h"
#include "core/device/gpu_selection.h"
#include "core/sync/gradient_sync.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

#define GS_CUDA(call) \
  RETURN_IF_ERROR(::gradsync::CudaCallStatus((call), #call, "nccl sync"))

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
    RETURN_IF_ERROR(CheckOneGpuPerRank());
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
    reduced_events_.resize(buckets_.size(), nullptr);
    enqueued_this_step_.assign(buckets_.size(), false);
    for (cudaEvent_t& event : ready_events_) {
      GS_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    for (cudaEvent_t& event : reduced_events_) {
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

  absl::Status WaitBucket(int bucket) override {
    if (!error_.ok()) return error_;
    if (bucket < 0 || bucket >= static_cast<int>(buckets_.size()) ||
        !enqueued_this_step_[bucket]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl: WaitBucket(", bucket, ") in step ", step_,
          " for a bucket not handed over this step (", buckets_.size(),
          " buckets)"));
    }
    // Work the trainer queues next on the compute stream (the bucket's
    // update, the layers that read it) runs after the all-reduce.
    GS_CUDA(cudaStreamWaitEvent(compute_stream_, reduced_events_[bucket], 0));
    if (absl::Status done = comm_->WaitForEvent(
            reduced_events_[bucket],
            absl::StrCat("waiting for bucket ", bucket, " of step ", step_));
        !done.ok()) {
      error_ = done;
      return error_;
    }
    return absl::OkStatus();
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
    if (absl::Status done = comm_->WaitForEvent(
            done_event_, absl::StrCat("waiting for step ", step_));
        !done.ok()) {
      error_ = done;
      return error_;
    }

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
    enqueued_this_step_.assign(buckets_.size(), false);
    ++step_;
    return absl::OkStatus();
  }

  absl::Status Shutdown() override {
    absl::Status status;
    if (comm_ != nullptr && error_.ok()) {
      status = comm_->Finalize();
      if (!status.ok()) error_ = status;
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

  absl::Status CheckOneGpuPerRank() const {
    int visible = 0;
    GS_CUDA(cudaGetDeviceCount(&visible));
    return OneGpuPerRank(context_.identity.local_world_size, visible);
  }

  absl::Status CreateCommunicator() {
    NcclCommunicatorOptions options;
    options.rank = context_.identity.rank;
    options.world_size = context_.identity.world_size;
    options.timeout = context_.timeout;
    options.owner = "nccl sync";
    ASSIGN_OR_RETURN(comm_,
                     NcclCommunicator::Create(options, context_.rendezvous));
    return absl::OkStatus();
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
    RETURN_IF_ERROR(comm_->CheckEnqueued(
        ncclAllReduce(data, data, static_cast<size_t>(buckets_[bucket].numel),
                      ncclFloat, ncclAvg, comm_->get(), comm_stream_),
        "ncclAllReduce",
        absl::StrCat("enqueuing bucket ", bucket, " of step ", step_)));
    GS_CUDA(cudaEventRecord(reduced_events_[bucket], comm_stream_));
    enqueued_this_step_[bucket] = true;
    ++enqueued_;
    return absl::OkStatus();
  }

  void Release() {
    // A failed communicator is aborted, a healthy one destroyed (its
    // destructor knows which).
    if (comm_ != nullptr && !error_.ok())
      comm_->AbortWith(error_).IgnoreError();
    comm_.reset();
    for (std::vector<cudaEvent_t>* events :
         {&ready_events_, &reduced_events_}) {
      for (cudaEvent_t& event : *events) {
        if (event != nullptr) cudaEventDestroy(event);
        event = nullptr;
      }
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
  std::unique_ptr<NcclCommunicator> comm_;
  cudaStream_t comm_stream_ = nullptr;
  cudaStream_t compute_stream_ =
      nullptr;  // the model's; NCCL waits on its events
  std::vector<cudaEvent_t> ready_events_;
  // Recorded on the communication stream after each bucket's all-reduce.
  std::vector<cudaEvent_t> reduced_events_;
  std::vector<bool> enqueued_this_step_;
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
    return absl::FailedPreconditionError(
        absl::StrCat("--sync=nccl with ", context.identity.world_size,
                     " workers needs a rendezvous to share NCCL's unique id"));
  }
  // ncclHalf/ncclBfloat16 with float32 staging would need a conversion
  // kernel and a second buffer per bucket, which no GPU here could check; a
  // refusal is honest where a silent float32 all-reduce would not be.
  if (context.compression.method != CompressionMethod::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compression=", context.compression.ToString(),
        " is not built for --sync=nccl; use --sync=ring or --sync=ps, or "
        "--compression=none with NCCL"));
  }
  // Priority needs what the GPU has finished, not what the host has queued:
  // the host enqueues a whole backward in advance, so an order picked at
  // enqueue time would put the first layers' bucket (computed last) at the
  // head of the stream and stall every collective behind it. Doing it right
  // takes a host thread that polls each bucket's ready event, agrees with
  // the other ranks on the prefix finished everywhere and waits for each
  // batch before it enqueues the next; none of that can be run here without
  // a GPU, so it is refused rather than shipped unchecked.
  if (context.schedule.kind == ScheduleKind::kPriority) {
    return absl::InvalidArgumentError(
        "--schedule=priority is not built for --sync=nccl (NCCL runs "
        "collectives in the host's enqueue order, which runs ahead of the "
        "GPU); use --schedule=fifo, or --sync=ring for priority");
  }
  return std::unique_ptr<GradientSync>(new NcclSync(context));
}

}  // namespace

GRADSYNC_REGISTER_SYNC(nccl, CreateNcclSync);

}  // namespace gradsync
