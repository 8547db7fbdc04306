// <metrics_dir>/layout.json: every tensor and every bucket in the order
// backward hands them off, so the cost model and the plots know what a step
// sends without re-deriving the model's shapes.
#pragma once

#include <string>

#include "core/sync/param_layout.h"

namespace gradsync {

// The file's text for `layout` of model `model`, made with a bucket cap of
// `bucket_mb` (0: derived from the model).
std::string LayoutJson(const ParamLayout& layout, const std::string& model,
                       double bucket_mb);

}  // namespace gradsync
