// The α–β (Hockney) cost of each all-reduce of the family: the formulas that
// --sync=allreduce picks by (selecting_allreduce.h), that the simulator and
// `gradsync predict` (tools/predict_command.cc, which bench/cost_model.py
// calls) answer with. They exist only here; the parameter server's are in
// ps/cost_model.h. Time of one all-reduce of S bytes over N ranks whose links
// each have latency α (seconds per message) and bandwidth B (bytes per second
// in each direction at once), reduction arithmetic neglected (it overlaps the
// transfers). Derivations beside each formula in cost_model.cc.
//
// A step of several buckets, their overlap with backward and the next
// forward, and the send order (fifo, or priority's partitions as separate
// all-reduces): core/sync/schedule_cost_model.h, which charges each bucket
// or partition one of these times (`gradsync predict`'s "step" query).
//
// Every function is pure, thread-safe and returns 0 for N <= 1 (nothing
// crosses a link).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/sync/link_cost.h"

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

// Per rank of the double binary trees over `n` ranks (tree_allreduce.h's
// BuildDoubleBinaryTrees), the pair (E_r, H_r) that TreeAllReduceSeconds
// charges: the rank's tree edges over both trees, and the hops its link's last
// byte still travels. Each distinct pair once, ascending; empty for n <= 1.
std::vector<std::pair<int, int>> TreeRankCosts(int n);

// One ring all-gather (ring_allgather.h) of a blob of `blob_bytes` from every
// rank, each behind its frame header: how top-k and one-bit encodings move.
double RingAllGatherSeconds(int n, double blob_bytes, const LinkCost& link);

}  // namespace gradsync
