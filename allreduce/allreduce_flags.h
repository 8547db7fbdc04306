// The all-reduce family's command-line flags, defined once (allreduce_flags.cc)
// and read only through ReadAllReduceFlags, by the strategy factories
// (allreduce_strategies.cc) and the programs' mains (the all-reduce benchmark,
// the multi-process check). No library of the family reads a flag: the sync
// layer and the algorithms take option structs. No flag is declared in this
// header (Abseil's Tip of the Week #103), so a flag's only readers are the
// ones that call this function.
#pragma once

#include <cstdint>
#include <string>

#include "core/sync/link_cost.h"

namespace gradsync {

struct AllReduceFlagValues {
  // --allreduce_chunk_kb, or its old name --ring_chunk_kb when only that one
  // was changed; in bytes.
  int64_t chunk_bytes = 256 << 10;
  // Whether either chunk flag differs from its default.
  bool chunk_given = false;
  // Both chunk flags changed, to different values: the factories refuse it.
  bool chunk_conflict = false;
  int ring_chunk_kb = 256;            // as given, for the conflict's message
  int allreduce_chunk_kb = 256;       // as given
  int socket_buffer_bytes = 4 << 20;  // --ring_socket_buffer_kb
  std::string row_sparse = "auto";    // --ring_row_sparse
  int ranks_per_node = 0;             // --allreduce_ranks_per_node
  // --allreduce_alpha_us and --allreduce_link_gbit; zeros ask for a probe.
  LinkCost link{0, 0};
  int eager_kb = 256;  // --allreduce_eager_kb, unchecked
};

AllReduceFlagValues ReadAllReduceFlags();

}  // namespace gradsync
