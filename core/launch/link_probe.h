// Measures a link's latency α and bandwidth B the way the cost model uses
// them: TCP messages between two endpoints (two namespaces of an emulated
// network, or loopback), as gradsync's strategies send them.
//
//   α  = half the median round trip of a 1-byte message and its 1-byte reply
//   B  = least-squares slope of one-way transfer time against message size,
//        for messages of 1 MiB and more (each acknowledged by 1 byte), so
//        start-up costs and tbf's initial burst fall into the intercept
//   duplex: the rate of each direction while both send at once, which a
//        full-duplex link must keep (ring all-reduce and PS push/pull do it)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct LinkProbeOptions {
  // Network namespaces ("gs1a2b-n0") the client and the server run in; empty:
  // this process's own.
  std::string client_namespace;
  std::string server_namespace;
  std::string server_address =
      "127.0.0.1";  // IPv4, inside the server's namespace
  int small_round_trips = 200;
  int repeats = 3;  // per large size; the median is kept
  std::vector<int64_t> sizes = {1 << 20, 4 << 20, 16 << 20, 32 << 20};
};

struct LinkProbeSample {
  int64_t bytes = 0;
  double forward_ms = 0;  // client -> server, median
  double reverse_ms = 0;  // server -> client, median
};

struct LinkProbeResult {
  double round_trip_us = 0;          // median, 1 byte each way
  double alpha_us = 0;               // round_trip_us / 2
  double bandwidth_bytes_per_s = 0;  // forward fit (slope)
  double reverse_bandwidth_bytes_per_s = 0;
  double intercept_ms = 0;        // forward fit
  double duplex_bytes_per_s = 0;  // each direction, both at once
  std::vector<LinkProbeSample> samples;

  std::string ToJson() const;
};

absl::StatusOr<LinkProbeResult> ProbeLink(const LinkProbeOptions& options);

// Fits both directions' bandwidth and the forward intercept to
// `result->samples`. A transfer time that does not grow with size (a link
// faster than the sizes can resolve, or a busy machine) is refused with the
// samples it read rather than given as a negative or infinite bandwidth.
absl::Status FitLinkSamples(LinkProbeResult* result);

// The same measurement between two hosts of a real cluster, where nothing is
// emulated and no launcher knows the link: one host serves
// (ServeLinkProbe), the other measures (ProbeRemoteLink), e.g.
//   hostA$ netem probe --listen=29500
//   hostB$ netem probe --peer=hostA:29500
// and the job script exports the figure for every process
// (JobLinkSpecFromProbe, GRADSYNC_LINK: tools/emulated_link.h), from which
// the parameter server derives its stream windows as it does under --netem.
struct LinkProbeServeOptions {
  std::string bind_address = "0.0.0.0";  // IPv4
  int port = 0;                          // 0: any free port
  // The largest transfer a client may ask for (LinkProbeOptions::sizes).
  int64_t max_bytes = int64_t{32} << 20;
  // How long to wait for the peer to connect, then give up naming the port.
  int wait_for_peer_s = 300;
  // Called with the port once listening (before waiting for the peer).
  std::function<void(int)> on_listening;
};

// Serves one peer's probe, then returns.
absl::Status ServeLinkProbe(const LinkProbeServeOptions& options);

// Measures the link to a peer serving at host:port (an IPv4 address or a
// host name).
absl::StatusOr<LinkProbeResult> ProbeRemoteLink(const std::string& host,
                                                int port,
                                                const LinkProbeOptions& options);

// The job's link as GRADSYNC_LINK takes it, RATE,LATENCY in --netem's
// grammar: the slowest of the forward, reverse and both-at-once rates (a PS
// pushes and pulls at once), in Mbit/s, and the one-way latency α in µs.
std::string JobLinkSpecFromProbe(const LinkProbeResult& result);

}  // namespace gradsync
