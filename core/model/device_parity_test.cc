// One model code, two devices: the same MLP, data and optimizer on the CPU and
// the CUDA backend agree step by step within float32 rounding; the CUDA
// device's cuDNN convolutions agree with a direct convolution, layer by layer,
// and whole CNN and ResNet-18 steps with the CPU's oneDNN ones (ResNet-18's
// deep gradients as a wiring check: layer_reference_test holds each kernel
// to float64). This is what
// lets a GPU run of any strategy be compared with the CPU reference. Runs only
// in CUDA builds with a visible GPU; skips otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device/batch_norm_epilogue_check.h"
#include "core/device/convolution_kernel.h"
#include "core/device/device.h"
#include "core/device/layer_geometry.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/sync/param_layout.h"
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

// --- The convolutional layers and models
// ---------------------------------------

// Empty when a GPU is visible, else why not.
std::string NoGpuReason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return std::string("no CUDA GPU visible (cudaGetDeviceCount: ") +
           cudaGetErrorString(error) + ")";
  }
  return count == 0 ? "no CUDA GPU visible (0 devices)" : "";
}

// `reference_batch_norm`: the CPU's batch norm through kernel_math.h's loops
// (the arithmetic the CUDA kernels share) rather than oneDNN.
// `cudnn_graph`: CUDA convolutions also try cuDNN's graph API (unset: the
// layout's and precision's default, DefaultCudnnGraph);
// `cudnn_layout`: the layout they compute in.
std::unique_ptr<Device> MakeDevice(
    DeviceType type, bool reference_batch_norm = false,
    std::optional<bool> cudnn_graph = false,
    ConvolutionLayout cudnn_layout = ConvolutionLayout::kNhwc) {
  DeviceOptions options;
  options.type = type;
  options.cpu_threads = 1;
  options.reference_batch_norm = reference_batch_norm;
  options.cudnn_graph = cudnn_graph;
  options.cudnn_layout = cudnn_layout;
  auto device = CreateDevice(options);
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? std::move(*device) : nullptr;
}

std::vector<float> RandomValues(int64_t count, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<float> values(count);
  for (float& x : values) {
    x = static_cast<float>(
        static_cast<double>(generator() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return values;
}

template <typename T>
T* Upload(Device& device, const std::vector<T>& host) {
  T* buffer = *device.Allocate<T>(static_cast<int64_t>(host.size()));
  EXPECT_TRUE(
      device.CopyToDevice(buffer, host.data(), host.size() * sizeof(T)).ok());
  return buffer;
}

template <typename T>
std::vector<T> Download(Device& device, const T* buffer, int64_t count) {
  std::vector<T> host(count);
  EXPECT_TRUE(device.CopyToHost(host.data(), buffer, count * sizeof(T)).ok());
  return host;
}

void ExpectClose(const std::vector<float>& cpu, const std::vector<float>& cuda,
                 float relative, const std::string& what) {
  ASSERT_EQ(cpu.size(), cuda.size()) << what;
  float scale = 0;
  for (float v : cpu) scale = std::max(scale, std::fabs(v));
  int failures = 0;
  for (size_t i = 0; i < cpu.size() && failures < 5; ++i) {
    if (!(std::fabs(cpu[i] - cuda[i]) <= relative * std::max(scale, 1e-3f))) {
      ADD_FAILURE() << what << "[" << i << "]: cpu " << cpu[i] << ", cuda "
                    << cuda[i];
      ++failures;
    }
  }
}

// The CUDA kernels' fused batch-norm epilogues give the bits of the unfused
// kernels they stand for (which KernelsAgreeOnCpuAndCuda below holds to the
// CPU): one channel tile and a sliced plan over ResNet-18's first stage at
// batch 32 (32·32·32 rows of 64 channels).
TEST(ConvolutionKernelParityTest, FusedBatchNormEpiloguesMatchTheUnfused) {
  const std::string no_gpu = NoGpuReason();
  if (!no_gpu.empty()) GTEST_SKIP() << no_gpu;
  std::unique_ptr<Device> cuda =
      MakeDevice(DeviceType::kCuda, /*reference_batch_norm=*/false);
  for (const auto& [rows, channels] :
       {std::pair<int64_t, int>{300, 37},
        std::pair<int64_t, int>{32 * 32 * 32, 64}}) {
    const absl::Status checked = CheckBatchNormEpilogues(*cuda, rows, channels);
    EXPECT_TRUE(checked.ok()) << checked;
  }
}

// Each new kernel on the same inputs: im2col, col2im and max pooling move
// values without arithmetic of their own order (col2im adds in the CPU's
// order), so they match bit for bit; batch norm's per-channel sums are added
// in a different order on each device. The CPU runs its reference batch norm
// here (kernel_math.h's arithmetic, which the CUDA kernels share; its oneDNN
// batch norm is held to the reference in core/device:cpu_device_test).
TEST(ConvolutionKernelParityTest, KernelsAgreeOnCpuAndCuda) {
  const std::string no_gpu = NoGpuReason();
  if (!no_gpu.empty()) GTEST_SKIP() << no_gpu;
  std::unique_ptr<Device> cpu =
      MakeDevice(DeviceType::kCpu, /*reference_batch_norm=*/true);
  std::unique_ptr<Device> cuda = MakeDevice(DeviceType::kCuda);
  ASSERT_TRUE(cpu && cuda);

  ConvGeometry g;
  g.batch = 3;
  g.channels = 5;
  g.height = 9;
  g.width = 7;
  g.kernel = 3;
  g.stride = 2;
  g.padding = 1;
  g.out_height = ConvOutputSize(g.height, 3, 2, 1);
  g.out_width = ConvOutputSize(g.width, 3, 2, 1);
  for (bool nchw : {false, true}) {
    g.input = nchw ? NchwLayout(g.channels, g.height, g.width)
                   : NhwcLayout(g.channels, g.height, g.width);
    const std::vector<float> x = RandomValues(g.input_count(), 1);
    const int64_t columns = g.column_rows() * g.column_cols();
    std::vector<float> results[2][2];  // [device][im2col, col2im]
    Device* devices[2] = {cpu.get(), cuda.get()};
    const std::vector<float> dcols = RandomValues(columns, 2);
    for (int d = 0; d < 2; ++d) {
      float* cols = *devices[d]->Allocate<float>(columns);
      devices[d]->Im2Col(Upload(*devices[d], x), g, cols);
      results[d][0] = Download(*devices[d], cols, columns);
      float* dx = *devices[d]->Allocate<float>(g.input_count());
      devices[d]->Col2Im(Upload(*devices[d], dcols), g, dx);
      results[d][1] = Download(*devices[d], dx, g.input_count());
    }
    EXPECT_EQ(results[0][0], results[1][0]) << "im2col";
    EXPECT_EQ(results[0][1], results[1][1]) << "col2im";
  }

  // Batch norm, training forward and backward, and inference.
  const int64_t rows = 300;
  const int channels = 37;
  const std::vector<float> x = RandomValues(rows * channels, 3);
  const std::vector<float> dy = RandomValues(rows * channels, 4);
  const std::vector<float> gamma = RandomValues(channels, 5);
  const std::vector<float> beta = RandomValues(channels, 6);
  std::vector<float> out[2][5];  // y, running stats, dx, dgamma, inference
  Device* devices[2] = {cpu.get(), cuda.get()};
  for (int d = 0; d < 2; ++d) {
    Device& dev = *devices[d];
    float* y = *dev.Allocate<float>(rows * channels);
    float* saved = *dev.Allocate<float>(2 * channels);
    std::vector<float> running_init(2 * channels, 0.0f);
    for (int c = 0; c < channels; ++c) running_init[channels + c] = 1.0f;
    float* running = Upload(dev, running_init);
    const float* device_x = Upload(dev, x);
    const float* device_gamma = Upload(dev, gamma);
    dev.BatchNormForwardTraining(device_x, rows, channels, 1, device_gamma,
                                 Upload(dev, beta), 0.1f, 1e-5f, y, saved,
                                 saved + channels, running, running + channels,
                                 BatchNormEpilogue::None());
    out[d][0] = Download(dev, y, rows * channels);
    out[d][1] = Download(dev, running, 2 * channels);
    float* dx = *dev.Allocate<float>(rows * channels);
    float* dparams = *dev.Allocate<float>(2 * channels);
    dev.BatchNormBackward(device_x, Upload(dev, dy), rows, channels, 1,
                          device_gamma, saved, saved + channels, dx, dparams,
                          dparams + channels, /*relu_output=*/nullptr,
                          /*dx_bf16=*/nullptr);
    out[d][2] = Download(dev, dx, rows * channels);
    out[d][3] = Download(dev, dparams, 2 * channels);
    dev.BatchNormForwardInference(
        device_x, rows, channels, 1, device_gamma, Upload(dev, beta), running,
        running + channels, 1e-5f, y, BatchNormEpilogue::None());
    out[d][4] = Download(dev, y, rows * channels);
  }
  const char* names[5] = {"batch norm y", "running statistics", "batch norm dx",
                          "dgamma/dbeta", "inference y"};
  for (int k = 0; k < 5; ++k)
    ExpectClose(out[0][k], out[1][k], 1e-5f, names[k]);

  // Max pooling (3/2, overlapping windows) and global average pooling.
  PoolGeometry p;
  p.batch = 2;
  p.channels = 6;
  p.height = 9;
  p.width = 8;
  p.kernel = 3;
  p.stride = 2;
  p.out_height = ConvOutputSize(p.height, 3, 2, 0);
  p.out_width = ConvOutputSize(p.width, 3, 2, 0);
  const std::vector<float> px = RandomValues(p.input_count(), 7);
  const std::vector<float> pdy = RandomValues(p.output_count(), 8);
  std::vector<float> pooled[2][4];
  std::vector<int32_t> where[2];
  for (int d = 0; d < 2; ++d) {
    Device& dev = *devices[d];
    float* y = *dev.Allocate<float>(p.output_count());
    int32_t* at = *dev.Allocate<int32_t>(p.output_count());
    const float* device_x = Upload(dev, px);
    dev.MaxPoolForward(device_x, p, y, at);
    pooled[d][0] = Download(dev, y, p.output_count());
    where[d] = Download(dev, at, p.output_count());
    float* dx = *dev.Allocate<float>(p.input_count());
    dev.MaxPoolBackward(Upload(dev, pdy), at, p, dx);
    pooled[d][1] = Download(dev, dx, p.input_count());
    const int pixels = p.height * p.width;
    float* mean = *dev.Allocate<float>(p.batch * p.channels);
    dev.GlobalAvgPoolForward(device_x, p.batch, pixels, p.channels,
                             ActivationLayout::kNhwc, mean);
    pooled[d][2] = Download(dev, mean, p.batch * p.channels);
    dev.GlobalAvgPoolBackward(mean, p.batch, pixels, p.channels,
                              ActivationLayout::kNhwc, dx);
    pooled[d][3] = Download(dev, dx, p.input_count());
  }
  EXPECT_EQ(pooled[0][0], pooled[1][0]) << "max pool";
  EXPECT_EQ(where[0], where[1]) << "max pool positions";
  EXPECT_EQ(pooled[0][1], pooled[1][1]) << "max pool gradient";
  EXPECT_EQ(pooled[0][2], pooled[1][2]) << "global average pool";
  EXPECT_EQ(pooled[0][3], pooled[1][3]) << "global average pool gradient";
}

// --- One convolution layer: cuDNN against a direct convolution in double ---

struct ConvCase {
  const char* name;
  int batch, channels, height, width, kernel, stride, padding, out;
  bool nchw;
};

// Test names and failure messages show the case's name, not its bytes.
void PrintTo(const ConvCase& c, std::ostream* out) { *out << c.name; }

ConvGeometry MakeGeometry(const ConvCase& c) {
  ConvGeometry g;
  g.batch = c.batch;
  g.channels = c.channels;
  g.height = c.height;
  g.width = c.width;
  g.kernel = c.kernel;
  g.stride = c.stride;
  g.padding = c.padding;
  g.out_height = ConvOutputSize(c.height, c.kernel, c.stride, c.padding);
  g.out_width = ConvOutputSize(c.width, c.kernel, c.stride, c.padding);
  g.input = c.nchw ? NchwLayout(c.channels, c.height, c.width)
                   : NhwcLayout(c.channels, c.height, c.width);
  return g;
}

// y, dweight and dx of PyTorch's Conv2d (cross-correlation, zero padding) in
// double: x laid out as g.input, y and dy NHWC, weight [out][in][k][k].
void DirectConvolution(const ConvGeometry& g, int out,
                       const std::vector<float>& x,
                       const std::vector<float>& weight,
                       const std::vector<float>& dy, std::vector<double>& y,
                       std::vector<double>& dweight, std::vector<double>& dx) {
  const int k = g.kernel;
  y.assign(g.column_rows() * out, 0.0);
  dweight.assign(weight.size(), 0.0);
  dx.assign(x.size(), 0.0);
  for (int b = 0; b < g.batch; ++b)
    for (int oh = 0; oh < g.out_height; ++oh)
      for (int ow = 0; ow < g.out_width; ++ow) {
        const int64_t row = (int64_t{b} * g.out_height + oh) * g.out_width + ow;
        for (int o = 0; o < out; ++o)
          for (int c = 0; c < g.channels; ++c)
            for (int kh = 0; kh < k; ++kh)
              for (int kw = 0; kw < k; ++kw) {
                const int h = oh * g.stride - g.padding + kh;
                const int w = ow * g.stride - g.padding + kw;
                if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
                const int64_t xi = b * g.input.batch + c * g.input.channel +
                                   h * g.input.row + w * g.input.column;
                const int64_t wi =
                    ((int64_t{o} * g.channels + c) * k + kh) * k + kw;
                const double grad = dy[row * out + o];
                y[row * out + o] += double{x[xi]} * weight[wi];
                dweight[wi] += grad * x[xi];
                dx[xi] += grad * weight[wi];
              }
      }
}

// Within `relative` of the largest expected magnitude, element by element.
void ExpectNearDouble(const std::vector<float>& actual,
                      const std::vector<double>& expected, double relative,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 1e-6;
  for (double v : expected) scale = std::max(scale, std::fabs(v));
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i) {
    if (!(std::fabs(actual[i] - expected[i]) <= relative * scale)) {
      ADD_FAILURE() << what << "[" << i << "]: " << actual[i] << ", expected "
                    << expected[i];
      ++failures;
    }
  }
}

// How the device's convolutions run: "legacy" (the legacy API's algorithms,
// NHWC), "graph" (the graph API's engines tried too, running wherever one
// beats the legacy algorithms), "nchw" (--cudnn_layout=nchw: NCHW copies),
// "fastest" (--cudnn_layout=fastest: both layouts timed, the faster runs),
// "auto" (the defaults: --cudnn_layout=auto, --cudnn_graph not given).
struct ConvPath {
  const char* name;
  std::optional<bool> graph;
  ConvolutionLayout layout;
};

const ConvPath kConvPaths[] = {
    {"legacy", false, ConvolutionLayout::kNhwc},
    {"graph", true, ConvolutionLayout::kNhwc},
    {"nchw", false, ConvolutionLayout::kNchw},
    {"fastest", false, ConvolutionLayout::kFastest},
    {"auto", std::nullopt, ConvolutionLayout::kAuto},
};

void PrintTo(const ConvPath& p, std::ostream* out) { *out << p.name; }

// A shape, and the path its convolution takes.
class CudnnConvolutionParityTest
    : public ::testing::TestWithParam<std::tuple<ConvCase, ConvPath> > {};

// The CUDA device's convolutions are cuDNN's (not im2col's fallback) and agree
// with the direct convolution: forward and both gradients, NHWC and NCHW
// inputs, odd sizes, strides, padding, batch 1, 1×1 and 7×7 kernels. 1e-4 of
// the largest value: FP32 sums of up to 576 terms, through cuDNN's Winograd
// or FFT transforms where its heuristics pick them, round to about 1e-5 of
// it; a wrong index or layout is off by the values themselves.
TEST_P(CudnnConvolutionParityTest, AgreesWithDirectConvolution) {
  const std::string no_gpu = NoGpuReason();
  if (!no_gpu.empty()) GTEST_SKIP() << no_gpu;
  const ConvCase& c = std::get<0>(GetParam());
  const ConvPath& path = std::get<1>(GetParam());
  const ConvGeometry g = MakeGeometry(c);
  std::unique_ptr<Device> cuda =
      MakeDevice(DeviceType::kCuda, /*reference_batch_norm=*/false, path.graph,
                 path.layout);
  ASSERT_TRUE(cuda);
  auto kernel = cuda->CreateConvolution(g, c.out);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_NE(*kernel, nullptr) << "the CUDA device made no cuDNN convolution";
  // The description says which layout cuDNN computes in.
  const std::string description = (*kernel)->Description();
  if (path.layout == ConvolutionLayout::kNchw) {
    EXPECT_THAT(description, ::testing::StartsWith("NCHW copies: "));
  } else if (path.layout == ConvolutionLayout::kNhwc) {
    EXPECT_THAT(description, ::testing::StartsWith("forward "));
  }

  const int64_t x_count = g.input_count();
  const int64_t w_count = int64_t{c.out} * c.channels * c.kernel * c.kernel;
  const int64_t y_count = g.column_rows() * c.out;
  const std::vector<float> x = RandomValues(x_count, 21);
  const std::vector<float> weight = RandomValues(w_count, 22);
  const std::vector<float> dy = RandomValues(y_count, 23);
  std::vector<double> y, dweight, dx;
  DirectConvolution(g, c.out, x, weight, dy, y, dweight, dx);

  float* device_y = *cuda->Allocate<float>(y_count);
  float* device_dweight = *cuda->Allocate<float>(w_count);
  float* device_dx = *cuda->Allocate<float>(x_count);
  const float* device_x = Upload(*cuda, x);
  const float* device_weight = Upload(*cuda, weight);
  const float* device_dy = Upload(*cuda, dy);
  // Twice: the second run must not depend on what the first left in the
  // shared scratch.
  for (int run = 0; run < 2; ++run) {
    (*kernel)->Forward(device_x, device_weight, device_y);
    (*kernel)->BackwardWeights(device_x, device_dy, device_dweight);
    (*kernel)->BackwardInput(device_dy, device_weight, device_dx);
    const absl::Status synced = cuda->Synchronize();
    ASSERT_TRUE(synced.ok()) << synced;
    const std::string at = std::string(c.name) + " run " + std::to_string(run);
    ExpectNearDouble(Download(*cuda, device_y, y_count), y, 1e-4, at + " y");
    ExpectNearDouble(Download(*cuda, device_dweight, w_count), dweight, 1e-4,
                     at + " dweight");
    ExpectNearDouble(Download(*cuda, device_dx, x_count), dx, 1e-4, at + " dx");
  }
  // Both gradients in one call: the separate calls' bits (with the graph
  // API, whose float32 engines may add with atomics, and in NCHW, where
  // the FFT and Winograd algorithms qualify, the reference's values).
  float* combined_dweight = *cuda->Allocate<float>(w_count);
  float* combined_dx = *cuda->Allocate<float>(x_count);
  int ready_calls = 0;
  (*kernel)->Backward(device_x, device_dy, device_weight, combined_dweight,
                      combined_dx, [&] { ++ready_calls; });
  EXPECT_EQ(ready_calls, 1);
  ASSERT_TRUE(cuda->Synchronize().ok());
  if (path.graph || path.layout != ConvolutionLayout::kNhwc) {
    ExpectNearDouble(Download(*cuda, combined_dweight, w_count), dweight, 1e-4,
                     "combined dweight");
    ExpectNearDouble(Download(*cuda, combined_dx, x_count), dx, 1e-4,
                     "combined dx");
    return;
  }
  EXPECT_EQ(Download(*cuda, combined_dweight, w_count),
            Download(*cuda, device_dweight, w_count));
  EXPECT_EQ(Download(*cuda, combined_dx, x_count),
            Download(*cuda, device_dx, x_count));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnConvolutionParityTest,
    ::testing::Combine(
        ::testing::Values(
            ConvCase{"odd_stride2_nhwc", 3, 5, 9, 7, 3, 2, 1, 4, false},
            ConvCase{"odd_stride2_nchw", 3, 5, 9, 7, 3, 2, 1, 4, true},
            ConvCase{"batch1_1x1_downsample", 1, 8, 8, 8, 1, 2, 0, 16, false},
            ConvCase{"stem_7x7_nchw", 2, 3, 19, 17, 7, 2, 3, 8, true},
            ConvCase{"cnn_5x5_no_padding", 2, 4, 11, 13, 5, 1, 0, 6, false},
            ConvCase{"stride3_padding2", 2, 6, 10, 10, 3, 3, 2, 5, false},
            ConvCase{"resnet_3x3_64", 2, 64, 8, 8, 3, 1, 1, 64, false}),
        ::testing::ValuesIn(kConvPaths)),
    [](const ::testing::TestParamInfo<std::tuple<ConvCase, ConvPath> >& info) {
      return std::string(std::get<0>(info.param).name) + "_" +
             std::get<1>(info.param).name;
    });

// Errors of a convolution name the shape: a geometry whose output size is not
// ConvOutputSize's is refused before cuDNN sees it.
TEST(CudnnConvolutionErrorTest, BadGeometryNamesTheShape) {
  const std::string no_gpu = NoGpuReason();
  if (!no_gpu.empty()) GTEST_SKIP() << no_gpu;
  std::unique_ptr<Device> cuda = MakeDevice(DeviceType::kCuda);
  ASSERT_TRUE(cuda);
  ConvGeometry g = MakeGeometry({"bad", 2, 3, 8, 8, 3, 1, 1, 4, false});
  g.out_height = 9;
  auto kernel = cuda->CreateConvolution(g, 4);
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(kernel.status().message()),
              ::testing::HasSubstr("2x3x8x8 (NHWC) -> 4"));
}

// A whole model's step on both devices: loss, running statistics and
// evaluation's logits agree within float rounding, and so do the CNN's
// gradients. ResNet-18's gradients below its head do not, on any pair of
// correct implementations: batch norm in training mode at batch 16 through
// 18 layers amplifies rounding far beyond any fixed tolerance (PyTorch's own
// CPU and GPU differ there by more than this test used to allow, and each
// differs from a float64 reference: issue 39). So for ResNet-18 each kernel is
// held to a float64 reference at the model's shapes, on each device
// (layer_reference_test), and this step checks what only a whole step can:
// that the layers are wired alike. The head's gradients (fc) are held as
// tightly as the loss; every other tensor's gradient must agree with the
// CPU's within a fifth of its norm, which a swapped, missing or misrouted
// gradient misses by about its whole norm.
class ConvolutionalModelParityTest
    : public ::testing::TestWithParam<std::string> {};

// "cnn", "resnet18"; a "_nchw" suffix runs the CUDA side with
// --cudnn_layout=nchw (ResNet on NCHW activations, the CNN's convolutions on
// NCHW copies), an "_auto" suffix with the defaults (fp32: ResNet on NCHW
// activations, the CNN on NHWC with no copies); no suffix: NHWC, legacy.
bool HasSuffix(const std::string& kind, const std::string& suffix) {
  return kind.size() > suffix.size() &&
         kind.compare(kind.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::unique_ptr<Model> MakeConvolutionalModel(const std::string& kind) {
  absl::StatusOr<std::unique_ptr<Model> > model;
  if (kind.rfind("cnn", 0) == 0) {
    model = CreateCnn(CnnOptions{});
  } else {
    model = CreateResNet(ResNetOptions{});
  }
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

TEST_P(ConvolutionalModelParityTest, OneStepAgreesOnCpuAndCuda) {
  const std::string no_gpu = NoGpuReason();
  if (!no_gpu.empty()) GTEST_SKIP() << no_gpu;
  const int batch = 16;
  std::unique_ptr<Model> reference = MakeConvolutionalModel(GetParam());
  ASSERT_TRUE(reference);
  auto layout = ParamLayout::Create(reference->ParamSpecs(), 1 << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t n = layout->total_numel();
  std::vector<float> initial(n);
  reference->InitParams(3, *layout, initial.data());
  const std::vector<float> inputs =
      RandomValues(int64_t{batch} * reference->input_dim(), 9);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = (7 * i) % 10;

  std::vector<float> loss(2), grads[2], buffers[2], logits[2];
  const DeviceType types[2] = {DeviceType::kCpu, DeviceType::kCuda};
  for (int d = 0; d < 2; ++d) {
    const bool cuda = d == 1;
    const bool automatic = cuda && HasSuffix(GetParam(), "_auto");
    std::unique_ptr<Device> device = MakeDevice(
        types[d], /*reference_batch_norm=*/false,
        automatic ? std::nullopt : std::optional<bool>(false),
        automatic                                ? ConvolutionLayout::kAuto
        : cuda && HasSuffix(GetParam(), "_nchw") ? ConvolutionLayout::kNchw
                                                 : ConvolutionLayout::kNhwc);
    ASSERT_TRUE(device);
    std::unique_ptr<Model> model = MakeConvolutionalModel(GetParam());
    float* params = Upload(*device, initial);
    float* grad = *device->Allocate<float>(n);
    ASSERT_TRUE(model->Bind(*device, *layout, params, grad, batch).ok());
    float* device_inputs = Upload(*device, inputs);
    int32_t* device_labels = Upload(*device, labels);
    float* device_loss = *device->Allocate<float>(1);
    ASSERT_TRUE(model
                    ->ForwardBackward(device_inputs, device_labels, batch,
                                      device_loss, nullptr)
                    .ok());
    loss[d] = Download(*device, device_loss, 1)[0];
    grads[d] = Download(*device, grad, n);
    buffers[d] = Download(*device, model->buffers(), model->buffer_count());
    const float* device_logits = nullptr;
    ASSERT_TRUE(model->Forward(device_inputs, batch, &device_logits).ok());
    logits[d] = Download(*device, device_logits, int64_t{batch} * 10);
  }
  EXPECT_NEAR(loss[0], loss[1], 1e-4f * std::max(1.0f, loss[0]));
  const bool deep = GetParam().rfind("resnet18", 0) == 0;
  for (const ParamInfo& info : layout->params()) {
    const std::vector<float> cpu(grads[0].begin() + info.offset,
                                 grads[0].begin() + info.offset + info.numel);
    const std::vector<float> cuda(grads[1].begin() + info.offset,
                                  grads[1].begin() + info.offset + info.numel);
    if (!deep) {
      ExpectClose(cpu, cuda, 1e-3f, info.spec.name);
    } else if (info.spec.name.rfind("fc.", 0) == 0) {
      ExpectClose(cpu, cuda, 1e-4f, info.spec.name);
    } else {
      double difference = 0, norm = 0;
      for (size_t i = 0; i < cpu.size(); ++i) {
        difference += (double{cpu[i]} - cuda[i]) * (double{cpu[i]} - cuda[i]);
        norm += double{cpu[i]} * cpu[i];
      }
      EXPECT_LE(std::sqrt(difference), 0.2 * std::sqrt(norm) + 1e-30)
          << info.spec.name << ": the devices' gradients differ by "
          << std::sqrt(difference) << " of norm " << std::sqrt(norm);
    }
  }
  ExpectClose(buffers[0], buffers[1], 1e-4f, "running statistics");
  ExpectClose(logits[0], logits[1], 1e-4f, "evaluation logits");
}

INSTANTIATE_TEST_SUITE_P(Models, ConvolutionalModelParityTest,
                         ::testing::Values("cnn", "resnet18", "cnn_nchw",
                                           "resnet18_nchw", "cnn_auto",
                                           "resnet18_auto"));

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
