// What a process cost the machine and what its TCP went through: its CPU
// seconds, and the TCP counters of its network namespace (retransmitted
// segments, RTO timeouts, tail-loss probes). Under `gradsync launch
// --netem` every process has a namespace of its own, so these are the
// process's own; elsewhere (loopback) they are the whole host's, and the
// summary says which ("tcp_scope").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gradsync {

struct TcpCounters {
  int64_t out_segments = 0;      // Tcp OutSegs
  int64_t retrans_segments = 0;  // Tcp RetransSegs (every retransmission)
  int64_t timeouts = 0;          // TcpExt TCPTimeouts (RTOs that fired)
  int64_t loss_probes = 0;       // TcpExt TCPLossProbes (tail-loss probes)
  int64_t fast_retrans = 0;      // TcpExt TCPFastRetrans
  int64_t spurious_rtos = 0;     // TcpExt TCPSpuriousRTOs
};

// Parses the contents of /proc/net/snmp and /proc/net/netstat (lines in
// pairs, "Tcp: Name Name ..." then "Tcp: 1 2 ..."). Counters a kernel lacks
// stay 0; a header without its values, or a value that is not a number, is
// an error naming the line.
absl::StatusOr<TcpCounters> ParseTcpCounters(const std::string& snmp,
                                             const std::string& netstat);

// The counters of this process's network namespace.
absl::StatusOr<TcpCounters> ReadNamespaceTcpCounters();

// Bytes an interface has received and sent (/proc/net/dev's first and ninth
// columns: frames as the device counts them, link-layer headers included).
struct InterfaceBytes {
  int64_t rx_bytes = 0;
  int64_t tx_bytes = 0;
};

// `interface`'s line of /proc/net/dev's contents; an error names the
// interface when it is missing or its line is not numbers.
absl::StatusOr<InterfaceBytes> ParseInterfaceBytes(const std::string& net_dev,
                                                   const std::string& interface);

// `interface` in this process's network namespace.
absl::StatusOr<InterfaceBytes> ReadNamespaceInterfaceBytes(
    const std::string& interface);

// User + system CPU seconds of this process so far (all its threads).
double ProcessCpuSeconds();

// {"cpu_s": .., "tcp_scope": "namespace", "tcp": {...}} for a summary;
// `tcp` is left out (and "tcp_error" says why) when the counters are
// unreadable.
std::string ProcessCountersJson();

}  // namespace gradsync
