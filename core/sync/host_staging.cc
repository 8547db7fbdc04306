// Host staging of a flat device buffer: the CPU pass-through, and in CUDA
// builds the pinned mirror with its copy streams and staging thread (see
// host_staging.h).
#include "core/sync/host_staging.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#ifdef GRADSYNC_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/device/cuda_device.h"
#endif

namespace gradsync {

HostStaging::HostStaging(const ParamLayout& layout) {
  for (const Bucket& bucket : layout.buckets()) {
    offsets_.push_back(bucket.offset);
    numels_.push_back(bucket.numel);
  }
}

namespace {

absl::Status CheckBucket(int bucket, size_t count) {
  if (bucket >= 0 && static_cast<size_t>(bucket) < count) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "host staging: bucket ", bucket, " out of range (", count, " buckets)"));
}

// The device buffer is host memory: nothing to copy.
class PassThroughStaging : public HostStaging {
 public:
  PassThroughStaging(const ParamLayout& layout, float* buffer)
      : HostStaging(layout), buffer_(buffer) {}

  float* host_buffer() override { return buffer_; }
  bool is_mirror() const override { return false; }
  void Download(int bucket, HostReadyCallback on_host) override {
    on_host(CheckBucket(bucket, offsets_.size()));
  }
  void Upload(int) override {}
  absl::Status UploadAll() override { return absl::OkStatus(); }
  absl::Status FinishStep() override { return absl::OkStatus(); }

 private:
  float* const buffer_;
};

#ifdef GRADSYNC_CUDA

// How the staging thread waits for a copy: cudaEventQuery in a loop, yielding
// for the first kSpinFor (a bucket's copy usually lands within microseconds
// of its backward), then sleeping kPollInterval between looks. Polling rather
// than cudaEventSynchronize so that the wait has a deadline.
constexpr absl::Duration kSpinFor = absl::Microseconds(200);
constexpr auto kPollInterval = std::chrono::microseconds(50);

class PinnedHostStaging : public HostStaging {
 public:
  PinnedHostStaging(const ParamLayout& layout, CudaDevice& device,
                    float* device_buffer, absl::Duration timeout)
      : HostStaging(layout),
        device_(device),
        device_buffer_(device_buffer),
        total_numel_(layout.total_numel()),
        timeout_(timeout) {}

  ~PinnedHostStaging() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
    cudaSetDevice(device_.gpu_index());
    absl::MutexLock upload_lock(&upload_mu_);
    for (cudaStream_t stream : {download_stream_, upload_stream_}) {
      if (stream != nullptr) {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
      }
    }
    if (host_ != nullptr) cudaFreeHost(host_);
  }

  absl::Status Initialize() {
    const std::string& name = device_.name();
    RETURN_IF_ERROR(device_.MakeCurrent());
    const size_t bytes = static_cast<size_t>(total_numel_) * sizeof(float);
    const cudaError_t error = cudaHostAlloc(reinterpret_cast<void**>(&host_),
                                            bytes, cudaHostAllocDefault);
    if (error != cudaSuccess) {
      cudaGetLastError();  // not sticky
      host_ = nullptr;
      return CudaCallStatus(error, absl::StrCat("cudaHostAlloc(", bytes, ")"),
                            name);
    }
    CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&download_stream_, cudaStreamNonBlocking),
        name);
    {
      absl::MutexLock lock(&upload_mu_);
      CUDA_RETURN_IF_ERROR(
          cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking),
          name);
    }
    for (size_t b = 0; b < offsets_.size(); ++b) {
      ASSIGN_OR_RETURN(CudaEvent computed, CudaEvent::Create(name));
      ASSIGN_OR_RETURN(CudaEvent downloaded, CudaEvent::Create(name));
      computed_.push_back(std::move(computed));
      downloaded_.push_back(std::move(downloaded));
    }
    ASSIGN_OR_RETURN(compute_done_, CudaEvent::Create(name));
    ASSIGN_OR_RETURN(uploaded_, CudaEvent::Create(name));
    thread_ = std::thread([this] { StagingLoop(); });
    return absl::OkStatus();
  }

  float* host_buffer() override { return host_; }
  bool is_mirror() const override { return true; }

  void Download(int bucket, HostReadyCallback on_host) override {
    absl::Status status = QueueDownload(bucket);
    if (!status.ok()) {
      Keep(status);
      on_host(std::move(status));
      return;
    }
    absl::MutexLock lock(&mu_);
    queue_.push_back(Pending{bucket, std::move(on_host)});
  }

  void Upload(int bucket) override {
    absl::Status status = CheckBucket(bucket, offsets_.size());
    if (status.ok()) status = device_.MakeCurrent();
    if (status.ok()) {
      const size_t bytes = static_cast<size_t>(numels_[bucket]) * sizeof(float);
      // Host-side, the strategy has already seen bucket's download complete,
      // so only the stream order of uploads matters here.
      absl::MutexLock lock(&upload_mu_);
      status = CudaCallStatus(
          cudaMemcpyAsync(device_buffer_ + offsets_[bucket],
                          host_ + offsets_[bucket], bytes,
                          cudaMemcpyHostToDevice, upload_stream_),
          absl::StrCat("cudaMemcpyAsync(bucket ", bucket, ", host to device, ",
                       bytes, " bytes)"),
          device_.name());
    }
    Keep(status);
  }

  absl::Status UploadAll() override {
    const std::string& name = device_.name();
    RETURN_IF_ERROR(device_.MakeCurrent());
    // Backward may still be reading these values on the GPU (parameters):
    // the copy waits for everything queued on the compute stream so far.
    RETURN_IF_ERROR(device_.RecordEvent(compute_done_.get()));
    absl::MutexLock lock(&upload_mu_);
    CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(upload_stream_, compute_done_.get(), 0), name);
    const size_t bytes = static_cast<size_t>(total_numel_) * sizeof(float);
    RETURN_IF_ERROR(CudaCallStatus(
        cudaMemcpyAsync(device_buffer_, host_, bytes, cudaMemcpyHostToDevice,
                        upload_stream_),
        absl::StrCat("cudaMemcpyAsync(whole buffer, host to device, ", bytes,
                     " bytes)"),
        name));
    return absl::OkStatus();
  }

  absl::Status FinishStep() override {
    const std::string& name = device_.name();
    RETURN_IF_ERROR(device_.MakeCurrent());
    {
      absl::MutexLock lock(&upload_mu_);
      CUDA_RETURN_IF_ERROR(cudaEventRecord(uploaded_.get(), upload_stream_),
                           name);
    }
    // On the GPU only: the host goes on queueing the optimizer step.
    RETURN_IF_ERROR(device_.WaitEvent(uploaded_.get()));
    absl::MutexLock lock(&mu_);
    return std::exchange(error_, absl::OkStatus());
  }

 private:
  struct Pending {
    int bucket;
    HostReadyCallback on_host;
  };

  absl::Status QueueDownload(int bucket) {
    RETURN_IF_ERROR(CheckBucket(bucket, offsets_.size()));
    const std::string& name = device_.name();
    RETURN_IF_ERROR(device_.MakeCurrent());
    cudaEvent_t computed = computed_[bucket].get();
    RETURN_IF_ERROR(device_.RecordEvent(computed));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(download_stream_, computed, 0),
                         name);
    const size_t bytes = static_cast<size_t>(numels_[bucket]) * sizeof(float);
    RETURN_IF_ERROR(CudaCallStatus(
        cudaMemcpyAsync(host_ + offsets_[bucket],
                        device_buffer_ + offsets_[bucket], bytes,
                        cudaMemcpyDeviceToHost, download_stream_),
        absl::StrCat("cudaMemcpyAsync(bucket ", bucket, ", device to host, ",
                     bytes, " bytes)"),
        name));
    CUDA_RETURN_IF_ERROR(
        cudaEventRecord(downloaded_[bucket].get(), download_stream_), name);
    return absl::OkStatus();
  }

  // Downloads complete in the order they were queued (one stream), so the
  // thread serves the queue front to back.
  void StagingLoop() {
    const absl::Status current = device_.MakeCurrent();
    while (true) {
      Pending pending;
      {
        // Waits for work, not for a peer: the destructor's stop_ ends it.
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &PinnedHostStaging::HasWorkOrStop));
        if (queue_.empty()) return;  // stopping, nothing left to deliver
        pending = std::move(queue_.front());
        queue_.pop_front();
      }
      absl::Status status =
          current.ok() ? WaitForDownload(pending.bucket) : current;
      Keep(status);
      pending.on_host(std::move(status));
    }
  }

  absl::Status WaitForDownload(int bucket) {
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + timeout_;
    cudaEvent_t event = downloaded_[bucket].get();
    while (true) {
      const cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) {
        return CudaCallStatus(
            query,
            absl::StrCat("cudaEventQuery(bucket ", bucket, " downloaded)"),
            device_.name());
      }
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "host staging on ", device_.name(), ": bucket ", bucket, "'s ",
            numels_[bucket] * 4, "-byte device-to-host copy not done after ",
            absl::FormatDuration(timeout_),
            " (the GPU is stuck behind earlier work)"));
      }
      if (now - start < kSpinFor) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kPollInterval);
      }
    }
  }

  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  }

  void Keep(const absl::Status& status) {
    if (status.ok()) return;
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = status;
  }

  CudaDevice& device_;
  float* const device_buffer_;
  const int64_t total_numel_;
  const absl::Duration timeout_;
  float* host_ = nullptr;  // pinned
  cudaStream_t download_stream_ = nullptr;
  // Uploads come from strategies' threads; their order on the stream matters.
  absl::Mutex upload_mu_;
  cudaStream_t upload_stream_ ABSL_GUARDED_BY(upload_mu_) = nullptr;
  std::vector<CudaEvent> computed_;    // per bucket, on the compute stream
  std::vector<CudaEvent> downloaded_;  // per bucket, on download_stream_
  CudaEvent compute_done_;             // UploadAll's order after compute
  CudaEvent uploaded_;                 // FinishStep's, on upload_stream_

  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The step's first error, returned by FinishStep.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

#endif  // GRADSYNC_CUDA

}  // namespace

absl::StatusOr<std::unique_ptr<HostStaging>> CreateHostStaging(
    Device& device, const ParamLayout& layout, float* device_buffer,
    absl::Duration timeout) {
  if (device_buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("host staging on ", device.name(), ": no device buffer"));
  }
  if (device.type() == DeviceType::kCpu) {
    return std::unique_ptr<HostStaging>(
        std::make_unique<PassThroughStaging>(layout, device_buffer));
  }
#ifdef GRADSYNC_CUDA
  CudaDevice* cuda = AsCudaDevice(device);
  if (cuda == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("host staging: ", device.name(), " is not a CudaDevice"));
  }
  auto staging = std::make_unique<PinnedHostStaging>(layout, *cuda,
                                                     device_buffer, timeout);
  RETURN_IF_ERROR(staging->Initialize());
  return std::unique_ptr<HostStaging>(std::move(staging));
#else
  return absl::UnimplementedError(absl::StrCat(
      "host staging on ", device.name(), ": this build has no CUDA"));
#endif
}

}  // namespace gradsync
