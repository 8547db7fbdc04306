// The link this process runs on, as far as it can know it without a probe:
// `gradsync launch --netem=RATE[,LATENCY]` gives every worker and server the
// link it emulates (GRADSYNC_NETEM), so all of them derive the same stream
// windows. Elsewhere the rate is not known (LinkFigures::rate_bytes_per_s 0).
#pragma once

#include <string>

#include "ps/stream_window_rule.h"

namespace gradsync {

// From the text of --netem ("100mbit", "1gbit,1ms", "none"): the rate, and the
// round trip as twice the one-way latency. An unparseable text yields an
// unknown link whose description says why (the launcher refused it already).
LinkFigures LinkFiguresFromNetemSpec(const std::string& spec);

// LinkFiguresFromNetemSpec($GRADSYNC_NETEM), or an unknown link; without
// the latency where the launcher says the kernel could not add it
// (GRADSYNC_NETEM_LATENCY_EMULATED=0: no sch_netem).
LinkFigures LinkFiguresOfThisProcess();

}  // namespace gradsync
