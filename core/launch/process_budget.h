// How many processes one machine can hold for a job, so that a typo in
// `gradsync launch --workers` is refused instead of forking until the OOM
// killer or the scheduler stops the machine. Every worker holds its own float32
// copy of the data set (about 262 MiB for Fashion-MNIST), so memory bounds a
// job long before the process table does; cores bound it too, loosely (16
// processes a core: the benchmarks oversubscribe on purpose, a thousand
// processes on two cores is no experiment).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace gradsync {

struct MachineCapacity {
  int cores = 1;
  int64_t available_bytes = 0;  // MemAvailable; 0: unknown
};

// This machine's cores (sched_getaffinity, else hardware_concurrency) and
// /proc/meminfo's MemAvailable.
MachineCapacity ThisMachine();

// The most processes `machine` holds at `bytes_per_process` each: the
// smaller of 16 per core and 80% of the available memory over the estimate.
int MaxLocalProcesses(const MachineCapacity& machine,
                      int64_t bytes_per_process);

// OK when `workers` workers of `bytes_per_worker` and `servers` servers of
// `bytes_per_server` fit on `machine`, or when `max_processes` > 0 (the
// user's own bound, --max_processes) allows them; otherwise
// InvalidArgument saying which bound they exceed and how to go beyond it.
absl::Status CheckLocalProcesses(int workers, int servers,
                                 int64_t bytes_per_worker,
                                 int64_t bytes_per_server,
                                 const MachineCapacity& machine,
                                 int max_processes);

}  // namespace gradsync
