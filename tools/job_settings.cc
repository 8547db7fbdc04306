// A worker's training-relevant settings (see job_settings.h).
#include "tools/job_settings.h"

#include <algorithm>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/telemetry/manifest.h"
#include "tools/emulated_link.h"
#include "tools/ps_flags.h"

namespace gradsync {
namespace {

// The flags that may differ between the workers of one job. Everything else
// gradsync defines decides what is trained and how, so two workers that
// differ in it would train different models side by side. A flag added to
// gradsync is compared unless it is listed here.
constexpr absl::string_view kPerProcessFlags[] = {
    // Paths on this process's host: the same data set, checkpoint or token
    // may be mounted elsewhere on another host, and outputs are this
    // process's own (worker 0 alone writes the summary and the checkpoint).
    "data_dir",        // the data set's folder on this host
    "checkpoint",      // shared storage, mounted where this host mounts it
    "metrics_dir",     // this process's metrics folder
    "dump_params",     // this process's <path>.worker<rank>
    "trace",           // this process's <path>.worker<rank>.json
    "job_token_file",  // the token itself is checked by the coordinator
    "tls_cert",        // this process's certificate,
    "tls_key",         // its key,
    "tls_ca",          // and the CA file as stored on this host
    // This host's hardware and addresses.
    "gpus",               // GPU indices among this host's GPUs
    "threads",            // BLAS threads: this host's cores
    "bind",               // where worker 0's coordinator listens
    "ps_bind",            // where this process's parameter server listens
    "ps_advertise_host",  // this host's address as its peers reach it
    // Limits of this process's own waits and memory: they change no result,
    // and a host on slow storage or with less memory may need others.
    "timeout_s",
    "ps_idle_timeout_s",
    "ps_max_shard_mb",
    // Console only: worker 0 alone prints the progress line.
    "progress",
    // `gradsync launch`'s own flags (the same binary), which differ from
    // node to node by design; a worker is never given them.
    "node_rank",
    "master_addr",
    "advertise_host",
    "master_port",
    "run_dir",
    "max_processes",
};

// What a parameter server reads itself and shares with the workers (see
// ServerSettingsFromFlags); each is among the workers' settings too.
constexpr absl::string_view kServerFlags[] = {
    "ps_colocate",           // with the next: the servers' ranks
    "ps_colocated_servers",  // (tools/ps_flags.h ColocatedServersFromFlags)
    "ps_message_kb",         // the result messages' size
    "ps_stream_window_kb",   // the push streams' window
};

}  // namespace

absl::Span<const absl::string_view> ServerFlags() { return kServerFlags; }

WorkerSettings ServerSettingsFromFlags() {
  WorkerSettings settings;
  for (absl::string_view name : kServerFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;  // not linked: nothing to state
    settings.values[absl::StrCat("--", name)] = flag->CurrentValue();
  }
  return settings;
}

absl::StatusOr<PsStreamSettings> StreamSettingsOfThisProcess(int num_workers,
                                                             int num_servers) {
  ASSIGN_OR_RETURN(const int64_t message, MessageBytesFromFlags());
  ASSIGN_OR_RETURN(const int64_t window, StreamWindowBytesFromFlags());
  return ResolveStreamSettings(window, message, LinkFiguresOfThisProcess(),
                               num_workers, num_servers);
}

void StateDerivedStreamSettings(const PsStreamSettings& streams,
                                WorkerSettings* settings) {
  auto window = [](const ResolvedStreamWindow& w) {
    return absl::StrCat(w.bytes / 1024, " KiB, BDP probing ",
                        w.bdp_probe ? "on" : "off");
  };
  auto size = [](const ResolvedSetting& s) {
    return absl::StrCat(s.bytes / 1024, " KiB");
  };
  settings->values["derived ps_stream_window_kb.push"] =
      window(streams.push_window);
  settings->values["derived ps_stream_window_kb.pull"] =
      window(streams.pull_window);
  settings->values["derived ps_message_kb.push"] = size(streams.push_message);
  settings->values["derived ps_message_kb.pull"] = size(streams.pull_message);
  settings->derived_advice = absl::StrCat(
      "every worker and parameter server derives its streams' sizes from the "
      "--ps_* flags, the job's shape and the job's link (GRADSYNC_NETEM, "
      "else ",
      kJobLinkEnv,
      ", else unknown): give every process the same link, or fix the sizes "
      "with --ps_stream_window_kb and --ps_message_kb");
}

absl::Span<const absl::string_view> PerProcessFlags() {
  return kPerProcessFlags;
}

bool IsPerProcessFlag(absl::string_view name) {
  for (absl::string_view flag : kPerProcessFlags) {
    if (flag == name) return true;
  }
  return false;
}

WorkerSettings WorkerSettingsFromFlags() {
  WorkerSettings settings;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsGradsyncFlagFile(flag->Filename()) || IsPerProcessFlag(name)) {
      continue;
    }
    settings.values[absl::StrCat("--", name)] = flag->CurrentValue();
  }
  return settings;
}

std::vector<IgnoredFlag> FlagsIgnoredBy(absl::string_view sync,
                                        StrategyFlagUse use) {
  std::vector<IgnoredFlag> ignored;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    // Per-process flags (--ps_bind, which the launcher gives every worker)
    // say where this process listens, not how the strategy trains.
    if (flag->CurrentValue() == flag->DefaultValue() || IsPerProcessFlag(name))
      continue;
    const std::string file = flag->Filename();
    std::string why;
    if (!use.uses_servers && absl::StrContains(file, kPsFlagsFile)) {
      why = absl::StrCat("a parameter-server setting; --sync=", sync,
                         " runs no parameter servers");
    } else if (!use.uses_allreduce && absl::StrContains(file, "allreduce/")) {
      why = absl::StrCat("a setting of the CPU all-reduces; --sync=", sync,
                         " runs none");
    } else {
      continue;
    }
    ignored.push_back({std::string(name), flag->CurrentValue(), why});
  }
  std::sort(ignored.begin(), ignored.end(),
            [](const IgnoredFlag& a, const IgnoredFlag& b) {
              return a.name < b.name;
            });
  return ignored;
}

}  // namespace gradsync
