// A worker's --trace timeline: the recorder every layer of the worker writes
// to, and at the end of the run the job's one Perfetto file, merged on
// worker 0 from every process's own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/telemetry/trace.h"

namespace gradsync {

// The recorder of worker `rank`, its tracks named, published as the current
// trace (before the strategy's Setup, so the strategy records its spans).
std::unique_ptr<TraceRecorder> StartWorkerTrace(int rank);

// Writes `trace` to this rank's file beside `path` and stops publishing it;
// returns that file's name.
absl::StatusOr<std::string> WriteWorkerTrace(TraceRecorder& trace,
                                             const std::string& path, int rank);

// Worker 0: merges `files` (every worker's and the strategy's own processes')
// into `path`. Not fatal when it cannot (no shared file system): the
// per-rank files are then the result, and a warning says so.
void MergeJobTrace(const std::vector<std::string>& files,
                   const std::string& path);

}  // namespace gradsync
