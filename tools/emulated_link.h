// The link this process runs on, as the job knows it, for the parameter
// server's derived windows (ps/stream_window_rule.h). Every worker and server
// reads the same environment, so all of them derive the same stream windows:
//   1. `gradsync launch --netem=RATE[,LATENCY]` gives every process the link
//      it emulates (GRADSYNC_NETEM);
//   2. else the job's link in GRADSYNC_LINK, in --netem's grammar: set by
//      `gradsync launch` on one node from a probe of the link its processes
//      share (core/launch/link_probe.h, as the all-reduces probe theirs at
//      set-up), or exported for every process on a cluster;
//   3. else the rate is not known (LinkFigures::rate_bytes_per_s 0).
#pragma once

#include <string>

#include "core/launch/link_probe.h"
#include "ps/stream_window_rule.h"

namespace gradsync {

// From the text of --netem ("100mbit", "1gbit,1ms", "none"): the rate, and the
// round trip as twice the one-way latency. An unparseable text yields an
// unknown link whose description says why (the launcher refused it already).
LinkFigures LinkFiguresFromNetemSpec(const std::string& spec);

// The job's link where nothing is emulated: RATE[,LATENCY] as --netem
// writes it, the latency one way.
inline constexpr char kJobLinkEnv[] = "GRADSYNC_LINK";

// A probe's figures as GRADSYNC_LINK: the rate each direction keeps while
// both send at once (as pushes and pulls do; the one-way slope where the
// probe has none), and half the round trip. Empty where the probe measured
// no rate.
std::string JobLinkSpecFromProbe(const LinkProbeResult& probe);

// LinkFiguresFromNetemSpec($GRADSYNC_NETEM), without the latency where the
// launcher says the kernel could not add it (GRADSYNC_NETEM_LATENCY_EMULATED=0:
// no sch_netem); else $GRADSYNC_LINK read the same way; else an unknown link.
LinkFigures LinkFiguresOfThisProcess();

}  // namespace gradsync
