// The rule that chooses the HTTP/2 flow-control window of the parameter
// server's push and pull streams (--ps_stream_window_kb's "auto") from the
// link and the fan-in. A rule, not a flag: it links no flag library, and
// every process derives the same value from what it knows (the job's link:
// the one the launcher emulates, or probed or given without --netem,
// tools/emulated_link.h; N and K).
//
// Why (ps/README.md, "Distance from the bandwidth model", item 7, the
// receiver-driven share ICTCP applies to incast): N streams converge on one
// server's port (pushes) and K on one worker's (pulls):
//
//   worker 0   ---.                 server 0   ---.
//   worker 1   ---+--> server k     server 1   ---+--> worker r
//   ...           |   (pushes,      ...           |   (pulls,
//   worker N-1 ---'    fan-in N)    server K-1 ---'    fan-in K)
//
// With a window larger than a key each stream writes a whole key at once, a
// worker's streams to its servers go out one after another, and TCP alone
// shares a port unevenly among its senders; with equal small windows every
// stream stops after one window until its receiver has read it, so the
// streams interleave and each sender into a port keeps the same amount in
// flight. Too small a window caps a stream at window / RTT.
//
// The rule: window = 2 × (rate / fan-in) × RTT, the per-stream share of the
// bandwidth-delay product with a factor 2 of headroom (so one stream is never
// capped below the rate it needs), rounded up to a power of two and held
// within [kMinStreamWindowBytes, kMaxAutoStreamWindowBytes]. The floor is
// measured, not derived: smaller windows throttled a slow link whose ports
// were loaded (a window's turn is long there, and window updates queue
// behind results; the sweep is linked below). Where the link is not known (a
// job without --netem and without GRADSYNC_LINK),
// the fixed 4 MiB window this flag had before, which keeps results from waiting
// on window updates.
//
// The connection's window is a second cap the stream windows cannot lift: in
// gRPC 1.51 the lookahead argument sets only the streams' window
// (SETTINGS_INITIAL_WINDOW_SIZE); with BDP probing off, every connection's
// transport-wide window stays at HTTP/2's 65535 bytes (plus the unread part
// of the messages its readers wait for), so one connection carries at most
// about that much per round trip whatever the stream window. So where the
// share above (2 × rate/fan-in × RTT) exceeds that window the rule keeps
// gRPC's BDP probing on: the probe grows the connection's window to the
// link, and its estimate replaces the stream window (which is then only the
// streams' start), giving up the equal windows. Where it fits the fixed
// windows stay, probing off.
//
// The sweeps behind the floor, the connection window and the message sizes
// below: docs/results/ps-bandwidth-model.md, "Notes from the code".
#pragma once

#include <cstdint>
#include <string>

namespace gradsync {

constexpr int64_t kMinStreamWindowBytes = int64_t{32} << 10;
constexpr int64_t kMaxAutoStreamWindowBytes = int64_t{4} << 20;
// Where the link is not known.
constexpr int64_t kUnknownLinkStreamWindowBytes = int64_t{4} << 20;
// A gRPC 1.51 connection's transport-wide receive window with BDP probing off
// (HTTP/2's initial window; no channel argument changes it).
constexpr int64_t kFixedConnectionWindowBytes = 65535;

// What a process knows of its link.
struct LinkFigures {
  double rate_bytes_per_s = 0;  // 0: not known
  double round_trip_s = 0;      // added round-trip latency
  std::string description;      // "100mbit (gradsync launch --netem)"
};

struct StreamWindowChoice {
  int64_t window_bytes = 0;
  // Keep gRPC's BDP probing on: a stream's share of the bandwidth-delay
  // product (2 x rate/fan-in x RTT) exceeds kFixedConnectionWindowBytes,
  // which would cap its connection.
  bool bdp_probe = false;
  std::string reason;  // one line, for the log and the manifest
};

// `fan_in`: how many streams converge on one receiving port (N for the
// servers' push streams, K for the workers' pull streams); at least 1.
StreamWindowChoice ChooseStreamWindow(const LinkFigures& link, int fan_in);

// The largest message of a stream (--ps_message_kb's "auto"): its window,
// held within [kMinAutoMessageBytes, kMaxAutoMessageBytes].
//
// Why: a gRPC 1.51 receiver announces, beside its stream window, the unread
// rest of the message its reader waits for (chttp2's min progress size), so
// a stream has max(window, message) in flight, and large messages would make
// the window rule's small equal windows moot: where several streams converge
// on a port they overfilled the switch port's buffer and were retransmitted.
//
// The floor is measured, not derived: smaller messages cost more CPU per
// all-reduce and larger ones saved none, while the smaller message keeps
// less in flight where more streams converge. The ceiling is the old fixed
// default: larger messages only delay the server's first block. Where the
// link is not known the window is 4 MiB, so the message stays 1 MiB, as
// before. (The figures: docs/results/ps-bandwidth-model.md, "Notes from the
// code".)
constexpr int64_t kMinAutoMessageBytes = int64_t{128} << 10;
constexpr int64_t kMaxAutoMessageBytes = int64_t{1} << 20;

struct MessageSizeChoice {
  int64_t message_bytes = 0;
  std::string reason;  // one line, for the log and the manifest
};

// `stream_window_bytes`: the window of the streams the messages travel on
// (the push streams' for pushes, the pull streams' for results).
MessageSizeChoice ChooseMessageSize(int64_t stream_window_bytes);

}  // namespace gradsync
