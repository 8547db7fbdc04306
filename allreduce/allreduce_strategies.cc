// The registrations of the all-reduce family besides the ring:
// --sync=halving_doubling, tree, hierarchical and allreduce, each a AllReduceSync
// (ring_sync.h) running its algorithm over the ring transport with the peer
// connections that algorithm asks for.
#include <memory>
#include <set>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/halving_doubling_allreduce.h"
#include "allreduce/algorithms/hierarchical_allreduce.h"
#include "allreduce/algorithms/peer_link_probe.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/allreduce_flags.h"
#include "allreduce/allreduce_sync.h"
#include "allreduce/algorithms/selecting_allreduce.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {
namespace {

// --allreduce_alpha_us and --allreduce_link_gbit; zeros (the defaults) ask
// for a probe.
LinkCost GivenLink() {
  LinkCost link;
  link.alpha_s = absl::GetFlag(FLAGS_allreduce_alpha_us) * 1e-6;
  link.bytes_per_s = absl::GetFlag(FLAGS_allreduce_link_gbit) * 1e9 / 8;
  return link;
}

absl::StatusOr<std::unique_ptr<GradientSync>> MakeSync(
    const SyncContext& context, AllReduceStrategy strategy) {
  if (context.identity.world_size > 1 && context.rendezvous == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--sync=", strategy.name, " with ", context.identity.world_size,
        " workers needs the coordinator to find its peers"));
  }
  // 16-bit values on the wire are built into the ring only; the all-gather
  // (topk, onebit, row-sparse) and random-k's dense all-reduce of k floats
  // work with every algorithm (ring_sync.h).
  const CompressionMethod method = context.compression.method;
  if (method == CompressionMethod::kFp16 ||
      method == CompressionMethod::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compression=", context.compression.ToString(),
                     " is not built for --sync=", strategy.name,
                     "; use --sync=ring or --sync=ps"));
  }
  ASSIGN_OR_RETURN(AllReduceSyncOptions options, AllReduceSyncOptionsFromFlags());
  return std::unique_ptr<GradientSync>(
      new AllReduceSync(context, options, std::move(strategy)));
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateHalvingDoublingSync(
    const SyncContext& context) {
  AllReduceStrategy strategy;
  strategy.name = "halving_doubling";
  strategy.peers = HalvingDoublingAllReduce::Peers;
  strategy.create = [](PeerTransport* transport, const AllReduceSyncOptions& options)
      -> absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>> {
    return std::make_unique<HalvingDoublingAllReduce>(transport,
                                                      options.chunk_bytes);
  };
  return MakeSync(context, std::move(strategy));
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateTreeSync(
    const SyncContext& context) {
  GS_LOG(INFO) << "tree: "
               << BuildDoubleBinaryTrees(context.identity.world_size).shape
               << " trees over " << context.identity.world_size
               << " ranks (tree_allreduce.h)";
  // The tree's lead is sized by the link (tree_allreduce.h): the given one,
  // or probed as --sync=allreduce probes it, over one more connection.
  const LinkCost given = GivenLink();
  AllReduceStrategy strategy;
  strategy.name = "tree";
  strategy.peers = [](int rank, int world_size) {
    std::set<int> peers;
    for (int peer : TreeAllReduce::Peers(rank, world_size)) peers.insert(peer);
    const int partner = ProbePartner(rank, world_size);
    if (partner >= 0) peers.insert(partner);
    return std::vector<int>(peers.begin(), peers.end());
  };
  strategy.create = [given](PeerTransport* transport,
                            const AllReduceSyncOptions& options)
      -> absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>> {
    auto tree = std::make_unique<TreeAllReduce>(transport, options.chunk_bytes);
    LinkCost link = given;
    if ((link.alpha_s <= 0 || link.bytes_per_s <= 0) &&
        transport->world_size() > 1) {
      RingAllReduce ring(transport, options.chunk_bytes);
      ASSIGN_OR_RETURN(PeerLinkProbeResult probe,
                       ProbePeerLink(transport, options.chunk_bytes, ring));
      link = probe.link;
    }
    tree->SetLink(link);
    return std::unique_ptr<AllReduceAlgorithm>(std::move(tree));
  };
  return MakeSync(context, std::move(strategy));
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateHierarchicalSync(
    const SyncContext& context) {
  int ranks_per_node = absl::GetFlag(FLAGS_allreduce_ranks_per_node);
  const char* source = "--allreduce_ranks_per_node";
  if (ranks_per_node <= 0) {
    ranks_per_node = context.identity.local_world_size;
    source = "the processes on this host (LOCAL_WORLD_SIZE)";
  }
  RETURN_IF_ERROR(Annotate(
      HierarchicalAllReduce::Check(context.identity.world_size, ranks_per_node),
      absl::StrCat("--sync=hierarchical with ranks per node from ", source)));
  GS_LOG(INFO) << "hierarchical: " << ranks_per_node << " ranks per node, from "
               << source << "; " << context.identity.world_size / ranks_per_node
               << " nodes";
  AllReduceStrategy strategy;
  strategy.name = "hierarchical";
  strategy.peers = [ranks_per_node](int rank, int world_size) {
    return HierarchicalAllReduce::Peers(rank, world_size, ranks_per_node);
  };
  strategy.create = [ranks_per_node](PeerTransport* transport,
                                     const AllReduceSyncOptions& options)
      -> absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>> {
    return std::make_unique<HierarchicalAllReduce>(
        transport, options.chunk_bytes, ranks_per_node);
  };
  return MakeSync(context, std::move(strategy));
}

absl::StatusOr<std::unique_ptr<GradientSync>> CreateSelectingSync(
    const SyncContext& context) {
  const LinkCost link = GivenLink();
  AllReduceStrategy strategy;
  strategy.name = "allreduce";
  strategy.peers = SelectingAllReduce::Peers;
  strategy.create = [link](PeerTransport* transport,
                           const AllReduceSyncOptions& options)
      -> absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>> {
    ASSIGN_OR_RETURN(
        std::unique_ptr<SelectingAllReduce> selector,
        SelectingAllReduce::Create(transport, options.chunk_bytes, link));
    return std::unique_ptr<AllReduceAlgorithm>(std::move(selector));
  };
  return MakeSync(context, std::move(strategy));
}

}  // namespace

GRADSYNC_REGISTER_SYNC(halving_doubling, CreateHalvingDoublingSync);
GRADSYNC_REGISTER_SYNC(tree, CreateTreeSync);
GRADSYNC_REGISTER_SYNC(hierarchical, CreateHierarchicalSync);
GRADSYNC_REGISTER_SYNC(allreduce, CreateSelectingSync);

}  // namespace gradsync
