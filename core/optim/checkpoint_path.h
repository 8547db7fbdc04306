// Where a checkpoint will be written, checked when the run starts rather than
// at the first write (after --checkpoint_every steps of work) or at a read
// that throws: the path must be a regular file or absent, its folder must
// exist and be writable, and an existing checkpoint is continued only with
// --resume, or replaced only when the user says so (--overwrite_checkpoint):
// a run started after a crash without --resume must not silently overwrite
// the saved progress. A writer killed mid-write leaves <path>.tmp.<pid>
// (core/base/files.h), or the same beside a server's shard or a worker's
// error-feedback residual; such files of processes no longer alive are
// removed. A run that does not resume also removes an earlier run's
// residuals (<path>.residual<rank>[.previous], core/sync/error_feedback.h),
// which would otherwise sit beside its checkpoint as if they were its own.
//
// The parameter servers of --ps_update=server write their shards beside it,
// <path>.server<k> (and <path>.server<k>.previous, ps/server/shard.h): both
// worker 0 and each server check those with CheckCheckpointFile.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gradsync {

struct CheckpointPathOptions {
  bool resume = false;     // --resume: the checkpoint is continued
  bool overwrite = false;  // --overwrite_checkpoint: it may be replaced
  int num_servers = 0;     // K: also check <path>.server0..K-1
};

// OK when `path` is absent or a regular file; otherwise an error naming it
// ("... is a directory", "... is not a regular file"). Empty: OK.
absl::Status CheckCheckpointFile(const std::string& path);

// The whole start-up check above, for the process that writes `path` (worker
// 0) or a launcher before it starts the job. Removes stale temporary files
// first. Empty `path`: OK.
absl::Status CheckCheckpointPath(const std::string& path,
                                 const CheckpointPathOptions& options);

// Removes <path>.tmp.<pid>, <path>.server<k>[.previous].tmp.<pid> and
// <path>.residual<rank>[.previous].tmp.<pid> files in `path`'s folder whose
// process is gone;
// returns the ones removed. Files of live processes (a writer of another run
// at this moment) are kept.
std::vector<std::string> RemoveStaleTempFiles(const std::string& path);

}  // namespace gradsync
