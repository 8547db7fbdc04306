// The --gpus list and the local-rank → GPU mapping (see gpu_selection.h).
#include "core/device/gpu_selection.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gradsync {

absl::StatusOr<std::vector<int>> ParseGpuList(absl::string_view text) {
  std::vector<int> gpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return gpus;
  std::set<int> seen;
  int position = 0;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    ++position;
    piece = absl::StripAsciiWhitespace(piece);
    int gpu = -1;
    if (!absl::SimpleAtoi(piece, &gpu) || gpu < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", text, ": entry ", position, " ('", piece,
                       "') is not a GPU index (a non-negative integer)"));
    }
    if (!seen.insert(gpu).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", text, ": GPU ", gpu,
                       " is listed twice; ranks beyond the "
                       "list's length already wrap around to its start"));
    }
    gpus.push_back(gpu);
  }
  return gpus;
}

absl::StatusOr<int> SelectGpu(int local_rank, int visible_gpus,
                              const std::vector<int>& gpu_list) {
  if (local_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rank ", local_rank, " must be >= 0"));
  }
  if (visible_gpus <= 0) {
    return absl::FailedPreconditionError(
        "no CUDA GPU is visible to this process (check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES)");
  }
  if (gpu_list.empty()) return local_rank % visible_gpus;
  for (int gpu : gpu_list) {
    if (gpu >= visible_gpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus lists GPU ", gpu, " but only ", visible_gpus,
                       " GPU(s) are visible (indices 0..", visible_gpus - 1,
                       ", after CUDA_VISIBLE_DEVICES)"));
    }
  }
  return gpu_list[local_rank % gpu_list.size()];
}

absl::Status OneGpuPerRank(int local_ranks, int visible_gpus) {
  if (local_ranks <= visible_gpus) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--sync=nccl needs one GPU per rank, but this host runs ", local_ranks,
      " ranks of the job and sees ", visible_gpus,
      " GPU(s); NCCL does not support several ranks on one GPU (such a job "
      "may hang). Start at most ",
      visible_gpus,
      " rank(s) per host (gradsync launch --workers), or use --sync=ring"));
}

}  // namespace gradsync
