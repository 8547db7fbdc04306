// Measures the α and B of the α–β model (cost_model.h) on the job's own
// connections, the ones the all-reduces will use, so --sync=allreduce picks
// by the link as its messages see it: the emulated or real wire, the kernel,
// any relay on the path and the CPU the ranks share.
//
// Ranks pair up across the job, rank v with v XOR p/2 (p the largest power of
// two ≤ N; ranks ≥ p sit the probe out), all pairs at once, as the algorithms
// load the network:
//   α = half the median round trip of a one-float message and its echo,
//       timed by the lower rank of each pair;
//   B = slope of the time of a two-way exchange (both partners send at once,
//       as every step of the family does) between a small and a large
//       message, timed by both partners; the slope leaves start-up costs and
//       the latency out, as link_probe (core/launch) does for one link (where
//       noise makes the slope meaningless, the large exchange's own rate).
// Every rank then holds the mean over the ranks that measured (an all-reduce
// on `average`; for B the mean time per byte, so the rates' harmonic mean),
// so all ranks pick alike.
//
// Cost: 17 round trips and seven two-way exchanges, four of them of
// `large_bytes` (what that takes on the emulated links:
// docs/results/allreduce_family.md, "Notes from the code").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/algorithms/cost_model.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

struct PeerLinkProbeOptions {
  int round_trips = 15;  // timed; the median is kept
  int repeats = 3;       // per exchange size; the median is kept
  int64_t small_bytes = 256 << 10;
  int64_t large_bytes = 4 << 20;
};

struct PeerLinkProbeResult {
  LinkCost link;
  double round_trip_us = 0;  // mean over the pairs of each pair's median
  int pairs = 0;

  std::string ToJson() const;
};

// The rank that `rank` probes with, or -1 when it sits out. Symmetric.
int ProbePartner(int rank, int world_size);

// Every rank of the transport calls it at the same point; `transport` must
// have been created with ProbePartner(rank, N) among its peers, and
// `average` must run on the same transport (its ring). Tags from
// 0xFFFFFF00 up are the probe's.
absl::StatusOr<PeerLinkProbeResult> ProbePeerLink(
    PeerTransport* transport, int64_t chunk_bytes, AllReduceAlgorithm& average,
    const PeerLinkProbeOptions& options = {});

}  // namespace gradsync
