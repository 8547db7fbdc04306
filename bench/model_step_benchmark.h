// One forward + backward step of a model on the CPU device, timed by Google
// Benchmark: the part every model's compute benchmark shares (binding the
// model, random images and labels on the device, the timed loop and the
// GFLOP/s counters). Each benchmark file states its model and how it counts
// FLOP.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/model/model.h"

namespace gradsync {

// A batch for `model` that needs no data set: images uniform in [-1, 1)
// (seed 7), labels cycling through the classes. bench/layer_profile uses it
// too.
struct SyntheticBatch {
  std::vector<float> images;    // batch × model.input_dim()
  std::vector<int32_t> labels;  // batch
};
SyntheticBatch MakeSyntheticBatch(const Model& model, int batch);

// Times `model` (a fresh, unbound model) at the batch of state.range(0) and
// the threads of state.range(1); `flops_per_image` is one step's FLOP for
// one image, for the GFLOP/s counter.
void RunModelStepBenchmark(benchmark::State& state,
                           std::unique_ptr<Model> model,
                           double flops_per_image);

}  // namespace gradsync
