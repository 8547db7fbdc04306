// A worker's training-relevant settings, compared across the job at Join
// (WorkerSettings in core/cluster/coordinator.h): every gradsync flag the run's
// manifest records (core/telemetry/manifest.h), minus the few that
// legitimately differ from process to process — paths on this host, this
// host's devices and addresses, the deadlines of this process's own waits.
// The list of those is kept in job_settings.cc, each with its reason.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/cluster/coordinator.h"
#include "ps/settings.h"

namespace gradsync {

// This process's settings from the flags linked into it: `gradsync train`'s
// every training flag; a PyTorch worker's strategy flags (ps/, allreduce/).
// "--lr" -> "0.05", as the user writes them.
WorkerSettings WorkerSettingsFromFlags();

// A parameter server's (`gradsync server`) settings: the flags it reads
// itself that must equal the workers' — where the servers are
// (--ps_colocate, --ps_colocated_servers: its own server rank follows from
// them) and the sizes of its streams (--ps_message_kb,
// --ps_stream_window_kb), which the workers derive with it. The rest of what
// a server does (consistency, optimizer, keys) it is told by the workers.
// Compared by worker 0's coordinator with worker 0's values at Join.
WorkerSettings ServerSettingsFromFlags();

// The stream settings of a job with parameter servers (ps/settings.h
// PsStreamSettings) as this process derives them, before it joins, from the
// --ps_* flags, the job's link (GRADSYNC_NETEM, else GRADSYNC_LINK:
// tools/emulated_link.h) and the job's shape: `num_workers` workers and
// `num_servers` servers in all (colocated ones included). Every worker and
// every `gradsync server` derives them on its own.
absl::StatusOr<PsStreamSettings> StreamSettingsOfThisProcess(int num_workers,
                                                             int num_servers);

// Adds `streams` to `settings` as derived settings ("derived
// ps_stream_window_kb.push" -> "256 KiB, BDP probing off"), so that worker
// 0's coordinator compares them at Join like the flags: a worker or server
// given another link would size its streams apart from the others, and is
// refused naming both and the first such setting. Also sets
// `settings->derived_advice` (what the coordinator tells such a member).
void StateDerivedStreamSettings(const PsStreamSettings& streams,
                                WorkerSettings* settings);

// The flags ServerSettingsFromFlags states, without "--".
absl::Span<const absl::string_view> ServerFlags();

// Whether flag `name` (without "--") may differ between the workers of one
// job, and so is not compared.
bool IsPerProcessFlag(absl::string_view name);

// Every such flag, for the test that each names a flag of gradsync.
absl::Span<const absl::string_view> PerProcessFlags();

// A strategy's flag given a value other than its default, which the chosen
// strategy does not read: a parameter-server flag (tools/ps_flags.cc) under a
// strategy without servers, an all-reduce flag (allreduce/) under one that
// runs no CPU all-reduce.
struct IgnoredFlag {
  std::string name;   // "ps_consistency"
  std::string value;  // "asp"
  std::string why;    // "a parameter-server setting; --sync=ring has none"
};

// What the strategy --sync=`sync` reads: `uses_servers` for the PS's flags,
// `uses_allreduce` for the CPU all-reduce family's.
struct StrategyFlagUse {
  bool uses_servers = false;
  bool uses_allreduce = false;
};

// The strategies' flags this process was given that `sync` ignores, in name
// order. A flag left at its default is never listed (Debian's Abseil keeps
// "given on the command line" private: a changed value is what was given).
std::vector<IgnoredFlag> FlagsIgnoredBy(absl::string_view sync,
                                        StrategyFlagUse use);

}  // namespace gradsync
