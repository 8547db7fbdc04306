// --sync=allreduce: per buffer, the all-reduce of the family with the lowest
// α–β prediction (cost_model.h), the idea of NCCL's tuner. Holds a ring,
// halving-doubling and a double binary tree over one transport, picks by the
// buffer's size (the ring on a tie) and records every pick (SummaryJson; the
// first pick for each tag is logged).
//
// α and B come from the options (given by the user, e.g. from `gradsync netem
// --probe`), or, when those are zero, from probing the job's own peer
// connections at set-up (peer_link_probe.h: round trips for α, two-way
// exchanges for B, averaged over the ranks so all ranks pick alike; a
// disagreement would fail the transfer headers, not corrupt a gradient).
//
// Hierarchical is not a candidate: its prediction needs the link inside a
// node and the one across, which one probe pair cannot tell apart.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allreduce/allreduce_algorithm.h"
#include "allreduce/cost_model.h"
#include "allreduce/halving_doubling_allreduce.h"
#include "allreduce/peer_link_probe.h"
#include "allreduce/ring_allreduce.h"
#include "allreduce/ring_transport.h"
#include "allreduce/tree_allreduce.h"

namespace gradsync {

class SelectingAllReduce : public AllReduceAlgorithm {
 public:
  // `transport` must have been created with Peers(rank, world_size).
  // `link` with zero entries is probed (above).
  static absl::StatusOr<std::unique_ptr<SelectingAllReduce>> Create(
      RingTransport* transport, int64_t chunk_bytes, const LinkCost& link);
  static std::vector<int> Peers(int rank, int world_size);

  // The algorithm this object runs for `count` floats.
  std::string Pick(int64_t count) const;
  // The choice for `bytes` over `n` ranks on `link`: "ring",
  // "halving_doubling" or "tree".
  static std::string Choose(int n, double bytes, const LinkCost& link);

  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;
  int64_t bytes_sent() const override;
  int64_t bytes_received() const override;
  std::string SummaryJson() const override;
  const LinkCost& link() const { return link_; }
  // Whether link() was probed (else given).
  bool probed() const { return probe_.pairs > 0; }

 private:
  SelectingAllReduce(RingTransport* transport, int64_t chunk_bytes);

  RingTransport* transport_;
  int64_t chunk_bytes_;
  LinkCost link_;
  PeerLinkProbeResult probe_;  // pairs == 0: not probed
  std::map<std::string, std::unique_ptr<AllReduceAlgorithm>> algorithms_;
  std::map<uint32_t, std::string> picks_;       // tag -> algorithm
  std::map<std::string, int64_t> pick_counts_;  // algorithm -> runs
};

}  // namespace gradsync
