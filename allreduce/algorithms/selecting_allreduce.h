// --sync=allreduce: per buffer, the all-reduce of the family with the lowest
// α–β prediction (cost_model.h), the idea of NCCL's tuner. Holds a ring,
// halving-doubling and a double binary tree over one transport, picks by the
// buffer's size (the ring on a tie) and records every pick (SummaryJson; the
// first pick for each tag is logged).
//
// α and B come from the options (given by the user, e.g. from `gradsync netem
// --probe`), or, when those are zero, are measured at set-up:
//  - B and the link's α by probing the job's own peer connections
//    (peer_link_probe.h: round trips, two-way exchanges);
//  - then each candidate's own α: the time it takes for a tiny buffer (N·16
//    floats; the slowest rank's median of 8 back-to-back runs) over the
//    latencies its formula counts (2(N-1) for the ring, 2·log2 N for
//    halving-doubling, 2·depth for the tree). The median, not the mean: one
//    stalled run once doubled the tree's α at N = 8 on 1 ms links and gave
//    its buffers to halving-doubling, 5% slower. Wire latency is the same for all three, but the software
//    around it is not (a halving-doubling round costs ~0.15 ms more than a
//    tree hop on a loaded 2-core host, docs/results/allreduce_family.md);
//    NCCL's tuner likewise keeps a base latency per algorithm.
// Every figure is shared among the ranks by an all-reduce, so all ranks pick
// alike (a disagreement would fail the transfer headers, not corrupt a
// gradient).
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
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/algorithms/cost_model.h"
#include "allreduce/algorithms/halving_doubling_allreduce.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/algorithms/peer_link_probe.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/transport/peer_transport.h"
#include "allreduce/algorithms/tree_allreduce.h"

namespace gradsync {

// What a candidate is charged from one rank's timed runs of the tiny buffer:
// their median, which one stalled run does not move.
double CalibrationSeconds(std::vector<double> runs);

// The link each candidate is predicted with: one B, an α per algorithm.
struct CandidateLinks {
  LinkCost ring;
  LinkCost halving_doubling;
  LinkCost tree;

  static CandidateLinks Uniform(const LinkCost& link) {
    return {link, link, link};
  }
  // "ring", "halving_doubling" or "tree".
  const LinkCost& For(const std::string& algorithm) const;
};

class SelectingAllReduce : public AllReduceAlgorithm {
 public:
  static constexpr const char* kCandidates[3] = {"ring", "halving_doubling",
                                                 "tree"};

  // `transport` must have been created with Peers(rank, world_size).
  // `link` with zero entries is probed (above).
  static absl::StatusOr<std::unique_ptr<SelectingAllReduce>> Create(
      PeerTransport* transport, int64_t chunk_bytes, const LinkCost& link);
  static std::vector<int> Peers(int rank, int world_size);

  // The algorithm this object runs for `count` floats.
  std::string Pick(int64_t count) const;
  // The α–β prediction of candidate `algorithm` (cost_model.h), with the
  // family's eager prefix before a clear to send (peer_exchange.h; 0: none).
  static double Predict(const std::string& algorithm, int n, double bytes,
                        const LinkCost& link, double eager_bytes = 0);
  // The choice for `bytes` over `n` ranks: "ring", "halving_doubling" or
  // "tree", whichever is predicted lowest (the ring on a tie).
  static std::string Choose(int n, double bytes, const CandidateLinks& links,
                            double eager_bytes = 0);
  static std::string Choose(int n, double bytes, const LinkCost& link) {
    return Choose(n, bytes, CandidateLinks::Uniform(link));
  }

  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;
  void SetEagerBytes(int64_t bytes) override;
  int64_t bytes_sent() const override;
  int64_t bytes_received() const override;
  std::string SummaryJson() const override;
  // The probed (or given) link, and what each candidate is predicted with.
  const LinkCost& link() const { return link_; }
  const CandidateLinks& links() const { return links_; }
  // Whether link() was probed (else given).
  bool probed() const { return probe_.pairs > 0; }

 private:
  SelectingAllReduce(PeerTransport* transport, int64_t chunk_bytes);
  // Sets links_ from each candidate's time on a tiny buffer (above).
  absl::Status CalibrateLatencies();

  PeerTransport* transport_;
  int64_t chunk_bytes_;
  LinkCost link_;
  CandidateLinks links_;
  PeerLinkProbeResult probe_;  // pairs == 0: not probed
  std::map<std::string, std::unique_ptr<AllReduceAlgorithm>> algorithms_;
  TreeAllReduce* tree_ = nullptr;  // algorithms_["tree"], told the link
  std::map<uint32_t, std::string> picks_;       // tag -> algorithm
  std::map<std::string, int64_t> pick_counts_;  // algorithm -> runs
  int64_t eager_bytes_ = PeerExchange::kDefaultEagerBytes;
};

}  // namespace gradsync
