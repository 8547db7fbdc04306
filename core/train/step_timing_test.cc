// The rule that combines the host's and the device's timelines of a step
// (step_timing.h), on synthetic timelines: the CPU's single clock, a GPU whose
// host queues the step long before the GPU runs it, a strategy that waits on
// the host, one that makes the GPU wait, a device still busy at the step's
// start, and a launch-bound GPU.
#include "core/train/step_timing.h"

#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace {

// The rule's arithmetic is exact but for the rounding of the decimal inputs.
constexpr double kTol = 1e-9;

// A mark on a device whose clock is the host's, shifted by `offset`: reached
// `lag` ms after it was recorded.
StepMark Mark(double host_ms, double offset, double lag = 0) {
  return StepMark{host_ms, host_ms + lag - offset};
}

// The CPU: one clock, every mark reached as it is recorded. Compute is the
// host's forward + backward, exposed communication the wait in Finish.
TEST(StepTimingTest, OneClockGivesTheHostsSpans) {
  const double offset = 0.25;  // when the device clock's zero was recorded
  StepMarks marks;
  marks.start = Mark(0.25, offset);
  marks.compute_start = Mark(2.0, offset);  // data loaded
  marks.bucket_ready = {Mark(7.0, offset), Mark(11.0, offset)};
  marks.compute_end = Mark(12.0, offset);
  marks.synced = Mark(15.5, offset);  // Finish waited 3.5 ms
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_NEAR(times.device_offset_ms, offset, kTol);
  EXPECT_NEAR(times.compute_start_ms, 2.0, kTol);
  EXPECT_NEAR(times.compute_ms, 10.0, kTol);
  EXPECT_NEAR(times.compute_end_ms, 12.0, kTol);
  EXPECT_NEAR(times.sync_end_ms, 15.5, kTol);
  EXPECT_NEAR(times.sync_wait_ms, 3.5, kTol);
  ASSERT_EQ(times.bucket_ready_ms.size(), 2u);
  EXPECT_NEAR(times.bucket_ready_ms[0], 7.0, kTol);
  EXPECT_NEAR(times.bucket_ready_ms[1], 11.0, kTol);
  EXPECT_TRUE(times.tensor_final_ms.empty());
}

// A GPU under --sync=local: the host queues forward and backward in 4 ms and
// returns from Finish at once; the GPU, idle at the step's start, runs them
// for 26 ms. Compute is the GPU's, and nothing is exposed.
TEST(StepTimingTest, HostQueueingLongBeforeTheGpuExposesNothing) {
  StepMarks marks;
  marks.start = {0.1, 0.0};          // reached as recorded: the GPU was idle
  marks.compute_start = {0.6, 0.3};  // after the batch's copy
  marks.bucket_ready = {{2.0, 14.0}, {3.5, 25.9}};
  marks.compute_end = {4.1, 26.3};
  marks.synced = {4.2, 26.31};
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_NEAR(times.device_offset_ms, 0.6 - 0.3, kTol);
  EXPECT_NEAR(times.compute_ms, 26.0, kTol);
  EXPECT_NEAR(times.compute_end_ms, 0.3 + 26.3, kTol);
  EXPECT_NEAR(times.sync_wait_ms, 0.01, 1e-9);
  // Bucket-ready times are when the GPU finished the gradients, not when
  // their kernels were queued.
  EXPECT_NEAR(times.bucket_ready_ms[0], 0.3 + 14.0, kTol);
  EXPECT_NEAR(times.bucket_ready_ms[1], 0.3 + 25.9, kTol);
}

// The same GPU under a strategy that waits on the host (host staging: the
// gradients are copied out, summed over TCP, copied back): the wait covers
// the GPU's backward, but only the part after the GPU's compute is exposed.
TEST(StepTimingTest, HostWaitCountsOnlyBeyondTheGpusCompute) {
  StepMarks marks;
  marks.start = {0.0, 0.0};
  marks.compute_start = {0.5, 0.2};
  marks.bucket_ready = {{2.0, 10.0}, {3.0, 20.0}};
  marks.compute_end = {4.0, 20.2};
  marks.synced = {35.0, 34.7};  // reached as recorded: the GPU was idle
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_NEAR(times.device_offset_ms, 0.3, kTol);
  EXPECT_NEAR(times.compute_ms, 20.0, kTol);
  EXPECT_NEAR(times.compute_end_ms, 20.5, kTol);
  EXPECT_NEAR(times.sync_end_ms, 35.0, kTol);
  EXPECT_NEAR(times.sync_wait_ms, 35.0 - 20.5, kTol);
}

// A strategy that returns from Finish at once but makes the compute stream
// wait for its own (NCCL): the host's wait is nil, the GPU's is not.
TEST(StepTimingTest, DeviceSideWaitIsExposedToo) {
  StepMarks marks;
  marks.start = {0.0, 0.0};
  marks.compute_start = {0.4, 0.1};
  marks.compute_end = {4.0, 20.1};
  marks.synced = {4.1, 27.1};  // behind the all-reduce's event
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_NEAR(times.compute_ms, 20.0, kTol);
  EXPECT_NEAR(times.sync_wait_ms, 7.0, kTol);
}

// A GPU still busy when the step started (work queued without a wait since
// the last step): the first mark is reached late, and a later mark the GPU
// reached as it was recorded (the synced mark after a host wait) sets the
// offset. Timing against the first mark alone would put the GPU's end of
// compute 5 ms too early and expose 5 ms that the GPU spent computing.
TEST(StepTimingTest, OffsetComesFromTheMarkTheDeviceReachedAtOnce) {
  const double offset = 5.0;  // the device reached the first mark 5 ms late
  StepMarks marks;
  marks.start = Mark(0.0, offset, 5.0);
  marks.compute_start = Mark(0.5, offset, 4.8);
  marks.compute_end = Mark(3.0, offset, 22.0);
  marks.synced = Mark(30.0, offset);
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_NEAR(times.device_offset_ms, offset, kTol);
  EXPECT_NEAR(times.compute_end_ms, 25.0, kTol);
  EXPECT_NEAR(times.sync_wait_ms, 5.0, kTol);
  EXPECT_NEAR(times.compute_ms, 20.0 - 0.3, kTol);
}

// A launch-bound GPU (small model): every kernel finishes before the host
// queues the next, so the device's marks are reached as recorded and compute
// on the device equals the host's queueing.
TEST(StepTimingTest, LaunchBoundDeviceMatchesTheHost) {
  StepMarks marks;
  marks.start = {0.0, 0.0};
  marks.compute_start = {0.2, 0.2};
  marks.bucket_ready = {{0.9, 0.9}};
  marks.compute_end = {1.0, 1.0};
  marks.synced = {1.0, 1.0};
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_NEAR(times.compute_ms, 0.8, kTol);
  EXPECT_NEAR(times.compute_end_ms, 1.0, kTol);
  EXPECT_NEAR(times.sync_wait_ms, 0.0, kTol);
}

// Exposed communication is never negative, and a step whose marks were
// recorded in one order keeps it on the host's clock.
TEST(StepTimingTest, TimesAreOrderedAndNeverNegative) {
  StepMarks marks;
  marks.start = {0.0, 0.0};
  marks.compute_start = {1.0, 0.5};
  marks.compute_end = {5.0, 30.0};
  // Recorded before the device reached compute_end's mark on a stream the
  // strategy did not wait on: the device's time says it came first.
  marks.synced = {5.1, 29.0};
  marks.tensor_final = {{2.0, 10.0}, {3.0, 20.0}, {4.9, 29.9}};
  const StepTimes times = StepTimesFromMarks(marks);
  EXPECT_GE(times.sync_wait_ms, 0.0);
  EXPECT_LE(times.compute_start_ms, times.compute_end_ms);
  ASSERT_EQ(times.tensor_final_ms.size(), 3u);
  EXPECT_LE(times.compute_start_ms, times.tensor_final_ms[0]);
  EXPECT_LE(times.tensor_final_ms[0], times.tensor_final_ms[1]);
  EXPECT_LE(times.tensor_final_ms[1], times.tensor_final_ms[2]);
  EXPECT_LE(times.tensor_final_ms[2], times.compute_end_ms);
}

}  // namespace
}  // namespace gradsync
