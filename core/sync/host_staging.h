// A host-memory view of one flat device buffer (gradients, or parameters),
// bucket by bucket, for strategies that communicate from host memory (the TCP
// ring, the parameter server) when the model runs on a GPU.
//
// On a CUDA device it is a pinned (page-locked) mirror of the buffer:
//   Download(b, on_host)  records an event on the compute stream after the
//                         work queued so far (bucket b's backward), queues
//                         b's device-to-host copy on a copy stream behind
//                         that event, and returns at once; a staging thread
//                         calls on_host(status) when the copy has landed.
//   Upload(b)             queues b's host-to-device copy (the strategy has
//                         overwritten b's host span with the result) on a
//                         second copy stream, so uploads of early buckets
//                         overlap downloads of late ones. Any thread.
//   UploadAll()           the whole mirror to the device, ordered after all
//                         work queued on the compute stream (parameters that
//                         backward may still read).
//   FinishStep()          makes the compute stream wait, on the GPU, for the
//                         uploads, so the optimizer queued next sees them;
//                         returns the step's first error.
// Nothing synchronizes the device, and every host wait has a deadline.
//
// On a CPU device the device buffer is host memory already: host_buffer() is
// the buffer itself, Download calls on_host at once on the caller's thread,
// and the rest do nothing. So a strategy written against this class runs
// unchanged on both backends. Because on_host may run inline, call Download
// without holding a lock that on_host takes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"

namespace gradsync {

class HostStaging {
 public:
  // Receives OK, or why bucket's host copy is not valid (a failed copy, a
  // missed deadline). Runs on the staging thread (CUDA) or inline (CPU).
  using HostReadyCallback = std::function<void(absl::Status)>;

  virtual ~HostStaging() = default;

  // layout.total_numel() floats laid out as the device buffer.
  virtual float* host_buffer() = 0;
  float* host_bucket(int bucket) { return host_buffer() + offsets_[bucket]; }
  // True when host_buffer() is a separate pinned copy (a GPU device).
  virtual bool is_mirror() const = 0;

  virtual void Download(int bucket, HostReadyCallback on_host) = 0;
  virtual void Upload(int bucket) = 0;
  virtual absl::Status UploadAll() = 0;
  virtual absl::Status FinishStep() = 0;

 protected:
  explicit HostStaging(const ParamLayout& layout);
  std::vector<int64_t> offsets_;  // per bucket, in floats
  std::vector<int64_t> numels_;
};

// The staging of `device_buffer` (device memory of layout.total_numel()
// floats) on `device`; `timeout` bounds each host wait for a copy. Set-up
// only: allocates the pinned mirror, streams, events and the thread.
absl::StatusOr<std::unique_ptr<HostStaging>> CreateHostStaging(
    Device& device, const ParamLayout& layout, float* device_buffer,
    absl::Duration timeout);

}  // namespace gradsync
