// The ring's command-line knobs, declared once (defined in ring_flags.cc) so
// that the trainer's --sync=ring and the all-reduce benchmark read the same
// flags.
#pragma once

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int, ring_chunk_kb);
ABSL_DECLARE_FLAG(int, ring_socket_buffer_kb);
ABSL_DECLARE_FLAG(std::string, ring_row_sparse);
// The rest of the family's knobs (allreduce_family_sync.cc).
ABSL_DECLARE_FLAG(int, allreduce_ranks_per_node);
ABSL_DECLARE_FLAG(double, allreduce_alpha_us);
ABSL_DECLARE_FLAG(double, allreduce_link_gbit);
ABSL_DECLARE_FLAG(int, allreduce_eager_kb);
