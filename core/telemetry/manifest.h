// The manifest of a run: everything needed to reproduce or compare it — every
// gradsync flag with its value, the git commit, compiler, library versions and
// the machine. Written into every run summary and benchmark output.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace gradsync {

// Whether a flag defined in `file` (CommandLineFlag::Filename) is one of
// gradsync's own, which the manifest records; Abseil's and gRPC's are not.
bool IsGradsyncFlagFile(absl::string_view file);

// A JSON object (text). Flags are those defined in gradsync's own sources.
std::string ManifestJson();

// The git commit of the source tree: $GRADSYNC_GIT_COMMIT (set by tools/*.sh),
// else `git rev-parse HEAD` in the working directory, else "unknown".
std::string GitCommit();

}  // namespace gradsync
