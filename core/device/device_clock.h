// A clock on a device's own timeline, for timing work where it runs.
//
// A DeviceClock holds a fixed number of marks, made at set-up. Record(i)
// puts mark i into the device's work queue: the device reaches it when all
// work queued before the call is done. ElapsedMs(a, b) reads the device time
// between two recorded marks. On a device that queues work (CUDA) a mark is a
// timing event recorded on the compute stream, reached when the GPU gets
// there, not when the host queued the work; on the CPU, where every kernel
// runs on the calling thread before it returns, a mark is the host's steady
// clock at the call.
//
// Reading does not stall a step that already waits for its device: read the
// marks after the step's synchronization point (the trainer reads them after
// copying the loss to the host, which waits for the compute stream), when
// the device has passed every mark of the step.
#pragma once

#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gradsync {

class DeviceClock {
 public:
  virtual ~DeviceClock() = default;

  // How many marks this clock holds (indices 0 .. marks() - 1).
  virtual int marks() const = 0;
  // Records mark `index` at this point of the device's queued work, replacing
  // its earlier recording. Cheap enough for every step (no allocation, no
  // wait).
  virtual absl::Status Record(int index) = 0;
  // Milliseconds of device time from mark `from` to mark `to` (negative when
  // the device reached `to` first). Both must have been recorded; waits for
  // the device to pass them if it has not yet.
  virtual absl::StatusOr<double> ElapsedMs(int from, int to) = 0;
};

// The clock of a device that runs its work on the calling thread: a mark is
// the host's steady clock when Record is called. The CPU device's clock, and
// the default of Device::CreateClock.
class HostDeviceClock : public DeviceClock {
 public:
  explicit HostDeviceClock(int marks);

  int marks() const override { return static_cast<int>(times_.size()); }
  absl::Status Record(int index) override;
  absl::StatusOr<double> ElapsedMs(int from, int to) override;

 private:
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> times_;
  std::vector<bool> recorded_;
};

// The errors every DeviceClock gives for a bad index or a mark never
// recorded, so that the backends say the same thing.
absl::Status CheckMarkIndex(int index, int marks);
absl::Status MarkNotRecorded(int index);

}  // namespace gradsync
