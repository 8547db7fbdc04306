// A model against its data set (model_data_fit.h).
#include "core/train/model_data_fit.h"

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::Status CheckModelFitsData(const Model& model, const Dataset& train) {
  if (model.input_dim() != train.feature_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model takes ", model.input_dim(), " inputs but ", train.name,
        " has ", train.feature_dim, " features per sample (model ",
        model.name(), "); for --model=mlp set the first --layers width to ",
        train.feature_dim,
        " (the convolutional models take their shape from the data set)"));
  }
  if (model.num_classes() < train.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model has ", model.num_classes(), " outputs but ", train.name,
        " has ", train.num_classes, " classes; set the last --layers width to ",
        train.num_classes));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
