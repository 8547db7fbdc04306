// The parameter server's settings for one job, in one place: what the edge
// parsed (explicit values, 0 meaning "auto"; the link), the model's layout
// and the job's shape go in, one PsSettings value comes out, each field with
// its value and its reason. The start-up log lines, the warnings, the
// manifest entries, the colocated server's options and the registration the
// servers check are all filled from that value, so what a job logs is what
// it runs.
//
//   flags, $GRADSYNC_NETEM ──(tools/)──> PsSettingsInputs ─┐
//   ParamLayout ───────────────────────────────────────────┼─> ResolvePsSettings
//   N, K, colocated servers ───────────────────────────────┘        │
//                                                                  PsSettings
//                    LogLines, Warnings, ManifestEntries, client and server options
//
// Each "auto" value comes from its rule, a small pure file: the key size from
// the layout and the servers' shares (key_size_rule.h), the push and pull
// streams' windows from the link and the fan-in, and their messages from the
// windows (stream_window_rule.h), the pulls' encoding from --compression
// (key_compression.h), the warnings from setting_checks.h. Every worker and
// server derives the same values from the same layout, N, K and link, so
// nothing is broadcast. Links no flag library and reads no environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/optim/optimizer_options.h"
#include "core/sync/compression.h"
#include "core/sync/param_layout.h"
#include "core/sync/schedule.h"
#include "proto/parameter_server.pb.h"
#include "ps/consistency.h"
#include "ps/credit_rule.h"
#include "ps/key_compression.h"
#include "ps/key_size_rule.h"
#include "ps/client/partitioner.h"
#include "ps/stream_window_rule.h"

namespace gradsync {

// Largest payload of one message: well below gRPC's default 4 MiB receive
// limit, leaving room for the header and framing.
constexpr int64_t kMaxMessageBytes = int64_t{3} << 20;
// HTTP/2's window is a signed 31-bit count of bytes.
constexpr int64_t kMaxStreamWindowBytes = int64_t{1} << 30;
// The push and pull streams' flow-control window where nobody sized it: a
// fixed window instead of gRPC's 64 KiB start grown by BDP probing, with
// which the servers' results waited for window updates
// (docs/results/ps-bandwidth-model.md, "Notes from the code"). The auto
// window keeps the probing on where a stream's share of the link's
// bandwidth-delay product outgrows a connection's fixed window
// (stream_window_rule.h).
constexpr int64_t kDefaultStreamWindowBytes = int64_t{4} << 20;

// A server holding more than this times its share is warned about.
constexpr double kImbalanceWarning = 1.25;

// A size and why it has it.
struct ResolvedSetting {
  int64_t bytes = 0;
  std::string source;  // "flag" or "auto: ..."
};

// A stream window and whether gRPC's BDP probing stays on beside it.
struct ResolvedStreamWindow {
  int64_t bytes = 0;
  bool bdp_probe = false;
  std::string source;  // "flag" or "auto: ..."
};

// `explicit_bytes` > 0 wins (source "flag": that fixed window, BDP probing
// off, as --ps_stream_window_kb says); 0 asks the rule, which also decides
// the probing from the link (stream_window_rule.h).
ResolvedStreamWindow ResolveStreamWindow(int64_t explicit_bytes,
                                         const LinkFigures& link, int fan_in);
// The largest message on streams with `window`: `explicit_bytes` > 0 wins
// (--ps_message_kb), 0 asks the rule (stream_window_rule.h).
ResolvedSetting ResolveMessageSize(int64_t explicit_bytes,
                                   const ResolvedStreamWindow& window);
absl::StatusOr<ResolvedSetting> ResolveKeySize(
    int64_t explicit_bytes, const ParamLayout& layout,
    const std::vector<double>& shares, int num_workers);

// Where a server holds more than kImbalanceWarning times its share: one
// message naming the server, its load, the key size that ran and the one
// that fixes it (the rule's). nullopt when every server is within bounds.
std::optional<std::string> ImbalanceWarning(const Partition& partition,
                                            const KeySizeChoice& rule);

// The streams' side of the settings, which a `gradsync server` derives on its
// own (it knows N, K and the link but not the layout) exactly as the workers
// do.
struct PsStreamSettings {
  ResolvedStreamWindow push_window;  // the servers' receive side (fan-in N)
  ResolvedStreamWindow pull_window;  // the workers' receive side (fan-in K)
  ResolvedSetting push_message;      // the pushes' largest message
  ResolvedSetting pull_message;      // the results' (and a server's block)
};

// `stream_window_bytes`, `message_bytes`: the explicit values (0: auto).
PsStreamSettings ResolveStreamSettings(int64_t stream_window_bytes,
                                       int64_t message_bytes,
                                       const LinkFigures& link,
                                       int num_workers, int num_servers);

// Everything a worker's settings are derived from besides the layout: what
// the user asked for (as the edge parsed it) and the job's shape.
struct PsSettingsInputs {
  // Explicit sizes; 0: auto (their rules).
  int64_t chunk_bytes = 0;
  int64_t message_bytes = 0;
  int64_t stream_window_bytes = 0;
  LinkFigures link;
  ps::UpdateMode update_mode = ps::UPDATE_WORKER;
  ConsistencyOptions consistency;
  PartitionPolicy partition = PartitionPolicy::kEqual;
  PsPull pull = PsPull::kAuto;
  CompressionSpec compression;
  // Server mode: the workers' optimizer (the warnings read it too).
  OptimizerOptions optimizer;
  // Every RPC's deadline (--timeout_s), checked against the predicted step.
  absl::Duration timeout = absl::Seconds(60);
  // The job: N workers, K servers of which the first `colocated_servers`
  // run inside workers 0..colocated_servers-1.
  int num_workers = 1;
  int num_servers = 1;
  int colocated_servers = 0;
  // --schedule, --partition_kb, --credit_kb (core/sync/schedule.h). Under
  // priority the PS's partition is its key: --partition_kb sets the key
  // size as --ps_chunk_kb does (both given and different: refused), and
  // 0 leaves it to the key-size rule, so fifo and priority cut the same
  // keys by default and differ only in the order they send them in.
  ScheduleOptions schedule;
};

// One manifest entry: "settings": {name: {"value": value, "source": source}}.
struct PsManifestEntry {
  std::string name;
  double value = 0;
  std::string source;
};

// One job's parameter-server settings, each with its reason.
struct PsSettings {
  ResolvedSetting key_size;
  PsStreamSettings streams;
  // --schedule; under priority, the bytes in flight per server for pushes
  // and for pulls (credit_rule.h, or --credit_kb). Zero under fifo.
  ScheduleKind schedule = ScheduleKind::kFifo;
  ResolvedSetting push_credit;
  ResolvedSetting pull_credit;
  // --ps_pull resolved against --compression and --ps_update.
  PsPull pull = PsPull::kDense;
  // The servers' target shares of the bytes (--ps_partition).
  std::vector<double> shares;
  // As given (PsSettingsInputs), for the registration and the summary.
  ps::UpdateMode update_mode = ps::UPDATE_WORKER;
  ConsistencyOptions consistency;
  PartitionPolicy partition = PartitionPolicy::kEqual;
  CompressionSpec compression;
  OptimizerOptions optimizer;
  // Where the keys went (Partition::Describe), and the warnings for this
  // job's settings (setting_checks.h, ImbalanceWarning), worst first.
  std::string placement;
  std::vector<std::string> warnings;

  // The start-up lines worker 0 logs ("ps: key size 64 KiB (auto: ...)").
  std::vector<std::string> LogLines() const;
  // The manifest's entries: ps_chunk_kb, ps_stream_window_kb.{push,pull},
  // ps_message_kb.{push,pull}; under priority ps_credit_kb.{push,pull}.
  std::vector<PsManifestEntry> ManifestEntries() const;
  // The optimizer as the registration carries it (server mode).
  ps::OptimizerConfig OptimizerProto() const;
};

// Resolves every setting for `layout` and places its keys: `*partition`
// receives the partition the settings describe (the workers' client and
// the servers' registration use it). Errors name the setting.
absl::StatusOr<PsSettings> ResolvePsSettings(const PsSettingsInputs& inputs,
                                             const ParamLayout& layout,
                                             Partition* partition);

}  // namespace gradsync
