// The host's clock as a DeviceClock (device_clock.h).
#include "core/device/device_clock.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::Status CheckMarkIndex(int index, int marks) {
  if (index >= 0 && index < marks) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("device clock mark ", index,
                                            " outside [0, ", marks, ")"));
}

absl::Status MarkNotRecorded(int index) {
  return absl::FailedPreconditionError(absl::StrCat(
      "device clock mark ", index, " read before it was ever recorded"));
}

HostDeviceClock::HostDeviceClock(int marks)
    : times_(std::max(marks, 0)), recorded_(std::max(marks, 0), false) {}

absl::Status HostDeviceClock::Record(int index) {
  absl::Status valid = CheckMarkIndex(index, marks());
  if (!valid.ok()) return valid;
  times_[index] = Clock::now();
  recorded_[index] = true;
  return absl::OkStatus();
}

absl::StatusOr<double> HostDeviceClock::ElapsedMs(int from, int to) {
  for (int index : {from, to}) {
    absl::Status valid = CheckMarkIndex(index, marks());
    if (!valid.ok()) return valid;
    if (!recorded_[index]) return MarkNotRecorded(index);
  }
  return std::chrono::duration<double, std::milli>(times_[to] - times_[from])
      .count();
}

}  // namespace gradsync
