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

// Whether `path` exists and is a directory (links followed).
bool IsDirectory(const std::string& path);
// Whether `path` exists and is not a directory (links followed): a regular
// file, or a device or pipe a reader can open as one.
bool IsFile(const std::string& path);

// The path of this process's own executable (/proc/self/exe), to find the
// programs and scripts installed beside it; "" where it cannot be read.
std::string ThisExecutable();

}  // namespace gradsync
