// layout.json's text (layout_json.h).
#include "core/train/layout_json.h"

#include "nlohmann/json.hpp"

namespace gradsync {

std::string LayoutJson(const ParamLayout& layout, const std::string& model,
                       double bucket_mb) {
  nlohmann::json params = nlohmann::json::array();
  for (const ParamInfo& info : layout.params()) {
    params.push_back({{"name", info.spec.name},
                      {"numel", info.numel},
                      {"bucket", info.bucket}});
  }
  nlohmann::json buckets = nlohmann::json::array();
  for (const Bucket& bucket : layout.buckets()) {
    buckets.push_back({{"index", bucket.index},
                       {"numel", bucket.numel},
                       {"bytes", bucket.numel * 4},
                       {"params", bucket.params}});
  }
  const nlohmann::json json = {
      {"model", model},
      {"total_numel", layout.total_numel()},
      {"total_bytes", layout.total_bytes()},
      {"bucket_mb", bucket_mb},
      {"params", params},
      {"buckets", buckets},
  };
  return json.dump(1) + "\n";
}

}  // namespace gradsync
