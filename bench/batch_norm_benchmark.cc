// Batch normalisation on the CPU device, oneDNN's primitives against the
// reference loops over kernel_math.h (DeviceOptions::reference_batch_norm),
// at ResNet-18's (CIFAR form) four activation shapes for batch 32: one
// training forward and one backward per iteration, as a training step runs
// them. Both in one process, so that a loaded machine loads both alike; the
// process CPU time is the steadier reading there.
//
//   bazel run -c opt //bench:batch_norm_benchmark -- --benchmark_min_time=1
//
// Arguments: shape (0: 64 channels at 32×32, 1: 128 at 16×16, 2: 256 at
// 8×8, 3: 512 at 4×4, each × 32 images), onednn (1) or reference (0),
// threads.
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/device/device.h"

namespace gradsync {
namespace {

struct Shape {
  int64_t rows;
  int channels;
};
constexpr Shape kShapes[] = {{32 * 32 * 32, 64},
                             {32 * 16 * 16, 128},
                             {32 * 8 * 8, 256},
                             {32 * 4 * 4, 512}};

void BM_BatchNormTrainingStep(benchmark::State& state) {
  const Shape shape = kShapes[state.range(0)];
  DeviceOptions options;
  options.reference_batch_norm = state.range(1) == 0;
  options.cpu_threads = static_cast<int>(state.range(2));
  std::unique_ptr<Device> device = ValueOrDie(CreateDevice(options));
  const int64_t n = shape.rows * shape.channels;
  const int c = shape.channels;
  std::vector<float> host(n);
  std::mt19937 generator(3);
  std::normal_distribution<float> normal;
  for (float& v : host) v = normal(generator);
  float* x = ValueOrDie(device->Allocate<float>(n));
  float* dy = ValueOrDie(device->Allocate<float>(n));
  GS_CHECK(device->CopyToDevice(x, host.data(), n * 4).ok());
  GS_CHECK(device->CopyToDevice(dy, host.data(), n * 4).ok());
  float* y = ValueOrDie(device->Allocate<float>(n));
  float* dx = ValueOrDie(device->Allocate<float>(n));
  float* params = ValueOrDie(device->Allocate<float>(8 * c));
  device->Fill(params, c, 1.0f);          // gamma; beta, statistics start at 0
  device->Fill(params + 4 * c, c, 1.0f);  // running variance
  for (auto _ : state) {
    device->BatchNormForwardTraining(x, shape.rows, c, 1, params, params + c,
                                     0.1f, 1e-5f, y, params + 2 * c,
                                     params + 3 * c, params + 5 * c,
                                     params + 4 * c, BatchNormEpilogue::None());
    device->BatchNormBackward(x, dy, shape.rows, c, 1, params, params + 2 * c,
                              params + 3 * c, dx, params + 6 * c,
                              params + 7 * c, /*relu_output=*/nullptr,
                              /*dx_bf16=*/nullptr);
    benchmark::DoNotOptimize(dx);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 5);
}

BENCHMARK(BM_BatchNormTrainingStep)
    ->ArgNames({"shape", "onednn", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();
