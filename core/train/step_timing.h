// How a step's compute time and exposed communication come out of two
// clocks: the host's, on which the trainer queues work and waits for the
// strategy, and the device's (core/device/device_clock.h), on which the work
// runs. On the CPU the two are one clock; on CUDA the host queues forward and
// backward in a few milliseconds and the GPU runs them for much longer, so
// neither clock alone gives compute or exposed communication.
//
// One rule for every device, in StepTimesFromMarks:
//   1. Put the device's marks on the host's clock. The device cannot reach a
//      mark before the host has recorded it, so the device's offset is at
//      least host − device for every mark; the offset is the largest of
//      these. It is exact where the device was idle when a mark was recorded
//      (the step's first mark: the previous step ended by waiting for the
//      device) and equal to the single clock on the CPU.
//   2. compute_ms is the device's time from the start of forward to the end
//      of backward.
//   3. Compute ends at the later of the host's end of queueing backward and
//      the device's end of backward (on the host's clock).
//   4. Synchronization ends at the later of the host's return from Finish and
//      the device passing the mark recorded right after it (a strategy that
//      makes the compute stream wait for its own stream, as NCCL does, moves
//      the second; one that waits on the host moves the first).
//   5. Exposed communication (sync_wait_ms) is the time from the end of
//      compute to the end of synchronization, never below zero: a step that
//      waits for nothing beyond its compute exposes none, whichever clock
//      its wait was on.
#pragma once

#include <vector>

namespace gradsync {

// One mark of a step on both clocks.
struct StepMark {
  // The host's clock when the trainer recorded the mark, in ms since the
  // step's start.
  double host_ms = 0;
  // The device's clock when the device reached it, in ms since it reached
  // the step's first mark (StepMarks::start).
  double device_ms = 0;
};

// The marks the trainer records in one step, in the order it records them.
struct StepMarks {
  StepMark start;          // the step's start, before its batch is copied
  StepMark compute_start;  // before forward
  StepMark compute_end;    // after backward was queued (host: queueing done)
  StepMark synced;         // right after GradientSync::Finish returned
  // As each bucket's last gradient was final (handed to the strategy).
  std::vector<StepMark> bucket_ready;
  // As each tensor's gradient was final, in hand-off order; traced steps only
  // (empty otherwise).
  std::vector<StepMark> tensor_final;
};

// The step's times on the host's clock, in ms since the step's start.
struct StepTimes {
  double device_offset_ms = 0;  // the device's start on the host's clock
  double compute_start_ms = 0;  // forward started on the device
  double compute_end_ms = 0;    // rule 3
  double sync_end_ms = 0;       // rule 4
  double compute_ms = 0;        // rule 2
  double sync_wait_ms = 0;      // rule 5: exposed communication
  std::vector<double> bucket_ready_ms;
  std::vector<double> tensor_final_ms;
};

StepTimes StepTimesFromMarks(const StepMarks& marks);

}  // namespace gradsync
