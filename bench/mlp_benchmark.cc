// One training step (forward, backward, SGD step) of the default MLP
// (784-512-256-10) on the CPU device, per batch size and BLAS thread count.
// This is the compute side of every strategy's step: the time communication
// has to hide behind.
//
//   bazel run -c opt //bench:mlp_benchmark -- --benchmark_min_time=0.5
//
// samples/s is the items_per_second counter; GFLOP/s counts the three matrix
// products per layer (forward, weight gradient, input gradient — none for the
// first layer), 2·m·n·k each; the element-wise kernels (bias, ReLU, softmax,
// SGD) are left out of the count but not out of the time.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/sync/param_layout.h"

namespace gradsync {
namespace {

const std::vector<int>& DefaultWidths() {
  static const std::vector<int> widths = MlpOptions().widths;
  return widths;
}

double FlopsPerStep(const std::vector<int>& widths, int batch) {
  double flops = 0.0;
  for (size_t layer = 1; layer < widths.size(); ++layer) {
    const double product = 2.0 * batch * widths[layer - 1] * widths[layer];
    flops += layer == 1 ? 2 * product : 3 * product;
  }
  return flops;
}

// Everything one training step touches, set up once per benchmark run.
struct TrainingSetup {
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamLayout> layout;
  std::unique_ptr<Optimizer> optimizer;
  float* params = nullptr;
  float* grads = nullptr;
  float* inputs = nullptr;
  int32_t* labels = nullptr;
  float* loss = nullptr;
};

#define BENCH_CHECK_OK(expr)                                     \
  do {                                                           \
    const absl::Status bench_status_ = (expr);                   \
    GS_CHECK(bench_status_.ok()) << #expr ": " << bench_status_; \
  } while (0)

TrainingSetup MakeSetup(int batch, int threads) {
  TrainingSetup setup;
  DeviceOptions device_options;
  device_options.cpu_threads = threads;
  setup.device = ValueOrDie(CreateDevice(device_options));
  setup.model = ValueOrDie(CreateMlp(MlpOptions()));
  setup.layout = std::make_unique<ParamLayout>(ValueOrDie(
      ParamLayout::Create(setup.model->ParamSpecs(), 25 * 1024 * 1024)));
  const int64_t total = setup.layout->total_numel();
  setup.params = ValueOrDie(setup.device->Allocate<float>(total));
  setup.grads = ValueOrDie(setup.device->Allocate<float>(total));
  std::vector<float> host_params(total);
  setup.model->InitParams(1, *setup.layout, host_params.data());
  BENCH_CHECK_OK(setup.device->CopyToDevice(setup.params, host_params.data(),
                                            total * sizeof(float)));
  BENCH_CHECK_OK(setup.model->Bind(*setup.device, *setup.layout, setup.params,
                                   setup.grads, batch));

  // Fashion-MNIST-like inputs: pixels in [0, 1), ten classes.
  const int input_dim = setup.model->input_dim();
  std::mt19937_64 generator(3);
  std::vector<float> inputs(static_cast<size_t>(batch) * input_dim);
  for (float& x : inputs) {
    x = static_cast<float>(static_cast<double>(generator() >> 11) * 0x1.0p-53);
  }
  std::vector<int32_t> labels(batch);
  for (int32_t& label : labels) {
    label = static_cast<int32_t>(generator() % setup.model->num_classes());
  }
  setup.inputs = ValueOrDie(setup.device->Allocate<float>(inputs.size()));
  setup.labels = ValueOrDie(setup.device->Allocate<int32_t>(batch));
  setup.loss = ValueOrDie(setup.device->Allocate<float>(1));
  BENCH_CHECK_OK(setup.device->CopyToDevice(setup.inputs, inputs.data(),
                                            inputs.size() * sizeof(float)));
  BENCH_CHECK_OK(setup.device->CopyToDevice(setup.labels, labels.data(),
                                            labels.size() * sizeof(int32_t)));

  OptimizerOptions optimizer_options;  // SGD, momentum 0.9
  optimizer_options.lr = 0.01f;
  setup.optimizer = ValueOrDie(CreateOptimizer(optimizer_options));
  BENCH_CHECK_OK(setup.optimizer->Bind(*setup.device, total));
  return setup;
}

void BM_MlpTrainingStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  TrainingSetup setup = MakeSetup(batch, threads);
  // The trainer's callback marks buckets ready; counting is a stand-in of
  // similar cost, so the callbacks stay in the measured path.
  int64_t ready_calls = 0;
  const GradReadyCallback ready = [&ready_calls](int) { ++ready_calls; };

  for (auto _ : state) {
    BENCH_CHECK_OK(setup.model->ForwardBackward(setup.inputs, setup.labels,
                                                batch, setup.loss, ready));
    setup.optimizer->Step(setup.params, setup.grads, 0.01f);
    BENCH_CHECK_OK(setup.device->Synchronize());
  }
  benchmark::DoNotOptimize(ready_calls);

  float loss = 0.0f;
  BENCH_CHECK_OK(setup.device->CopyToHost(&loss, setup.loss, sizeof(float)));
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["GFLOP"] =
      benchmark::Counter(FlopsPerStep(DefaultWidths(), batch) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
  // Training on one fixed batch: the loss falling shows the step is real work.
  state.counters["final_loss"] = loss;
}

// The optimizer's share of a step: one SGD-with-momentum update over the whole
// default model (read p, g, v; write p, v: 20 bytes per parameter).
void BM_SgdUpdate(benchmark::State& state) {
  TrainingSetup setup = MakeSetup(/*batch=*/1, /*threads=*/1);
  const int64_t total = setup.layout->total_numel();
  for (auto _ : state) {
    setup.optimizer->Step(setup.params, setup.grads, 0.01f);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * total);
  state.SetBytesProcessed(state.iterations() * total * 20);
}
BENCHMARK(BM_SgdUpdate)->Unit(benchmark::kMicrosecond);

// Real time: OpenBLAS's worker threads do part of the work, and the main
// thread's CPU time would not include theirs.
BENCHMARK(BM_MlpTrainingStep)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{32, 64, 128, 256}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();
