// One model code, two devices: the same MLP, data and optimizer on the CPU and
// the CUDA backend agree step by step within float32 rounding. This is what
// lets a GPU run of any strategy be compared with the CPU reference. Runs only
// in CUDA builds with a visible GPU; skips otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/sync/param_layout.h"
#include "core/train/model.h"
#include "core/train/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef GRADSYNC_CUDA
#include <cuda_runtime.h>
#endif

namespace gradsync {
namespace {

#ifndef GRADSYNC_CUDA

TEST(DeviceParityTest, NeedsACudaBuild) {
  GTEST_SKIP() << "CPU/CUDA parity needs --config=cuda and a GPU";
}

#else

// One replica of the training state on one device.
struct Replica {
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  float* params = nullptr;
  float* grads = nullptr;
  float* inputs = nullptr;
  int32_t* labels = nullptr;
  float* loss = nullptr;
};

constexpr int kBatch = 64;
constexpr int kSteps = 5;

class DeviceParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount: "
                   << cudaGetErrorString(error) << ")";
    }
    if (count == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount: 0 devices)";
    }
    auto model = CreateMlp(MlpOptions());
    ASSERT_TRUE(model.ok()) << model.status();
    auto layout = ParamLayout::Create((*model)->ParamSpecs(), 1 << 20);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = std::make_unique<ParamLayout>(std::move(*layout));
    initial_.resize(layout_->total_numel());
    (*model)->InitParams(7, *layout_, initial_.data());

    // Fashion-MNIST-like batches: pixels in [0, 1), ten classes.
    std::mt19937_64 generator(11);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> inputs(int64_t{kBatch} * 784);
      for (float& x : inputs) {
        x = static_cast<float>(static_cast<double>(generator() >> 11) *
                               0x1.0p-53);
      }
      std::vector<int32_t> labels(kBatch);
      for (int32_t& label : labels)
        label = static_cast<int32_t>(generator() % 10);
      inputs_.push_back(std::move(inputs));
      labels_.push_back(std::move(labels));
    }
  }

  void MakeReplica(DeviceType type, const OptimizerOptions& options,
                   Replica& replica) {
    DeviceOptions device_options;
    device_options.type = type;
    device_options.cpu_threads = 1;  // one BLAS summation order every run
    auto device = CreateDevice(device_options);
    ASSERT_TRUE(device.ok()) << device.status();
    replica.device = std::move(*device);
    Device& d = *replica.device;
    auto model = CreateMlp(MlpOptions());
    ASSERT_TRUE(model.ok()) << model.status();
    replica.model = std::move(*model);
    const int64_t n = layout_->total_numel();
    replica.params = *d.Allocate<float>(n);
    replica.grads = *d.Allocate<float>(n);
    replica.inputs = *d.Allocate<float>(int64_t{kBatch} * 784);
    replica.labels = *d.Allocate<int32_t>(kBatch);
    replica.loss = *d.Allocate<float>(1);
    ASSERT_TRUE(d.CopyToDevice(replica.params, initial_.data(), n * 4).ok());
    ASSERT_TRUE(
        replica.model->Bind(d, *layout_, replica.params, replica.grads, kBatch)
            .ok());
    auto optimizer = CreateOptimizer(options);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    replica.optimizer = std::move(*optimizer);
    ASSERT_TRUE(replica.optimizer->Bind(d, n).ok());
  }

  // One training step; returns the loss.
  float Step(Replica& replica, int step, float lr) {
    Device& d = *replica.device;
    EXPECT_TRUE(d.CopyToDevice(replica.inputs, inputs_[step].data(),
                               inputs_[step].size() * 4)
                    .ok());
    EXPECT_TRUE(d.CopyToDevice(replica.labels, labels_[step].data(),
                               labels_[step].size() * 4)
                    .ok());
    std::vector<int> ready;
    const absl::Status status = replica.model->ForwardBackward(
        replica.inputs, replica.labels, kBatch, replica.loss,
        [&ready](int param) { ready.push_back(param); });
    EXPECT_TRUE(status.ok()) << status;
    // Both backends report gradients in the same order (the trainer's buckets
    // depend on it).
    EXPECT_EQ(ready.size(), layout_->params().size());
    replica.optimizer->Step(replica.params, replica.grads, lr);
    float loss = 0;
    const absl::Status copied = d.CopyToHost(&loss, replica.loss, 4);
    EXPECT_TRUE(copied.ok()) << copied;
    return loss;
  }

  std::vector<float> Read(Replica& replica, const float* buffer) {
    std::vector<float> host(layout_->total_numel());
    const absl::Status copied =
        replica.device->CopyToHost(host.data(), buffer, host.size() * 4);
    EXPECT_TRUE(copied.ok()) << copied;
    return host;
  }

  std::unique_ptr<ParamLayout> layout_;
  std::vector<float> initial_;
  std::vector<std::vector<float> > inputs_;
  std::vector<std::vector<int32_t> > labels_;
};

TEST_P(DeviceParityTest, SameModelSameStepsOnCpuAndCuda) {
  OptimizerOptions options;
  options.kind = GetParam();
  options.lr = options.kind == "adam" ? 1e-3f : 0.05f;
  options.weight_decay = 1e-4f;
  Replica cpu, cuda;
  MakeReplica(DeviceType::kCpu, options, cpu);
  MakeReplica(DeviceType::kCuda, options, cuda);
  if (HasFatalFailure()) return;

  for (int step = 0; step < kSteps; ++step) {
    const float cpu_loss = Step(cpu, step, options.lr);
    const float cuda_loss = Step(cuda, step, options.lr);
    EXPECT_NEAR(cpu_loss, cuda_loss, 1e-4f * std::max(1.0f, cpu_loss))
        << "loss at step " << step;
  }
  // Gradients of the last step and parameters after it. SGD keeps rounding
  // differences at rounding size. Adam divides by sqrt(v): a gradient that is
  // ~0 with different rounding on the two devices moves its parameter by up
  // to lr per step in either direction, so Adam is held to "nearly every
  // parameter agrees, none by more than the steps could move it".
  const std::vector<float> cpu_grads = Read(cpu, cpu.grads);
  const std::vector<float> cuda_grads = Read(cuda, cuda.grads);
  const std::vector<float> cpu_params = Read(cpu, cpu.params);
  const std::vector<float> cuda_params = Read(cuda, cuda.params);
  float grad_scale = 0;
  for (float g : cpu_grads) grad_scale = std::max(grad_scale, std::fabs(g));
  int64_t grad_mismatches = 0, param_mismatches = 0;
  float worst_param = 0;
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    if (std::fabs(cpu_grads[i] - cuda_grads[i]) > 1e-4f * grad_scale) {
      ++grad_mismatches;
    }
    const float diff = std::fabs(cpu_params[i] - cuda_params[i]);
    worst_param = std::max(worst_param, diff);
    if (diff > 1e-5f) ++param_mismatches;
  }
  if (options.kind == "adam") {
    EXPECT_LE(grad_mismatches, static_cast<int64_t>(cpu_grads.size() / 1000));
    EXPECT_LE(param_mismatches, static_cast<int64_t>(cpu_params.size() / 1000))
        << "of " << cpu_params.size() << " parameters";
    EXPECT_LE(worst_param, 2.0f * kSteps * options.lr);
  } else {
    EXPECT_EQ(grad_mismatches, 0);
    EXPECT_EQ(param_mismatches, 0) << "worst difference " << worst_param;
  }

  // Evaluation's forward pass agrees too.
  const float* cpu_logits = nullptr;
  const float* cuda_logits = nullptr;
  ASSERT_TRUE(cpu.model->Forward(cpu.inputs, kBatch, &cpu_logits).ok());
  ASSERT_TRUE(cuda.model->Forward(cuda.inputs, kBatch, &cuda_logits).ok());
  std::vector<float> a(kBatch * 10), b(kBatch * 10);
  ASSERT_TRUE(cpu.device->CopyToHost(a.data(), cpu_logits, a.size() * 4).ok());
  ASSERT_TRUE(
      cuda.device->CopyToHost(b.data(), cuda_logits, b.size() * 4).ok());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-4f * std::max(1.0f, std::fabs(a[i]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DeviceParityTest,
                         ::testing::Values("sgd", "adam"));

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
