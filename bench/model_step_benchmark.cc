// One model step on the CPU device under Google Benchmark
// (model_step_benchmark.h).
#include "bench/model_step_benchmark.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/base/logging.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"

namespace gradsync {

SyntheticBatch MakeSyntheticBatch(const Model& model, int batch) {
  SyntheticBatch out;
  out.images.resize(int64_t{batch} * model.input_dim());
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
  for (float& x : out.images) x = pixel(generator);
  out.labels.resize(batch);
  for (int i = 0; i < batch; ++i) out.labels[i] = i % model.num_classes();
  return out;
}

void RunModelStepBenchmark(benchmark::State& state,
                           std::unique_ptr<Model> model,
                           double flops_per_image) {
  const int batch = static_cast<int>(state.range(0));
  DeviceOptions device_options;
  device_options.cpu_threads = static_cast<int>(state.range(1));
  std::unique_ptr<Device> device = ValueOrDie(CreateDevice(device_options));
  ParamLayout layout =
      ValueOrDie(ParamLayout::Create(model->ParamSpecs(), 25 << 20));
  const int64_t total = layout.total_numel();
  float* params = ValueOrDie(device->Allocate<float>(total));
  float* grads = ValueOrDie(device->Allocate<float>(total));
  std::vector<float> host(total);
  model->InitParams(1, layout, host.data());
  GS_CHECK(device->CopyToDevice(params, host.data(), total * 4).ok());
  GS_CHECK(model->Bind(*device, layout, params, grads, batch).ok());
  const SyntheticBatch data = MakeSyntheticBatch(*model, batch);
  const std::vector<float>& images = data.images;
  const std::vector<int32_t>& labels = data.labels;
  float* inputs = ValueOrDie(device->Allocate<float>(images.size()));
  int32_t* device_labels = ValueOrDie(device->Allocate<int32_t>(batch));
  float* loss = ValueOrDie(device->Allocate<float>(1));
  GS_CHECK(device->CopyToDevice(inputs, images.data(), images.size() * 4).ok());
  GS_CHECK(device->CopyToDevice(device_labels, labels.data(), batch * 4).ok());

  for (auto _ : state) {
    GS_CHECK(
        model->ForwardBackward(inputs, device_labels, batch, loss, [](int) {})
            .ok());
    GS_CHECK(device->Synchronize().ok());
  }
  const double flops = flops_per_image * batch;
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["GFLOP_per_step"] = flops / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace gradsync
