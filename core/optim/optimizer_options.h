// The optimizer's settings, as the trainer's flags give them. Declared below
// the trainer (core/optim/optimizer.h runs them) because a strategy that
// runs the optimizer itself, a parameter server with --ps_update=server, must
// run exactly what the workers would have run.
#pragma once

#include <string>

namespace gradsync {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd" | "adam"
  float lr = 0.05f;
  float momentum = 0.9f;  // sgd
  float weight_decay = 0.0f;
  float beta1 = 0.9f;  // adam
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
};

}  // namespace gradsync
