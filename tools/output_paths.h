// The files a run writes at its end (--dump_params, --trace) and the folder
// it writes into throughout (--metrics_dir), checked when the process
// starts, before the data is loaded: a path that cannot be written would
// otherwise be found only after the whole run, its results lost, and some
// files of the run written beside none of the others. (--checkpoint has its
// own start-up check, core/optim/checkpoint_path.h.)
//
// "Can be written" means: the file is absent or a regular file, and its
// folder is a writable folder or can be created (the nearest part of its
// path that exists is a writable folder); the same for a folder the run
// writes into (--metrics_dir). The checks create and write nothing;
// PrepareWorkerOutputs then creates the missing folders, so that the
// files written at the end have theirs (a job on one machine may name a
// folder that another of its workers creates).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gradsync {

// `file`, given through `flag` ("--dump_params"), can be written. Empty: OK.
absl::Status CheckOutputFile(absl::string_view flag, const std::string& file);

// CheckOutputFile, then creates the file's folder where it is missing.
absl::Status PrepareOutputFile(absl::string_view flag, const std::string& file);

// `folder`, given through `flag` ("--metrics_dir"), exists as a writable
// folder or can be created. Empty: OK.
absl::Status CheckOutputFolder(absl::string_view flag,
                               const std::string& folder);

// What worker `rank` writes: its metrics folder, <dump_params>.worker<rank>,
// its timeline <trace>.worker<rank>.json and, worker 0, the job's merged
// timeline <trace> (core/train/worker_trace.h). Empty paths are not written.
struct WorkerOutputs {
  std::string metrics_dir;
  std::string dump_params;
  std::string trace;
};
absl::Status CheckWorkerOutputs(int rank, const WorkerOutputs& outputs);

// CheckWorkerOutputs, then creates the folders those paths need, each
// failure one error naming the flag and the path.
absl::Status PrepareWorkerOutputs(int rank, const WorkerOutputs& outputs);

}  // namespace gradsync
