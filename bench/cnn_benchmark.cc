// The per-step compute of the CNN (--model=cnn, core/model/cnn.cc) on the CPU
// device: one forward and backward pass over a Fashion-MNIST-shaped batch
// (1×28×28 images, ten classes), at batch 32 and 64 and 1 or 2 threads (BLAS
// and oneDNN). bench/compute_vs_pytorch.py runs it beside PyTorch's same
// network.
//
//   bazel run -c opt //bench:cnn_benchmark -- --benchmark_min_time=2
//
// GFLOP/s counts the convolutions' and the fully connected layers'
// multiply-adds (2 FLOP each): forward, weight gradient and input gradient
// (none for the first convolution, whose input gradient is not computed).
// ReLU, pooling, bias and the loss are in the time, not in the count.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "bench/model_step_benchmark.h"
#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/model/model.h"

namespace gradsync {
namespace {

// FLOP of one forward + backward step per image of the default CNN.
double FlopsPerImage(const CnnOptions& options) {
  const ImageInput& in = options.input;
  const double pixels1 = double(in.height) * in.width;
  const double pixels2 = pixels1 / 4;
  const double conv1 = 2.0 * pixels1 * options.conv1_channels * in.channels * 9;
  const double conv2 =
      2.0 * pixels2 * options.conv2_channels * options.conv1_channels * 9;
  const double fc1 =
      2.0 * (pixels2 / 4) * options.conv2_channels * options.hidden;
  const double fc2 = 2.0 * options.hidden * in.num_classes;
  return 2 * conv1 + 3 * (conv2 + fc1 + fc2);
}

void BM_CnnForwardBackward(benchmark::State& state) {
  const CnnOptions options;  // Fashion-MNIST's 1×28×28, 32/64/128 wide
  std::unique_ptr<Model> model = ValueOrDie(CreateCnn(options));
  RunModelStepBenchmark(state, std::move(model), FlopsPerImage(options));
}

BENCHMARK(BM_CnnForwardBackward)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{32, 64}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();
