// One step's times from the host's and the device's clocks (step_timing.h).
#include "core/train/step_timing.h"

#include <algorithm>

namespace gradsync {
namespace {

// Rule 1: the smallest offset at which no mark is reached before it was
// recorded.
double DeviceOffset(const StepMarks& marks) {
  double offset = marks.start.host_ms - marks.start.device_ms;
  auto consider = [&offset](const StepMark& mark) {
    offset = std::max(offset, mark.host_ms - mark.device_ms);
  };
  consider(marks.compute_start);
  consider(marks.compute_end);
  consider(marks.synced);
  for (const StepMark& mark : marks.bucket_ready) consider(mark);
  for (const StepMark& mark : marks.tensor_final) consider(mark);
  return offset;
}

}  // namespace

StepTimes StepTimesFromMarks(const StepMarks& marks) {
  StepTimes times;
  const double offset = DeviceOffset(marks);
  times.device_offset_ms = offset;
  // With the offset of rule 1 every mark's device time on the host's clock
  // is at or after its recording; the max says so for readers, and keeps
  // rule 3 and 4 true for any offset.
  auto on_host = [offset](const StepMark& mark) {
    return std::max(mark.host_ms, offset + mark.device_ms);
  };
  times.compute_start_ms = on_host(marks.compute_start);
  times.compute_end_ms = on_host(marks.compute_end);
  times.sync_end_ms = on_host(marks.synced);
  times.compute_ms = std::max(
      0.0, marks.compute_end.device_ms - marks.compute_start.device_ms);
  times.sync_wait_ms = std::max(0.0, times.sync_end_ms - times.compute_end_ms);
  times.bucket_ready_ms.reserve(marks.bucket_ready.size());
  for (const StepMark& mark : marks.bucket_ready)
    times.bucket_ready_ms.push_back(on_host(mark));
  times.tensor_final_ms.reserve(marks.tensor_final.size());
  for (const StepMark& mark : marks.tensor_final)
    times.tensor_final_ms.push_back(on_host(mark));
  return times;
}

}  // namespace gradsync
