// The per-step compute of ResNet-18 (CIFAR form, core/model/resnet.cc) on the
// CPU device: one forward and backward pass over a CIFAR-shaped batch (3×32×32
// images, ten classes), the work a worker does between two synchronizations,
// at batch 32 and 64 and 1 or 2 BLAS threads.
//
//   bazel run -c opt //bench:resnet_benchmark -- --benchmark_min_time=2
//
// GFLOP/s counts the convolutions' and the classifier's multiply-adds (2 FLOP
// each): forward, weight gradient and input gradient (none for the stem,
// whose input gradient is not computed). Batch norm, ReLU, pooling, im2col
// and col2im are left out of the count but not out of the time. The count is
// derived from the model's own parameter list, so it follows the model.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/model_step_benchmark.h"
#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/model/model.h"

namespace gradsync {
namespace {

// FLOP of one forward + backward step per image. A convolution's weight
// [out, in, k, k] produces out_size² pixels, where out_size is the
// resolution of its stage (32 for the stem and layer1, halved per stage).
double FlopsPerImage(const std::vector<ParamSpec>& specs) {
  double flops = 0;
  for (const ParamSpec& spec : specs) {
    if (spec.shape.size() == 4) {
      int size = 32;
      if (spec.name.rfind("layer", 0) == 0) size >>= (spec.name[5] - '1');
      const double macs = double(spec.shape[0]) * spec.shape[1] *
                          spec.shape[2] * spec.shape[3] * size * size;
      flops += 2 * macs * (spec.name == "conv1.weight" ? 2 : 3);
    } else if (spec.name == "fc.weight") {
      flops += 2.0 * spec.shape[0] * spec.shape[1] * 3;
    }
  }
  return flops;
}

void BM_ResNet18ForwardBackward(benchmark::State& state) {
  std::unique_ptr<Model> model = ValueOrDie(CreateResNet(ResNetOptions{}));
  const double flops_per_image = FlopsPerImage(model->ParamSpecs());
  RunModelStepBenchmark(state, std::move(model), flops_per_image);
}

BENCHMARK(BM_ResNet18ForwardBackward)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{32, 64}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();
