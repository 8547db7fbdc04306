// cuDNN algorithm choice and workspace sizing (see the header).
#include "core/device/cudnn_algorithm_choice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradsync {

absl::StatusOr<ConvolutionAlgorithmResult> PickConvolutionAlgorithm(
    const std::vector<ConvolutionAlgorithmResult>& results,
    const ConvolutionAlgorithmPolicy& policy, absl::string_view what) {
  const ConvolutionAlgorithmResult* first = nullptr;
  const ConvolutionAlgorithmResult* fastest = nullptr;
  std::vector<std::string> refused;
  for (const ConvolutionAlgorithmResult& result : results) {
    std::string why;
    if (!result.supported) {
      why = result.unsupported_because.empty()
                ? "not supported"
                : absl::StrCat("not supported (", result.unsupported_because,
                               ")");
    } else if (result.tensor_core_math && !policy.allow_tensor_core_math) {
      why = "tensor-core math";
    } else if (result.workspace_bytes > policy.workspace_limit) {
      why = absl::StrCat("workspace ", result.workspace_bytes, " bytes");
    } else if (policy.require_deterministic && !result.deterministic) {
      why = "not deterministic";
    }
    if (!why.empty()) {
      refused.push_back(absl::StrCat(result.algorithm, ": ", why));
      continue;
    }
    if (first == nullptr) first = &result;
    if (result.time_ms >= 0 &&
        (fastest == nullptr || result.time_ms < fastest->time_ms)) {
      fastest = &result;
    }
  }
  if (fastest != nullptr) return *fastest;
  if (first != nullptr) return *first;
  return absl::FailedPreconditionError(absl::StrCat(
      "no cuDNN algorithm for ", what, " within a workspace of ",
      policy.workspace_limit, " bytes",
      policy.require_deterministic ? ", deterministic" : "",
      results.empty() ? ": cuDNN offered none"
                      : absl::StrCat(" (", absl::StrJoin(refused, "; "), ")")));
}

size_t ConvolutionWorkspaceLimit(size_t free_bytes) {
  constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;
  return std::min(kMaxWorkspaceBytes, free_bytes / 8);
}

size_t GrowConvolutionWorkspace(size_t current, size_t needed, size_t limit) {
  if (needed <= current) return current;
  const size_t doubled = current > limit / 2 ? limit : 2 * current;
  return std::max(needed, std::min(doubled, limit));
}

}  // namespace gradsync
