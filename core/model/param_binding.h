// Binding a model to the flat parameter and gradient buffers: the checks every
// model's Bind makes, and where each parameter and its gradient lie. The
// trainer owns the buffers (laid out by ParamLayout); models only point into
// them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sync/param_layout.h"

namespace gradsync {

// `layout` must be the one made from the model's ParamSpecs(), since the
// model reports gradients by index into it.
absl::Status CheckLayoutMatches(const std::string& model,
                                const ParamLayout& layout,
                                const std::vector<ParamSpec>& specs);

// Each parameter's values and gradient in the flat buffers, indexed as the
// model's ParamSpecs().
struct ParamPointers {
  std::vector<float*> params;
  std::vector<float*> grads;
};

// What Model::Bind checks before it allocates anything: a batch of at least
// one row, both buffers, and a layout made from `specs`. Errors name `model`.
absl::StatusOr<ParamPointers> BindParamPointers(
    const std::string& model, const ParamLayout& layout,
    const std::vector<ParamSpec>& specs, float* params, float* grads,
    int max_batch);

}  // namespace gradsync
