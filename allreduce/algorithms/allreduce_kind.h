// Which all-reduce of the family runs, and the shape of one row of the table
// that describes each (allreduce/allreduce_table.h holds the rows): its
// --sync= name, the peers it needs connections to besides the ring
// neighbours, how it is made over a connected transport, and its α–β
// prediction (cost_model.h).
//
// The row type lives here, below every algorithm, so that the selector
// (selecting_allreduce.h) can be handed its candidates as rows without
// knowing the table that also makes the selector itself.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "core/sync/link_cost.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

enum class AllReduceKind {
  kRing,             // ring_allreduce.h
  kHalvingDoubling,  // halving_doubling_allreduce.h
  kTree,             // tree_allreduce.h
  kHierarchical,     // hierarchical_allreduce.h
  kSelecting,        // selecting_allreduce.h: --sync=allreduce
};

// What an algorithm is made with, resolved before any connection exists.
struct AlgorithmOptions {
  // The most bytes one send or receive call moves (--allreduce_chunk_kb).
  int64_t chunk_bytes = 256 << 10;
  // α and B for the selector's predictions and the tree's slices; zeros ask
  // for a probe on the job's own connections (peer_link_probe.h).
  LinkCost link{0, 0};
  // Hierarchical only: consecutive ranks that form a node.
  int ranks_per_node = 0;
};

struct AllReduceEntry {
  AllReduceKind kind;
  // The --sync= name; also every log line's, summary key's and error's.
  const char* name;
  // The ranks besides the ring neighbours that `rank` needs a two-way
  // connection to (PeerTransportOptions::peers); symmetric by construction.
  std::vector<int> (*peers)(int rank, int world_size,
                            const AlgorithmOptions& options);
  // The algorithm over a transport connected with `peers`. May move bytes
  // (the link probe) and so fail.
  absl::StatusOr<std::unique_ptr<AllReduceAlgorithm>> (*create)(
      PeerTransport* transport, const AlgorithmOptions& options);
  // Seconds for one all-reduce of `bytes` over `n` ranks (cost_model.h), with
  // the family's eager prefix before a clear to send (peer_exchange.h; 0:
  // none). Null where one link cannot predict it (hierarchical needs the
  // link inside a node and the one across; the selector is its pick's).
  double (*predict)(int n, double bytes, const LinkCost& link,
                    double eager_bytes);
};

}  // namespace gradsync
