// The parameter server's stream-window rule (see stream_window_rule.h).
#include "ps/stream_window_rule.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace gradsync {

StreamWindowChoice ChooseStreamWindow(const LinkFigures& link, int fan_in) {
  fan_in = std::max(fan_in, 1);
  StreamWindowChoice choice;
  if (!(link.rate_bytes_per_s > 0)) {
    choice.window_bytes = kUnknownLinkStreamWindowBytes;
    choice.reason = absl::StrFormat(
        "auto: link rate not known (%s); %d KiB, the fixed window that keeps "
        "results from waiting on window updates, BDP probing off (set "
        "--ps_stream_window_kb, or export GRADSYNC_LINK=RATE,LATENCY for every "
        "process, as gradsync launch does on one node, to size it to the "
        "link)",
        link.description.empty() ? "no emulated link" : link.description,
        kUnknownLinkStreamWindowBytes / 1024);
    return choice;
  }
  const double needed =
      2.0 * link.rate_bytes_per_s / fan_in * std::max(link.round_trip_s, 0.0);
  int64_t window = kMinStreamWindowBytes;
  while (window < needed && window < kMaxAutoStreamWindowBytes) window *= 2;
  choice.window_bytes = window;
  // A stream's share needs more than its connection's fixed window lets
  // through: no stream window can deliver it, so let the probe size both.
  choice.bdp_probe = needed > kFixedConnectionWindowBytes;
  choice.reason = absl::StrFormat(
      "auto: %s, %.0f Mbit/s over %d streams into a port, RTT %.2f ms: 2 x "
      "rate/fan-in x RTT = %.1f KiB, rounded up to a power of two in [%d, %d] "
      "KiB -> %d KiB; that %s gRPC's fixed %.0f KiB connection window -> %s",
      link.description, link.rate_bytes_per_s * 8 / 1e6, fan_in,
      link.round_trip_s * 1e3, needed / 1024, kMinStreamWindowBytes / 1024,
      kMaxAutoStreamWindowBytes / 1024, window / 1024,
      choice.bdp_probe ? "exceeds" : "fits in",
      kFixedConnectionWindowBytes / 1024.0,
      choice.bdp_probe
          ? "BDP probing on (its estimate replaces this start window)"
          : "BDP probing off");
  return choice;
}

MessageSizeChoice ChooseMessageSize(int64_t stream_window_bytes) {
  MessageSizeChoice choice;
  choice.message_bytes = std::clamp(stream_window_bytes, kMinAutoMessageBytes,
                                    kMaxAutoMessageBytes);
  choice.reason = absl::StrFormat(
      "auto: the stream window (%d KiB) held within [%d, %d] KiB -> %d KiB "
      "(a gRPC stream has max(window, message) in flight)",
      stream_window_bytes / 1024, kMinAutoMessageBytes / 1024,
      kMaxAutoMessageBytes / 1024, choice.message_bytes / 1024);
  return choice;
}

}  // namespace gradsync
