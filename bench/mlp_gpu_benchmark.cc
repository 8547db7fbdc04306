// The default MLP (784-512-256-10) on the CUDA device: one training step
// (forward, backward, SGD step, and the loss copied to the host, as the
// trainer does every step) per batch size, and the model's matrix products
// through Device::Gemm next to cuBLAS alone on the same shapes. CUDA builds
// only (--config=cuda); a GPU must be visible.
//
//   bazel build --config=cuda //bench:mlp_gpu_benchmark
//   bazel-bin/bench/mlp_gpu_benchmark --benchmark_min_time=0.5
//   tools/pytorch_compare.py        # the same step in PyTorch, side by side
//
// Counters (GFLOP/s and TFLOP/s are 10^9 and 10^12 floating-point operations
// per second; a product of m×k by k×n counts 2·m·n·k):
//   BM_GpuTrainingStep/batch:N   items_per_second = samples/s; GFLOP/s over
//       the step's products; gemm_share = time cuBLAS alone needs for the
//       step's products / step time (what is left is element-wise kernels,
//       launch overhead and the per-step host synchronization).
//   BM_GpuModelGemms/batch:N     the step's 8 products (3 per layer, none for
//       the first layer's input gradient) through CudaDevice::Gemm, timed with
//       CUDA events: TFLOP/s, cublas_TFLOP/s for the same sequence on a bare
//       cuBLAS handle, and of_cublas = the fraction of cuBLAS-alone
//       throughput that the device reaches (1.0 = no overhead).
#include <cstdio>

#ifndef GRADSYNC_CUDA

int main() {
  fprintf(stderr,
          "mlp_gpu_benchmark: the CUDA backend is not in this build; build "
          "with bazel build --config=cuda //bench:mlp_gpu_benchmark\n");
  return 1;
}

#else

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/base/logging.h"
#include "core/device/cuda_device.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/sync/param_layout.h"

namespace gradsync {
namespace {

const std::vector<int>& Widths() {
  static const std::vector<int> widths = MlpOptions().widths;
  return widths;
}

// One product as the MLP issues it (row-major, Device::Gemm's arguments).
struct GemmShape {
  bool transpose_a, transpose_b;
  int m, n, k;
};

// mlp.cc's products for one step, in issue order: forward per layer, then
// backward from the last layer (weight gradient, then input gradient except
// for the first layer).
std::vector<GemmShape> StepGemms(int batch) {
  const std::vector<int>& w = Widths();
  const int layers = static_cast<int>(w.size()) - 1;
  std::vector<GemmShape> shapes;
  for (int l = 1; l <= layers; ++l)
    shapes.push_back({false, true, batch, w[l], w[l - 1]});
  for (int l = layers; l >= 1; --l) {
    shapes.push_back({true, false, w[l], w[l - 1], batch});
    if (l > 1) shapes.push_back({false, false, batch, w[l - 1], w[l]});
  }
  return shapes;
}

double Flops(const std::vector<GemmShape>& shapes) {
  double flops = 0;
  for (const GemmShape& s : shapes) flops += 2.0 * s.m * s.n * s.k;
  return flops;
}

#define BENCH_CHECK_OK(expr)                                     \
  do {                                                           \
    const absl::Status bench_status_ = (expr);                   \
    GS_CHECK(bench_status_.ok()) << #expr ": " << bench_status_; \
  } while (0)

// Why the GPU benchmarks cannot run, or "".
std::string NoGpuReason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return std::string("no CUDA GPU visible (cudaGetDeviceCount: ") +
           cudaGetErrorString(error) + ")";
  }
  return count > 0 ? "" : "no CUDA GPU visible (0 devices)";
}

// Operands for every product of a step, sized for the largest of each role.
struct GemmBuffers {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
};

GemmBuffers AllocateGemmBuffers(CudaDevice& device,
                                const std::vector<GemmShape>& shapes) {
  int64_t a = 0, b = 0, c = 0;
  for (const GemmShape& s : shapes) {
    a = std::max<int64_t>(a, int64_t{s.m} * s.k);
    b = std::max<int64_t>(b, int64_t{s.k} * s.n);
    c = std::max<int64_t>(c, int64_t{s.m} * s.n);
  }
  GemmBuffers buffers;
  buffers.a = ValueOrDie(device.Allocate<float>(a));
  buffers.b = ValueOrDie(device.Allocate<float>(b));
  buffers.c = ValueOrDie(device.Allocate<float>(c));
  device.Fill(buffers.a, a, 0.01f);
  device.Fill(buffers.b, b, 0.02f);
  return buffers;
}

// Milliseconds per repetition of `run` on `stream`, by CUDA events, after a
// warm-up: GPU time only, the same clock for both sides of the comparison.
template <typename Run>
double EventMillis(cudaStream_t stream, int repetitions, Run run) {
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int i = 0; i < repetitions; ++i) run();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / repetitions;
}

// The step's products on a bare cuBLAS handle and stream of its own, with the
// same operand swap as CudaDevice::Gemm: the best cuBLAS does on these shapes.
double CublasAloneMillis(CudaDevice& device,
                         const std::vector<GemmShape>& shapes,
                         const GemmBuffers& buffers) {
  BENCH_CHECK_OK(device.Synchronize());
  cudaStream_t stream;
  GS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) ==
           cudaSuccess);
  cublasHandle_t handle;
  GS_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  cublasSetStream(handle, stream);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = EventMillis(stream, 50, [&] {
    for (const GemmShape& s : shapes) {
      const int lda = s.transpose_a ? s.m : s.k;
      const int ldb = s.transpose_b ? s.k : s.n;
      cublasSgemm(handle, s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, s.n, s.m, s.k,
                  &alpha, buffers.b, ldb, buffers.a, lda, &beta, buffers.c,
                  s.n);
    }
  });
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  return ms;
}

void BM_GpuTrainingStep(benchmark::State& state) {
  const std::string reason = NoGpuReason();
  if (!reason.empty()) {
    state.SkipWithError(reason.c_str());
    return;
  }
  const int batch = static_cast<int>(state.range(0));
  std::unique_ptr<CudaDevice> device = ValueOrDie(CudaDevice::Create(0));
  std::unique_ptr<Model> model = ValueOrDie(CreateMlp(MlpOptions()));
  ParamLayout layout =
      ValueOrDie(ParamLayout::Create(model->ParamSpecs(), 25 << 20));
  const int64_t total = layout.total_numel();
  float* params = ValueOrDie(device->Allocate<float>(total));
  float* grads = ValueOrDie(device->Allocate<float>(total));
  std::vector<float> host_params(total);
  model->InitParams(1, layout, host_params.data());
  BENCH_CHECK_OK(device->CopyToDevice(params, host_params.data(), total * 4));
  BENCH_CHECK_OK(model->Bind(*device, layout, params, grads, batch));

  // Fashion-MNIST-like inputs: pixels in [0, 1), ten classes.
  std::mt19937_64 generator(3);
  std::vector<float> inputs(size_t{784} * batch);
  for (float& x : inputs) {
    x = static_cast<float>(static_cast<double>(generator() >> 11) * 0x1.0p-53);
  }
  std::vector<int32_t> labels(batch);
  for (int32_t& label : labels) label = static_cast<int32_t>(generator() % 10);
  float* device_inputs = ValueOrDie(device->Allocate<float>(inputs.size()));
  int32_t* device_labels = ValueOrDie(device->Allocate<int32_t>(batch));
  float* loss = ValueOrDie(device->Allocate<float>(1));
  BENCH_CHECK_OK(
      device->CopyToDevice(device_inputs, inputs.data(), inputs.size() * 4));
  BENCH_CHECK_OK(
      device->CopyToDevice(device_labels, labels.data(), labels.size() * 4));

  OptimizerOptions optimizer_options;  // SGD, momentum 0.9
  optimizer_options.lr = 0.01f;
  std::unique_ptr<Optimizer> optimizer =
      ValueOrDie(CreateOptimizer(optimizer_options));
  BENCH_CHECK_OK(optimizer->Bind(*device, total));
  int64_t ready_calls = 0;
  const GradReadyCallback ready = [&ready_calls](int) { ++ready_calls; };

  float host_loss = 0;
  for (auto _ : state) {
    BENCH_CHECK_OK(model->ForwardBackward(device_inputs, device_labels, batch,
                                          loss, ready));
    optimizer->Step(params, grads, 0.01f);
    // The trainer reads the loss every step: that synchronization is part of
    // a real step's cost.
    BENCH_CHECK_OK(device->CopyToHost(&host_loss, loss, sizeof(float)));
  }
  benchmark::DoNotOptimize(ready_calls);

  const std::vector<GemmShape> shapes = StepGemms(batch);
  const GemmBuffers buffers = AllocateGemmBuffers(*device, shapes);
  const double cublas_ms = CublasAloneMillis(*device, shapes, buffers);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["GFLOP/s"] = benchmark::Counter(
      Flops(shapes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  // gemm_share = cuBLAS-alone time / step time: a rate counter divides by
  // the measured (real) seconds per iteration, so give it seconds.
  state.counters["gemm_share"] = benchmark::Counter(
      cublas_ms / 1000.0, benchmark::Counter::kIsIterationInvariantRate);
  // Training on one fixed batch: a falling loss shows the steps are real.
  state.counters["final_loss"] = host_loss;
}

void BM_GpuModelGemms(benchmark::State& state) {
  const std::string reason = NoGpuReason();
  if (!reason.empty()) {
    state.SkipWithError(reason.c_str());
    return;
  }
  const int batch = static_cast<int>(state.range(0));
  std::unique_ptr<CudaDevice> device = ValueOrDie(CudaDevice::Create(0));
  const std::vector<GemmShape> shapes = StepGemms(batch);
  const GemmBuffers buffers = AllocateGemmBuffers(*device, shapes);
  auto run = [&] {
    for (const GemmShape& s : shapes) {
      device->Gemm(s.transpose_a, s.transpose_b, s.m, s.n, s.k, 1.0f, buffers.a,
                   buffers.b, 0.0f, buffers.c);
    }
  };
  for (auto _ : state) {
    const double ms = EventMillis(device->stream(), 20, run);
    state.SetIterationTime(ms / 1000.0);
  }
  BENCH_CHECK_OK(device->Synchronize());
  const double device_ms = EventMillis(device->stream(), 50, run);
  const double cublas_ms = CublasAloneMillis(*device, shapes, buffers);
  const double flops = Flops(shapes);
  state.counters["TFLOP/s"] = flops / (device_ms / 1000.0) / 1e12;
  state.counters["cublas_TFLOP/s"] = flops / (cublas_ms / 1000.0) / 1e12;
  state.counters["of_cublas"] = cublas_ms / device_ms;
}

// Real time: the step is host-bound at small batches (kernel launches and the
// loss's synchronization), which CPU time would hide.
BENCHMARK(BM_GpuTrainingStep)
    ->ArgName("batch")
    ->RangeMultiplier(2)
    ->Range(64, 4096)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_GpuModelGemms)
    ->ArgName("batch")
    ->RangeMultiplier(2)
    ->Range(64, 4096)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();

#endif  // GRADSYNC_CUDA
