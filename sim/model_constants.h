// The few constants that turn the simulator's ideal network (CM02: max-min
// sharing, a message costs its route's latency and its bytes over the rate)
// into gradsync's transports on the emulated cluster: what TCP/IP leaves of a
// link's rate, how the relays' latency compares with the wire's, and what
// each message costs the software that sends it. They are fitted once, by
// sim/fit_constants.py against the emulated sweeps in docs/results/data/,
// and kept with how they were measured in sim/constants.json, which is
// built into the simulator (`--constants=fitted`).
//
// How a constant enters the platform (ApplyModelConstants):
//   B_eff = bandwidth_factor · B          on every NIC, so that flows sharing
//                                          a link share the reduced rate, as
//                                          headers take their part of every
//                                          flow (SimGrid's own bandwidth
//                                          factor bounds each flow instead)
//   α_eff = latency_factor · α + c        per message, NIC to NIC, with c
//                                          the TCP transport's per-message
//                                          overhead for the all-reduces and
//                                          gRPC's for the parameter server
//   message CPU                          each all-reduce message a rank
//                                          takes in runs message_cpu_us of
//                                          work on `cpu_cores` cores shared
//                                          by all ranks (the emulated
//                                          cluster's one machine), so that N
//                                          ranks' rounds contend for them
//   message wake-up                      each message a peer exchange
//                                          takes in then waits
//                                          message_wake_us times the ranks
//                                          per core of the machine (N /
//                                          cpu_cores) for its thread
//   ring's loop                          ring_allreduce.cc's own step
//                                          engine (one poll loop over its
//                                          two neighbours) in place of
//                                          peer_exchange.h's: its CPU time
//                                          per step (ring_message_cpu_us, on
//                                          the same shared cores) and what
//                                          it adds to a step's latency with
//                                          no core busy for it
//                                          (ring_step_overhead_us)
//   link burst                           each NIC's token bucket, as the
//                                          emulation's tbf sets it
// The intra-host link (--intra_link) is left as given: it stands for an
// NVLink, not for what was measured. The factors play the part of SimGrid's
// LV08 TCP corrections (its documentation gives them), fitted to gradsync's
// transports rather than to the flows SimGrid was validated on.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "sim/simulation.h"

namespace gradsync {
namespace sim {

struct ModelConstants {
  double bandwidth_factor = 1;
  double latency_factor = 1;
  double tcp_message_overhead_s = 0;   // the all-reduces' peer transport
  double grpc_message_overhead_s = 0;  // the parameter server's streams
  // The all-reduces' software time per message taken in, and the cores all
  // ranks share for it (ClusterSpec::message_cpu_s): the emulated cluster's
  // machine, whose core count is a fact of it, not a fit.
  double message_cpu_s = 0;
  int cpu_cores = 0;
  // The ring's own loop (ClusterSpec::ring_message_cpu_s and
  // ring_step_overhead_s): its CPU time per step's message (negative: the
  // message_cpu_s above) and what it adds to each step's latency beyond the
  // transport's overhead.
  double ring_message_cpu_s = -1;
  double ring_step_overhead_s = 0;
  // A peer exchange's message's wake-up per rank per core
  // (ClusterSpec::message_wake_s).
  double message_wake_s = 0;
  // The emulated links' token bucket (ClusterSpec::link_burst_bytes), a
  // fact of core/launch/netem.cc, not a fit.
  double link_burst_bytes = 0;
};

// The `constants` object of a document shaped like sim/constants.json:
// {"constants": {"bandwidth_factor": {"value": <factor>, ...}, ...}}. A constant
// that is missing keeps its neutral value; one out of range (a factor not
// above 0, an overhead below 0) is InvalidArgument naming it and `source`.
absl::StatusOr<ModelConstants> ParseModelConstants(const std::string& json,
                                                   const std::string& source);

// sim/constants.json as it was when the simulator was built.
const std::string& FittedModelConstantsJson();

// `cluster` with its host links as gradsync's transport sees them (above);
// `parameter_server` picks gRPC's overhead over the TCP transport's.
ClusterSpec ApplyModelConstants(const ModelConstants& constants,
                                bool parameter_server, ClusterSpec cluster);

}  // namespace sim
}  // namespace gradsync
