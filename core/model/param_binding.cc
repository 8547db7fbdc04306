#include "core/model/param_binding.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace gradsync {

absl::Status CheckLayoutMatches(const std::string& model,
                                const ParamLayout& layout,
                                const std::vector<ParamSpec>& specs) {
  // The trainer hands the model's parameter indices to the strategy through
  // the `ready` callback, so the order matters as much as the shapes.
  if (layout.params().size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": layout has ", layout.params().size(),
                     " parameters, the model ", specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& got = layout.params()[i].spec;
    if (got.name != specs[i].name || got.shape != specs[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          model, ": layout parameter ", i, " is '", got.name, "' [",
          absl::StrJoin(got.shape, "x"), "], the model expects '",
          specs[i].name, "' [", absl::StrJoin(specs[i].shape, "x"), "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParamPointers> BindParamPointers(
    const std::string& model, const ParamLayout& layout,
    const std::vector<ParamSpec>& specs, float* params, float* grads,
    int max_batch) {
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": max batch ", max_batch, " must be >= 1"));
  }
  if (params == nullptr || grads == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": Bind needs parameter and gradient buffers"));
  }
  RETURN_IF_ERROR(CheckLayoutMatches(model, layout, specs));
  ParamPointers pointers;
  for (const ParamInfo& info : layout.params()) {
    pointers.params.push_back(params + info.offset);
    pointers.grads.push_back(grads + info.offset);
  }
  return pointers;
}

}  // namespace gradsync
