// What gradsync's own code costs the host in one training step: ResNet-18,
// the CNN and the MLP bound to a device whose kernels and convolutions do
// nothing and whose memory is the host's, so that the time left is the
// models' walk over their layers, the virtual calls into the device, the
// bucket callbacks and any bookkeeping between operations. On a GPU a step
// whose kernels finish before the host has queued the next ones is bound by
// the host (docs/results/gpu.md); this is the part of that host time that is
// gradsync's, the rest being the CUDA runtime's and cuDNN's calls
// (bench/layer_profile's "host ms" on a GPU).
//
//   bazel run -c opt //bench:host_floor_benchmark
//
// The bf16 rows bind the convolutions as accepting bf16 operands, the path a
// CUDA device takes at --precision=bf16 (the batch norms' bf16 epilogues, the
// bf16 input gradients).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "bench/model_step_benchmark.h"
#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/device/convolution_kernel.h"
#include "core/device/null_device.h"
#include "core/model/model.h"
#include "core/sync/param_layout.h"

namespace gradsync {
namespace {

void Check(const absl::Status& status) { GS_CHECK(status.ok()) << status; }

// A convolution that computes nothing; at bf16 it takes the layers' bf16
// operands, as cuDNN's does for NHWC inputs.
class IdleConvolution : public ConvolutionKernel {
 public:
  IdleConvolution(const ConvGeometry& g, int out_channels, bool bf16)
      : ConvolutionKernel(g, out_channels), bf16_(bf16) {}
  void Forward(const float*, const float*, float*) override {}
  void BackwardWeights(const float*, const float*, float*) override {}
  void BackwardInput(const float*, const float*, float*) override {}
  bool AcceptsBf16Operands() const override { return bf16_; }
  void ForwardFromBf16(const uint16_t*, const float*, uint16_t*) override {}
  void BackwardFromBf16(const uint16_t*, const uint16_t*, const float*, float*,
                        uint16_t*,
                        absl::FunctionRef<void()> weight_grad_ready) override {
    weight_grad_ready();
  }

 private:
  const bool bf16_;
};

// A CUDA-typed device with the host's memory and idle kernels.
class IdleDevice : public NullDevice {
 public:
  explicit IdleDevice(bool bf16)
      : NullDevice(DeviceType::kCuda, "idle"), bf16_(bf16) {}
  ~IdleDevice() override {
    for (void* block : blocks_) std::free(block);
  }
  absl::StatusOr<void*> AllocateBytes(size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment.
    void* block = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    GS_CHECK(block != nullptr) << "out of host memory for " << bytes;
    blocks_.push_back(block);
    return block;
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CreateConvolution(
      const ConvGeometry& g, int out_channels) override {
    return std::unique_ptr<ConvolutionKernel>(
        new IdleConvolution(g, out_channels, bf16_));
  }

 private:
  const bool bf16_;
  std::vector<void*> blocks_;
};

// state.range(0): batch; state.range(1): 1 for the bf16 path.
void RunHostFloor(benchmark::State& state, std::unique_ptr<Model> model) {
  const int batch = static_cast<int>(state.range(0));
  IdleDevice device(state.range(1) != 0);
  const ParamLayout layout =
      ValueOrDie(ParamLayout::Create(model->ParamSpecs(), 25 << 20));
  const int64_t total = layout.total_numel();
  std::vector<float> host(total);
  model->InitParams(1, layout, host.data());
  float* params = ValueOrDie(device.Allocate<float>(total));
  float* grads = ValueOrDie(device.Allocate<float>(total));
  Check(device.CopyToDevice(params, host.data(), total * sizeof(float)));
  Check(model->Bind(device, layout, params, grads, batch));
  const SyntheticBatch data = MakeSyntheticBatch(*model, batch);
  float* images = ValueOrDie(device.Allocate<float>(data.images.size()));
  int32_t* labels = ValueOrDie(device.Allocate<int32_t>(batch));
  float* loss = ValueOrDie(device.Allocate<float>(1));
  Check(device.CopyToDevice(images, data.images.data(),
                            data.images.size() * sizeof(float)));
  Check(device.CopyToDevice(labels, data.labels.data(),
                            data.labels.size() * sizeof(int32_t)));
  int64_t ready = 0;
  for (auto _ : state) {
    Check(model->ForwardBackward(images, labels, batch, loss,
                                 [&](int) { ++ready; }));
  }
  state.counters["gradients_ready_per_step"] =
      static_cast<double>(ready) / static_cast<double>(state.iterations());
}

void BM_ResNet18HostFloor(benchmark::State& state) {
  RunHostFloor(state, ValueOrDie(CreateResNet(ResNetOptions{})));
}
void BM_CnnHostFloor(benchmark::State& state) {
  RunHostFloor(state, ValueOrDie(CreateCnn(CnnOptions{})));
}
void BM_MlpHostFloor(benchmark::State& state) {
  RunHostFloor(state, ValueOrDie(CreateMlp(MlpOptions{})));
}

BENCHMARK(BM_ResNet18HostFloor)
    ->ArgNames({"batch", "bf16"})
    ->ArgsProduct({{128}, {0, 1}});
BENCHMARK(BM_CnnHostFloor)
    ->ArgNames({"batch", "bf16"})
    ->ArgsProduct({{128}, {0, 1}});
BENCHMARK(BM_MlpHostFloor)
    ->ArgNames({"batch", "bf16"})
    ->ArgsProduct({{128}, {0}});

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();
