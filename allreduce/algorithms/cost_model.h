// The α–β (Hockney) cost of each all-reduce of the family, the formulas that
// --sync=allreduce picks by (selecting_allreduce.h) and that
// bench/cost_model.py repeats for the scaling sweep (its tests check that the
// two agree). Time of one all-reduce of S bytes over N ranks whose links each
// have latency α (seconds per message) and bandwidth B (bytes per second in
// each direction at once), reduction arithmetic neglected (it overlaps the
// transfers). Derivations beside each formula in cost_model.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allreduce/algorithms/link_cost.h"

namespace gradsync {

double RingAllReduceSeconds(int n, double bytes, const LinkCost& link);
// `eager_bytes`: the clear to send's eager prefix (peer_exchange.h), 0 for
// an implementation without one.
double HalvingDoublingAllReduceSeconds(int n, double bytes,
                                       const LinkCost& link,
                                       double eager_bytes = 0);
// `eager_bytes` as for halving-doubling: every tree edge carries data both
// ways, so a half above the prefix waits for the peer's clear once.
double TreeAllReduceSeconds(int n, double bytes, const LinkCost& link,
                            double eager_bytes = 0);
// Nodes of `ranks_per_node`: `intra` inside a node, `inter` across it as
// each rank sees it (bandwidth B/R when the node's R ranks share one link).
double HierarchicalAllReduceSeconds(int n, int ranks_per_node, double bytes,
                                    const LinkCost& intra,
                                    const LinkCost& inter,
                                    double eager_bytes = 0);

}  // namespace gradsync
