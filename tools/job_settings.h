// A worker's training-relevant settings, compared across the job at Join
// (WorkerSettings in core/cluster/coordinator.h): every gradsync flag the run's
// manifest records (core/telemetry/manifest.h), minus the few that
// legitimately differ from process to process — paths on this host, this
// host's devices and addresses, the deadlines of this process's own waits.
// The list of those is kept in job_settings.cc, each with its reason.
#pragma once

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/cluster/coordinator.h"

namespace gradsync {

// This process's settings from the flags linked into it: `gradsync train`'s
// every training flag; a PyTorch worker's strategy flags (ps/, allreduce/).
// "--lr" -> "0.05", as the user writes them.
WorkerSettings WorkerSettingsFromFlags();

// Whether flag `name` (without "--") may differ between the workers of one
// job, and so is not compared.
bool IsPerProcessFlag(absl::string_view name);

// Every such flag, for the test that each names a flag of gradsync.
absl::Span<const absl::string_view> PerProcessFlags();

}  // namespace gradsync
