// cuDNN algorithm choice and workspace sizing (see the header).
#include "core/device/cudnn_algorithm_choice.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gradsync {

namespace {

// Why the policy refuses `result`, or "" when it qualifies.
std::string RefusalOf(const ConvolutionAlgorithmResult& result,
                      const ConvolutionAlgorithmPolicy& policy) {
  if (!result.supported) {
    return result.unsupported_because.empty()
               ? "not supported"
               : absl::StrCat("not supported (", result.unsupported_because,
                              ")");
  }
  if (result.tensor_core_math && !policy.allow_tensor_core_math) {
    return "tensor-core math";
  }
  if (result.workspace_bytes > policy.workspace_limit) {
    return absl::StrCat("workspace ", result.workspace_bytes, " bytes");
  }
  if (policy.require_deterministic && !result.deterministic) {
    return "not deterministic";
  }
  return "";
}

}  // namespace

std::string GraphEngineRefusal(const GraphEngineNotes& notes,
                               const ConvolutionAlgorithmPolicy& policy) {
  if (notes.tensor_core && !policy.allow_tensor_core_math) {
    return "tensor-core math";
  }
  if (notes.down_convert_inputs) return "inputs converted to 16 bits";
  if (notes.reduced_precision_reduction) return "16-bit reduction";
  if (policy.require_deterministic && notes.nondeterministic) {
    return "not deterministic";
  }
  if (notes.runtime_compilation) return "compiles kernels at set-up";
  return "";
}

std::string DescribeGraphSearch(const GraphSearchSummary& summary) {
  std::string out =
      absl::StrCat("graph API: ", summary.listed, " configurations listed, ",
                   summary.timed, " timed");
  if (summary.fastest_ms >= 0) {
    absl::StrAppend(&out, ", fastest engine ", summary.fastest_engine, " in ",
                    absl::StrFormat("%.3f", summary.fastest_ms), " ms");
  }
  if (!summary.refused.empty()) {
    std::vector<std::string> reasons;
    for (const auto& [reason, count] : summary.refused) {
      reasons.push_back(absl::StrCat(count, " ", reason));
    }
    absl::StrAppend(&out, "; refused: ", absl::StrJoin(reasons, ", "));
  }
  const std::pair<int, const char*> others[] = {
      {summary.unreadable, "without readable notes"},
      {summary.no_plan, "made no plan"},
      {summary.over_workspace, "over the workspace limit"},
      {summary.failed, "failed to run"},
      {summary.not_tried, "not tried (after the candidates timed)"}};
  for (const auto& [count, what] : others) {
    if (count > 0) absl::StrAppend(&out, "; ", count, " ", what);
  }
  return out;
}

size_t SearchWorkspaceBytes(
    const std::vector<ConvolutionAlgorithmResult>& candidates,
    const ConvolutionAlgorithmPolicy& policy) {
  size_t bytes = 0;
  for (const ConvolutionAlgorithmResult& candidate : candidates) {
    if (RefusalOf(candidate, policy).empty()) {
      bytes = std::max(bytes, candidate.workspace_bytes);
    }
  }
  return bytes;
}

absl::StatusOr<ConvolutionAlgorithmResult> PickConvolutionAlgorithm(
    const std::vector<ConvolutionAlgorithmResult>& results,
    const ConvolutionAlgorithmPolicy& policy, absl::string_view what) {
  const ConvolutionAlgorithmResult* first = nullptr;
  const ConvolutionAlgorithmResult* fastest = nullptr;
  std::vector<std::string> refused;
  for (const ConvolutionAlgorithmResult& result : results) {
    const std::string why = RefusalOf(result, policy);
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

bool PrefersNchw(const LayoutTiming& timing) {
  return timing.nchw_ms >= 0 &&
         (timing.nhwc_ms < 0 || timing.nchw_ms < timing.nhwc_ms);
}

std::string DescribeLayoutChoice(const LayoutTiming& timing) {
  const auto ms = [](float value) { return absl::StrFormat("%.3f", value); };
  if (timing.nchw_ms < 0) {
    return absl::StrCat("layout NHWC (NCHW not timed: ",
                        timing.nchw_unavailable.empty()
                            ? "no reason given"
                            : timing.nchw_unavailable,
                        ")");
  }
  if (timing.nhwc_ms < 0) {
    return absl::StrCat("layout NCHW, timed ", ms(timing.nchw_ms),
                        " ms a step (NHWC not timed)");
  }
  const bool nchw = PrefersNchw(timing);
  return absl::StrCat("layout ", nchw ? "NCHW" : "NHWC", ", timed ",
                      ms(nchw ? timing.nchw_ms : timing.nhwc_ms),
                      " ms a step against ", nchw ? "NHWC" : "NCHW", "'s ",
                      ms(nchw ? timing.nhwc_ms : timing.nchw_ms), " ms");
}

}  // namespace gradsync
