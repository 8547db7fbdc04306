// The parameter server's settings for one job: each explicit value (a flag) is
// kept, each "auto" value (0) comes from its rule — the key size from the
// layout and the servers' shares (key_size_rule.h), the push and pull streams'
// windows from the link and the fan-in (stream_window_rule.h) — with the
// reason, for the start-up log and the run's manifest; the largest message
// of a stream from its window. Every worker and server
// derives the same values from the same layout, N, K and link, so nothing is
// broadcast. The window's rule also says whether gRPC's BDP probing stays on.
// Links no flag library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/param_layout.h"
#include "ps/key_size_rule.h"
#include "ps/partitioner.h"
#include "ps/stream_window_rule.h"

namespace gradsync {

// A server holding more than this times its share is warned about.
constexpr double kImbalanceWarning = 1.25;

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

}  // namespace gradsync
