// The link this process runs on, as the job knows it, for the parameter
// server's derived windows (ps/stream_window_rule.h). Every worker and server
// reads the same environment, so all of them derive the same stream windows:
//   1. `gradsync launch --netem=RATE[,LATENCY]` gives every process the link
//      it emulates (GRADSYNC_NETEM);
//   2. else the job's link in GRADSYNC_LINK, in --netem's grammar, which a
//      cluster's job script exports for every process, as `netem probe
//      --peer` prints it after measuring between two hosts
//      (core/launch/link_probe.h; docs/cluster.md);
//   3. else the rate is not known (LinkFigures::rate_bytes_per_s 0).
#pragma once

#include <string>

#include "ps/stream_window_rule.h"

namespace gradsync {

// From the text of --netem ("100mbit", "1gbit,1ms", "none"): the rate, and the
// round trip as twice the one-way latency. An unparseable text yields an
// unknown link whose description says why (the launcher refused it already).
LinkFigures LinkFiguresFromNetemSpec(const std::string& spec);

// The job's link where nothing is emulated: RATE[,LATENCY] as --netem
// writes it, the latency one way.
inline constexpr char kJobLinkEnv[] = "GRADSYNC_LINK";

// LinkFiguresFromNetemSpec($GRADSYNC_NETEM), without the latency where the
// launcher says the kernel could not add it (GRADSYNC_NETEM_LATENCY_EMULATED=0:
// no sch_netem); else $GRADSYNC_LINK read the same way; else an unknown link.
LinkFigures LinkFiguresOfThisProcess();

}  // namespace gradsync
