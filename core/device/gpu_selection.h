// Which GPU a worker uses: a list of GPUs (the command line's --gpus,
// tools/train_flags.h) and the local rank. Kept apart from the CUDA backend
// (and compiled in every build) so that the command line can parse --gpus,
// and the parsing is tested, on machines without CUDA too; a launch script
// that passes --gpus=0,1 then fails on a CPU build for the right reason
// (--device=cuda), not with "unknown flag".
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradsync {

// Parses "0,1,3" into {0, 1, 3}. Empty text is an empty list (no mapping).
// Entries must be non-negative integers and distinct: listing a GPU twice is
// almost always a typo, and several ranks on one GPU already follow from the
// modulo below.
absl::StatusOr<std::vector<int>> ParseGpuList(absl::string_view text);

// The GPU index (among the visible ones, after CUDA_VISIBLE_DEVICES) for
// `local_rank`: gpu_list[local_rank % size] when a list is given, like
// paddle.distributed.launch --gpus; otherwise local_rank % visible_gpus, so
// that N ranks on a machine with fewer GPUs share them round-robin.
absl::StatusOr<int> SelectGpu(int local_rank, int visible_gpus,
                              const std::vector<int>& gpu_list);

// For NCCL, which needs a GPU of its own for every rank of a communicator
// (NCCL 2.28 does not support several ranks on one GPU: it refuses them, and
// NCCL_HOSTID, which gets past the check, leaves a job that may hang):
// FailedPrecondition when `local_ranks` ranks would share `visible_gpus`.
absl::Status OneGpuPerRank(int local_ranks, int visible_gpus);

}  // namespace gradsync
