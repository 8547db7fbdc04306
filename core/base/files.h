// Files every layer writes: results, checkpoints, traces, run folders.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gradsync {

// Writes `text` to `path` atomically (a temporary file in the same folder,
// flushed to disk, then renamed over `path`), so that a reader, or a run that
// resumes after a crash, never sees half a file. On failure nothing is left
// behind and `path` keeps what it held.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& text);

}  // namespace gradsync
