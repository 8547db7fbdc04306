#include "sim/profile.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace sim {
namespace {

struct Tensor {
  int64_t bytes;
  double ready_ms;
  int index;  // in registration order
};

// Tensors in backward's order into buckets of at least `bucket_bytes` (the
// last may be smaller), each ready when its latest tensor is.
std::vector<Bucket> CutIntoBuckets(const std::vector<Tensor>& tensors,
                                   int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  Bucket open;
  for (const Tensor& tensor : tensors) {
    if (open.bytes == 0) open.end_tensor = tensor.index + 1;
    open.first_tensor = tensor.index;
    open.bytes += tensor.bytes;
    open.ready_ms = std::max(open.ready_ms, tensor.ready_ms);
    if (open.bytes >= bucket_bytes) {
      buckets.push_back(open);
      open = Bucket();
    }
  }
  if (open.bytes > 0) buckets.push_back(open);
  return buckets;
}

}  // namespace

absl::StatusOr<StepProfile> ParseProfile(const std::string& json_text,
                                         int64_t bucket_bytes,
                                         const std::string& source) {
  const nlohmann::json root =
      nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is not a JSON object; a profile has forward_ms, "
                             "backward_ms, optimizer_ms and params"));
  }
  StepProfile profile;
  for (const char* key : {"forward_ms", "backward_ms", "optimizer_ms"}) {
    if (!root.contains(key) || !root[key].is_number() || root[key] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": '", key, "' is missing or not a number of at least 0"));
    }
  }
  profile.forward_ms = root["forward_ms"];
  profile.backward_ms = root["backward_ms"];
  profile.optimizer_ms = root["optimizer_ms"];
  profile.name = absl::StrCat(root.value("model", "model"), "-b",
                              root.value("batch", 0), "-",
                              root.value("precision", "fp32"));
  if (!root.contains("params") || !root["params"].is_array() ||
      root["params"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " has no params: it needs every parameter tensor with numel "
                "and ready_ms, to make the buckets from"));
  }
  std::vector<Tensor> tensors;
  for (const nlohmann::json& param : root["params"]) {
    if (!param.is_object() || !param.contains("numel") ||
        !param["numel"].is_number_integer() || param["numel"] <= 0 ||
        !param.contains("ready_ms") || !param["ready_ms"].is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": param ", tensors.size(),
          " needs a positive integer numel and a number ready_ms"));
    }
    tensors.push_back({4 * param["numel"].get<int64_t>(),
                       param["ready_ms"].get<double>(),
                       static_cast<int>(tensors.size())});
    profile.gradient_bytes += tensors.back().bytes;
    profile.tensor_bytes.push_back(tensors.back().bytes);
  }
  // Backward produces the last registered tensors first.
  std::reverse(tensors.begin(), tensors.end());
  profile.buckets = CutIntoBuckets(tensors, bucket_bytes);
  return profile;
}

StepProfile CustomProfile(int64_t gradient_bytes, int tensors,
                          int64_t bucket_bytes) {
  StepProfile profile;
  profile.name = absl::StrCat("custom-", gradient_bytes, "B");
  profile.gradient_bytes = gradient_bytes;
  std::vector<Tensor> all(tensors, Tensor{gradient_bytes / tensors, 0.0, 0});
  // The remainder on the first registered tensor, the last one backward
  // makes ready.
  all.front().bytes += gradient_bytes % tensors;
  for (int i = 0; i < tensors; ++i) {
    all[i].index = i;
    profile.tensor_bytes.push_back(all[i].bytes);
  }
  // Backward's order: the last registered first.
  std::reverse(all.begin(), all.end());
  profile.buckets = CutIntoBuckets(all, bucket_bytes);
  return profile;
}

}  // namespace sim
}  // namespace gradsync
