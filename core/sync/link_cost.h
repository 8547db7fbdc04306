// A link as the α–β (Hockney) model sees it: latency α (seconds per message,
// one way) and bandwidth B (bytes per second in each direction at once).
// Given by flags or probed on the job's connections
// (allreduce/algorithms/peer_link_probe.h); the cost models predict with it
// (allreduce/algorithms/cost_model.h, ps/cost_model.h) and the tree sizes its
// lead by it (allreduce/algorithms/tree_allreduce.h). Here, below both
// strategy families, so that neither depends on the other for it.
#pragma once

namespace gradsync {

struct LinkCost {
  double alpha_s = 50e-6;
  double bytes_per_s = 1.25e9;
};

}  // namespace gradsync
