// A link as the α–β (Hockney) model sees it: latency α (seconds per message,
// one way) and bandwidth B (bytes per second in each direction at once).
// Given by flags or probed on the job's connections (peer_link_probe.h); the
// cost model predicts with it (cost_model.h) and the tree sizes its lead by
// it (tree_allreduce.h).
#pragma once

namespace gradsync {

struct LinkCost {
  double alpha_s = 50e-6;
  double bytes_per_s = 1.25e9;
};

}  // namespace gradsync
