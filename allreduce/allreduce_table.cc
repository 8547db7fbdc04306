#include "allreduce/allreduce_table.h"

#include <memory>
#include <set>

#include "allreduce/algorithms/cost_model.h"
#include "allreduce/algorithms/halving_doubling_allreduce.h"
#include "allreduce/algorithms/hierarchical_allreduce.h"
#include "allreduce/algorithms/peer_link_probe.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

using Made = absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>>;

std::vector<int> NoPeers(int, int, const AlgorithmOptions&) { return {}; }

// The tree's, and one more connection for the probe that sizes its slices
// when no link is given.
std::vector<int> TreePeers(int rank, int world_size, const AlgorithmOptions&) {
  std::set<int> peers;
  for (int peer : TreeAllReduce::Peers(rank, world_size)) peers.insert(peer);
  const int partner = ProbePartner(rank, world_size);
  if (partner >= 0) peers.insert(partner);
  return {peers.begin(), peers.end()};
}

// Every candidate's, and the probe's.
std::vector<int> SelectorPeers(int rank, int world_size,
                               const AlgorithmOptions& options) {
  std::set<int> peers;
  for (const AllReduceEntry* candidate : SelectorCandidates()) {
    for (int peer : candidate->peers(rank, world_size, options)) {
      peers.insert(peer);
    }
  }
  const int partner = ProbePartner(rank, world_size);
  if (partner >= 0) peers.insert(partner);
  return {peers.begin(), peers.end()};
}

Made CreateTree(PeerTransport* transport, const AlgorithmOptions& options) {
  auto tree = std::make_unique<TreeAllReduce>(transport, options.chunk_bytes);
  // The tree's lead is sized by the link (tree_allreduce.h): the given one,
  // or probed as --sync=allreduce probes it.
  LinkCost link = options.link;
  if ((link.alpha_s <= 0 || link.bytes_per_s <= 0) &&
      transport->world_size() > 1) {
    RingAllReduce ring(transport, options.chunk_bytes);
    ASSIGN_OR_RETURN(PeerLinkProbeResult probe,
                     ProbePeerLink(transport, options.chunk_bytes, ring));
    link = probe.link;
  }
  tree->SetLink(link);
  return std::unique_ptr<AllReduceAlgorithm>(std::move(tree));
}

const std::vector<AllReduceEntry>& Table() {
  static const auto* const table = new std::vector<AllReduceEntry>{
      {AllReduceKind::kRing, "ring", NoPeers,
       [](PeerTransport* transport, const AlgorithmOptions& options) -> Made {
         return std::make_unique<RingAllReduce>(transport, options.chunk_bytes);
       },
       [](int n, double bytes, const LinkCost& link, double) {
         return RingAllReduceSeconds(n, bytes, link);
       }},
      {AllReduceKind::kHalvingDoubling, "halving_doubling",
       [](int rank, int world_size, const AlgorithmOptions&) {
         return HalvingDoublingAllReduce::Peers(rank, world_size);
       },
       [](PeerTransport* transport, const AlgorithmOptions& options) -> Made {
         return std::make_unique<HalvingDoublingAllReduce>(transport,
                                                           options.chunk_bytes);
       },
       [](int n, double bytes, const LinkCost& link, double eager_bytes) {
         return HalvingDoublingAllReduceSeconds(n, bytes, link, eager_bytes);
       }},
      {AllReduceKind::kTree, "tree", TreePeers, CreateTree,
       [](int n, double bytes, const LinkCost& link, double eager_bytes) {
         return TreeAllReduceSeconds(n, bytes, link, eager_bytes);
       }},
      {AllReduceKind::kHierarchical, "hierarchical",
       [](int rank, int world_size, const AlgorithmOptions& options) {
         return HierarchicalAllReduce::Peers(rank, world_size,
                                             options.ranks_per_node);
       },
       [](PeerTransport* transport, const AlgorithmOptions& options) -> Made {
         return std::make_unique<HierarchicalAllReduce>(
             transport, options.chunk_bytes, options.ranks_per_node);
       },
       nullptr},
      {AllReduceKind::kSelecting, "allreduce", SelectorPeers,
       [](PeerTransport* transport, const AlgorithmOptions& options) -> Made {
         ASSIGN_OR_RETURN(std::unique_ptr<SelectingAllReduce> selector,
                          SelectingAllReduce::Create(transport, options,
                                                     SelectorCandidates()));
         return std::unique_ptr<AllReduceAlgorithm>(std::move(selector));
       },
       nullptr},
  };
  return *table;
}

}  // namespace

const std::vector<AllReduceEntry>& AllReduceTable() { return Table(); }

const AllReduceEntry& AllReduceEntryOf(AllReduceKind kind) {
  return Table()[static_cast<size_t>(kind)];
}

const AllReduceEntry* FindAllReduce(absl::string_view name) {
  for (const AllReduceEntry& entry : Table()) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

std::vector<const AllReduceEntry*> SelectorCandidates() {
  return {&AllReduceEntryOf(AllReduceKind::kRing),
          &AllReduceEntryOf(AllReduceKind::kHalvingDoubling),
          &AllReduceEntryOf(AllReduceKind::kTree)};
}

AllReduceKind ChooseAllReduce(int n, double bytes, const CandidateLinks& links,
                              double eager_bytes) {
  return SelectingAllReduce::Choose(SelectorCandidates(), n, bytes, links,
                                    eager_bytes)
      .kind;
}

double PredictAllReduce(AllReduceKind kind, int n, double bytes,
                        const LinkCost& link, double eager_bytes) {
  return AllReduceEntryOf(kind).predict(n, bytes, link, eager_bytes);
}

}  // namespace gradsync
