// Whether a model can train on a data set: its inputs are the set's features
// and it has an output for every class. Checked before anything is bound, with
// the flag that fixes a mismatch.
#pragma once

#include "absl/status/status.h"
#include "core/data/dataset.h"
#include "core/model/model.h"

namespace gradsync {

absl::Status CheckModelFitsData(const Model& model, const Dataset& train);

}  // namespace gradsync
