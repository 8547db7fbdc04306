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
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/sync/param_layout.h"

namespace gradsync {
namespace {

template <typename T>
T Unwrap(absl::StatusOr<T> value) {
  GS_CHECK(value.ok()) << value.status();
  return *std::move(value);
}

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
  const int batch = static_cast<int>(state.range(0));
  DeviceOptions device_options;
  device_options.cpu_threads = static_cast<int>(state.range(1));
  std::unique_ptr<Device> device = Unwrap(CreateDevice(device_options));
  const CnnOptions options;  // Fashion-MNIST's 1×28×28, 32/64/128 wide
  std::unique_ptr<Model> model = Unwrap(CreateCnn(options));
  ParamLayout layout =
      Unwrap(ParamLayout::Create(model->ParamSpecs(), 25 << 20));
  const int64_t total = layout.total_numel();
  float* params = Unwrap(device->Allocate<float>(total));
  float* grads = Unwrap(device->Allocate<float>(total));
  std::vector<float> host(total);
  model->InitParams(1, layout, host.data());
  GS_CHECK(device->CopyToDevice(params, host.data(), total * 4).ok());
  GS_CHECK(model->Bind(*device, layout, params, grads, batch).ok());
  std::vector<float> images(int64_t{batch} * model->input_dim());
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
  for (float& x : images) x = pixel(generator);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  float* inputs = Unwrap(device->Allocate<float>(images.size()));
  int32_t* device_labels = Unwrap(device->Allocate<int32_t>(batch));
  float* loss = Unwrap(device->Allocate<float>(1));
  GS_CHECK(device->CopyToDevice(inputs, images.data(), images.size() * 4).ok());
  GS_CHECK(device->CopyToDevice(device_labels, labels.data(), batch * 4).ok());

  for (auto _ : state) {
    GS_CHECK(
        model->ForwardBackward(inputs, device_labels, batch, loss, [](int) {})
            .ok());
    GS_CHECK(device->Synchronize().ok());
  }
  const double flops = FlopsPerImage(options) * batch;
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["GFLOP_per_step"] = flops / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
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
