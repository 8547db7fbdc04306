// --sync=allreduce: per buffer, the all-reduce of the family with the lowest
// α–β prediction (cost_model.h), the idea of NCCL's tuner. Holds one
// algorithm per candidate over one transport (the table in
// allreduce/allreduce_table.h hands it the ring, halving-doubling and the
// double binary tree), picks by the buffer's size (the first candidate, the
// ring, on a tie) and records every pick (SummaryJson; the first pick for
// each tag is logged).
//
// α and B come from the options (given by the user, e.g. from `gradsync netem
// --probe`), or, when those are zero, are measured at set-up:
//  - B and the link's α by probing the job's own peer connections
//    (peer_link_probe.h: round trips, two-way exchanges);
//  - then each candidate's own α: the time it takes for a tiny buffer (N·16
//    floats; the slowest rank's median of 8 back-to-back runs) over the
//    latencies its formula counts (2(N-1) for the ring, 2·log2 N for
//    halving-doubling, 2·depth for the tree). The median, not the mean, so
//    that one stalled run cannot hand a candidate's buffers to another. Wire
//    latency is the same for all, but the software around it is not (a
//    halving-doubling round costs more than a tree hop on a loaded host);
//    NCCL's tuner likewise keeps a base latency per algorithm. What this
//    calibration measured on the emulated links is in
//    docs/results/allreduce_family.md ("Notes from the code").
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
#include "allreduce/algorithms/allreduce_kind.h"
#include "core/sync/link_cost.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/algorithms/peer_link_probe.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

// What a candidate is charged from one rank's timed runs of the tiny buffer:
// their median, which one stalled run does not move.
double CalibrationSeconds(std::vector<double> runs);

// The link each candidate is predicted with: one B, an α per algorithm.
class CandidateLinks {
 public:
  // Every candidate with `link`.
  static CandidateLinks Uniform(const LinkCost& link);
  // Candidate `kind`'s own link, or the uniform one.
  const LinkCost& For(AllReduceKind kind) const;
  // Candidate `kind`'s own link, made from the uniform one on first use.
  LinkCost& operator[](AllReduceKind kind);

 private:
  LinkCost uniform_;
  std::map<AllReduceKind, LinkCost> own_;
};

// The tags of the selector's own all-reduces at set-up, beside the probe's
// (peer_link_probe.h, from 0xFFFFFF00) and far above any bucket's.
inline constexpr uint32_t kCalibrationRunTag = 0xFFFFFF10u;    // timed runs
inline constexpr uint32_t kCalibrationShareTag = 0xFFFFFF11u;  // the results
inline constexpr uint32_t kCalibrationStartTag = 0xFFFFFF12u;  // line-up

class SelectingAllReduce : public AllReduceAlgorithm {
 public:
  // `candidates` (each with a predict): the first also carries the probe's
  // and the calibration's own all-reduces and wins ties, so it is the ring.
  // `transport` must have been created with every candidate's peers and
  // ProbePartner(rank, N). `options.link` with zero entries is probed
  // (above); the candidates are made with the resolved link.
  static absl::StatusOr<std::unique_ptr<SelectingAllReduce>> Create(
      PeerTransport* transport, const AlgorithmOptions& options,
      std::vector<const AllReduceEntry*> candidates);

  // The candidate predicted lowest for `bytes` over `n` ranks, each with its
  // own link (the first on a tie).
  static const AllReduceEntry& Choose(
      const std::vector<const AllReduceEntry*>& candidates, int n, double bytes,
      const CandidateLinks& links, double eager_bytes = 0);

  // The candidate this object runs for `count` floats.
  const AllReduceEntry& Pick(int64_t count) const;

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
  struct Candidate {
    const AllReduceEntry* entry;
    std::unique_ptr<AllReduceAlgorithm> algorithm;
    int64_t runs = 0;  // buffers it ran
  };

  SelectingAllReduce(PeerTransport* transport, int64_t chunk_bytes);
  // Sets links_ from each candidate's time on a tiny buffer (above).
  absl::Status CalibrateLatencies();
  int IndexOf(const AllReduceEntry& entry) const;

  PeerTransport* transport_;
  int64_t chunk_bytes_;
  LinkCost link_;
  CandidateLinks links_;
  PeerLinkProbeResult probe_;  // pairs == 0: not probed
  std::vector<Candidate> candidates_;
  std::vector<const AllReduceEntry*> entries_;  // candidates_'s, for Choose
  std::map<uint32_t, const AllReduceEntry*> picks_;  // tag -> last pick
  int64_t eager_bytes_ = PeerExchange::kDefaultEagerBytes;
};

}  // namespace gradsync
