// The rule that chooses the HTTP/2 flow-control window of the parameter
// server's push and pull streams (--ps_stream_window_kb's "auto") from the
// link and the fan-in. A rule, not a flag: it links no flag library, and
// every process derives the same value from what it knows (the link the
// launcher emulates, N and K).
//
// Why (ps/README.md, "Distance from the bandwidth model", item 7, the
// receiver-driven share ICTCP applies to incast): N streams converge on one
// server's port (pushes) and K on one worker's (pulls). With a window larger
// than a key each stream writes a whole key at once, a worker's streams to its
// servers go out one after another, and TCP alone shares a port unevenly among
// its senders; with equal small windows every stream stops after one window
// until its receiver has read it, so the streams interleave and each sender
// into a port keeps the same amount in flight. Too small a window caps a
// stream at window / RTT.
//
// The rule: window = 2 × (rate / fan-in) × RTT, the per-stream share of the
// bandwidth-delay product with a factor 2 of headroom (so one stream is never
// capped below the rate it needs), rounded up to a power of two and held
// within [kMinStreamWindowBytes, kMaxStreamWindowBytes]. The floor is
// measured, not derived: at 100 Mbit/s, N = K = 8, sub-millisecond RTT, the
// window swept 8/16/24/32/64 KiB gave 326/284/275/273/320 ms (8 KiB throttled
// the link: a window's turn takes milliseconds on a loaded port, window
// updates queue behind results), so 32 KiB. The BDP term grows it only where
// latency is added (1 Gbit/s, 1 ms one way, fan-in 8: 64 KiB). Where the link
// is not known (a real cluster without --netem), the fixed 4 MiB window this
// flag had before, which keeps results from waiting on window updates.
//
// The connection's window is a second cap the stream windows cannot lift: in
// gRPC 1.51 the lookahead argument sets only the streams' window
// (SETTINGS_INITIAL_WINDOW_SIZE); with BDP probing off, every connection's
// transport-wide window stays at HTTP/2's 65535 bytes (plus the unread part
// of the messages its readers wait for), so one connection carries at most
// about that much per round trip whatever the stream window. At 1 Gbit/s,
// 5 ms one way, N = K = 2 colocated (each worker's one remote server gets
// its whole rate) a 1 MiB all-reduce took 104 ms (ring: 14 ms) with 64 KiB,
// 512 KiB or 8 MiB stream windows alike; with probing on, 17 ms. So where
// the share above (2 x rate/fan-in x RTT) exceeds that window the rule keeps
// gRPC's BDP probing on: the probe grows the connection's window to the
// link, and its estimate replaces the stream window (which is then only the
// streams' start), giving up the equal windows. Where it fits (the measured
// 32 KiB case above, 1 Gbit/s 1 ms fan-in 8) the fixed windows stay,
// probing off. The cost measured at the boundary: N = K = 4, 1 Gbit/s, 1 ms
// one way, probing made 1 MiB faster (21 -> 14 ms) and 16 MiB slower
// (230 -> 250..264 ms); at 5 ms both faster (67 -> 22, 307 -> 253 ms).
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
// a stream has max(window, message) in flight, and 1 MiB messages made the
// window rule's small equal windows moot. At 1 Gbit/s, 20 us one way, N = K
// = 4 colocated (2(N-1) = 6 streams into every port, 32 KiB windows), a
// 64 MiB all-reduce took 1074 ms with 2672 retransmitted segments (the
// switch ports' 1 MiB buffers dropped) with 1 MiB messages, 1021 ms / 1358
// with 512 KiB, 925-944 ms / 21-48 with 256 KiB and 927-978 ms / 32-34
// with 128 KiB (bench/allreduce_benchmark --workers=4 --netem=1gbit
// --relay_latency_us=20 --algorithms=gradsync_ps --ps_message_kb=M, 3 runs
// each, 2026-11-27).
//
// The floor is measured, not derived: at 16 MiB, N = 4 and 8, 64 KiB
// messages cost 22-24 % more CPU per all-reduce than 128 KiB (430 against
// 351 ms of CPU at N = 4, 844 against 682 at N = 8); 256 KiB saved nothing
// (371 and 732 ms; at 64 MiB, N = 4, 1.43-1.45 s against 1.44-1.55), and
// the smaller message keeps less in flight where more streams converge. The
// ceiling is the old fixed default: larger messages only delay the server's
// first block. Where the link is not known the window is 4 MiB, so
// the message stays 1 MiB, as before.
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
