// Tests of the CUDA backend: every kernel against the CPU backend on the same
// inputs, the arena, copies, events, GPU selection and error messages. GPU
// cases skip where no GPU is visible; the error-path cases run anywhere the
// CUDA build links. A CPU build has one skipped test and one that checks the
// refusal of --device=cuda.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/device/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef GRADSYNC_CUDA
#include <cuda_runtime.h>

#include "core/device/bfloat16.h"
#include "core/device/cuda_device.h"
#include "core/device/cuda_kernels.h"
#include "core/device/cudnn_context.h"
#endif

namespace gradsync {
namespace {

using ::testing::HasSubstr;

#ifndef GRADSYNC_CUDA

TEST(CudaDeviceTest, NeedsACudaBuild) {
  GTEST_SKIP() << "the CUDA backend is only built with --config=cuda";
}

TEST(CudaDeviceTest, CpuBuildRefusesCudaDevices) {
  DeviceOptions options;
  options.type = DeviceType::kCuda;
  auto device = CreateDevice(options);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(device.status().message()),
              HasSubstr("--config=cuda"));
}

#else

// The reason to skip GPU cases, or "" when a GPU is visible.
std::string NoGpuReason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA GPU visible (cudaGetDeviceCount: ") +
           cudaGetErrorString(error) + ")";
  }
  if (count == 0) return "no CUDA GPU visible (cudaGetDeviceCount: 0 devices)";
  return "";
}

// --- Without a GPU ---------------------------------------------------------

TEST(CudaErrorTest, CudaCallStatusNamesCallDeviceAndReason) {
  const absl::Status status = CudaCallStatus(cudaErrorMemoryAllocation,
                                             "cudaMalloc(1048576)", "cuda:0");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "cudaMalloc(1048576) on cuda:0: out of memory "
            "(cudaErrorMemoryAllocation)");
  EXPECT_TRUE(CudaCallStatus(cudaSuccess, "x", "cuda:0").ok());
  EXPECT_EQ(
      CudaCallStatus(cudaErrorNoDevice, "cudaGetDeviceCount", "cuda:0").code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(CudaErrorTest, CublasCallStatusNamesCallAndDevice) {
  const absl::Status status =
      CublasCallStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate", "cuda:1");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("cublasCreate on cuda:1: "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("CUBLAS_STATUS_ALLOC_FAILED"));
}

absl::Status MacroUser(cudaError_t error) {
  CUDA_RETURN_IF_ERROR(error, "cuda:3");
  return absl::OkStatus();
}

TEST(CudaErrorTest, MacroReturnsTheStatusOfTheCall) {
  EXPECT_TRUE(MacroUser(cudaSuccess).ok());
  const absl::Status status = MacroUser(cudaErrorInvalidValue);
  EXPECT_THAT(std::string(status.message()), HasSubstr("error on cuda:3: "));
}

// cuDNN's error strings need no GPU: the check every cuDNN call goes through
// runs here.
TEST(CudaErrorTest, CudnnCallStatusNamesCallShapeAndReason) {
  EXPECT_TRUE(CudnnCallStatus(CUDNN_STATUS_SUCCESS, "x", "cuda:0").ok());
  const absl::Status unsupported = CudnnCallStatus(
      CUDNN_STATUS_NOT_SUPPORTED,
      "cudnnConvolutionForward( context_.handle(), &one, input_)",
      "cuda:0, convolution 2x3x8x8 (NHWC) -> 4 channels");
  EXPECT_EQ(unsupported.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unsupported.message()),
              ::testing::StartsWith("cudnnConvolutionForward on cuda:0, "
                                    "convolution 2x3x8x8 (NHWC) -> 4 "
                                    "channels: CUDNN_STATUS_NOT_SUPPORTED"));
  EXPECT_EQ(CudnnCallStatus(CUDNN_STATUS_BAD_PARAM, "f", "cuda:0").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CudnnCallStatus(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, "f",
                      "cuda:0")
          .code(),
      absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      CudnnCallStatus(CUDNN_STATUS_EXECUTION_FAILED, "f", "cuda:0").code(),
      absl::StatusCode::kInternal);
}

absl::Status CudnnMacroUser(cudnnStatus_t status) {
  CUDNN_RETURN_IF_ERROR(status, "cuda:2, convolution s");
  return absl::OkStatus();
}

TEST(CudaErrorTest, CudnnMacroReturnsTheStatusOfTheCall) {
  EXPECT_TRUE(CudnnMacroUser(CUDNN_STATUS_SUCCESS).ok());
  EXPECT_THAT(std::string(CudnnMacroUser(CUDNN_STATUS_BAD_PARAM).message()),
              HasSubstr("status on cuda:2, convolution s: "));
}

TEST(CudaDeviceNoGpuTest, CreateDeviceExplainsAMissingGpu) {
  if (NoGpuReason().empty()) GTEST_SKIP() << "a GPU is visible";
  DeviceOptions options;
  options.type = DeviceType::kCuda;
  auto device = CreateDevice(options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(device.status().message()),
              HasSubstr("no CUDA GPU visible"));
  EXPECT_THAT(std::string(device.status().message()),
              HasSubstr("cudaGetDeviceCount"));
}

// --- With a GPU -------------------------------------------------------------

// Deterministic values in [-1, 1), as in cpu_device_test.
std::vector<float> RandomVector(int64_t count, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<float> values(count);
  for (float& v : values) {
    v = static_cast<float>(static_cast<double>(generator() >> 11) * 0x1.0p-52 -
                           1.0);
  }
  return values;
}

// Float32 agreement after different summation orders: relative to the
// magnitude, with an absolute floor for values near zero.
void ExpectClose(const std::vector<float>& expected,
                 const std::vector<float>& actual, float tolerance,
                 const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float bound = tolerance * std::max(1.0f, std::fabs(expected[i]));
    if (!(std::fabs(expected[i] - actual[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: cpu " << expected[i] << ", cuda "
                    << actual[i];
    }
  }
}

// The same operation on both backends: CpuDevice is the reference.
class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NoGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto cuda = CudaDevice::Create(0);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = std::move(*cuda);
    auto cpu = CreateDevice(DeviceOptions{});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
  }

  template <typename T>
  T* Upload(Device& device, const std::vector<T>& values) {
    auto buffer = device.Allocate<T>(static_cast<int64_t>(values.size()));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    const absl::Status copied =
        device.CopyToDevice(*buffer, values.data(), values.size() * sizeof(T));
    EXPECT_TRUE(copied.ok()) << copied;
    return *buffer;
  }

  std::vector<float> Download(Device& device, const float* buffer,
                              int64_t count) {
    std::vector<float> values(count);
    const absl::Status copied =
        device.CopyToHost(values.data(), buffer, count * sizeof(float));
    EXPECT_TRUE(copied.ok()) << copied;
    return values;
  }

  std::unique_ptr<CudaDevice> cuda_;
  std::unique_ptr<Device> cpu_;
};

TEST_F(CudaDeviceTest, AllocationsAreZeroedAlignedAndDistinct) {
  std::vector<const void*> seen;
  // 0 bytes still gets a piece; 100 MiB opens a second arena block; the small
  // requests after it come from the first block's tail.
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1000},
                        int64_t{25} << 20, int64_t{3}, int64_t{77}}) {
    auto buffer = cuda_->Allocate<float>(count);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*buffer) % 256, 0u);
    for (const void* other : seen) EXPECT_NE(other, *buffer);
    seen.push_back(*buffer);
    if (count > 0) {
      const std::vector<float> values = Download(*cuda_, *buffer, count);
      EXPECT_EQ(values, std::vector<float>(count, 0.0f));
    }
  }
  EXPECT_GE(cuda_->reserved_bytes(), size_t{100} << 20);
  EXPECT_LE(cuda_->allocated_bytes(), cuda_->reserved_bytes());
}

TEST_F(CudaDeviceTest, ImpossibleAllocationNamesTheCallAndDevice) {
  auto buffer = cuda_->AllocateBytes(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(buffer.status().message()),
              HasSubstr("cudaMalloc(1125899906842624) on cuda:0: "));
  // The failure is not sticky: the device goes on working.
  auto small = cuda_->Allocate<float>(4);
  ASSERT_TRUE(small.ok()) << small.status();
  cuda_->Fill(*small, 4, 2.0f);
  EXPECT_EQ(Download(*cuda_, *small, 4), std::vector<float>(4, 2.0f));
}

TEST_F(CudaDeviceTest, CopiesRoundTripAndCopyOnDeviceIsAMemmove) {
  const std::vector<float> values = RandomVector(1000, 1);
  float* buffer = Upload(*cuda_, values);
  EXPECT_EQ(Download(*cuda_, buffer, 1000), values);

  float* other = *cuda_->Allocate<float>(1000);
  cuda_->CopyOnDevice(other, buffer, 1000);
  EXPECT_EQ(Download(*cuda_, other, 1000), values);

  // Overlapping, both directions, compared with std::memmove on the host.
  for (int shift : {-3, 3, -400, 400}) {
    std::vector<float> expected(2000, 0.0f);
    std::copy(values.begin(), values.end(), expected.begin() + 500);
    float* wide = Upload(*cuda_, expected);
    std::memmove(expected.data() + 500 + shift, expected.data() + 500,
                 1000 * sizeof(float));
    cuda_->CopyOnDevice(wide + 500 + shift, wide + 500, 1000);
    EXPECT_EQ(Download(*cuda_, wide, 2000), expected) << "shift " << shift;
  }
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

TEST_F(CudaDeviceTest, GemmMatchesTheCpuForEveryTransposeCombination) {
  const int m = 37, n = 53, k = 71;
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      const std::vector<float> a = RandomVector(int64_t{m} * k, 2);
      const std::vector<float> b = RandomVector(int64_t{k} * n, 3);
      const std::vector<float> c = RandomVector(int64_t{m} * n, 4);
      std::vector<std::vector<float> > results;
      for (Device* device : {cpu_.get(), static_cast<Device*>(cuda_.get())}) {
        float* da = Upload(*device, a);
        float* db = Upload(*device, b);
        float* dc = Upload(*device, c);
        device->Gemm(transpose_a, transpose_b, m, n, k, 0.5f, da, db, 0.25f,
                     dc);
        results.push_back(Download(*device, dc, int64_t{m} * n));
      }
      ExpectClose(results[0], results[1], 1e-5f,
                  std::string("gemm ") + (transpose_a ? "T" : "N") +
                      (transpose_b ? "T" : "N"));
    }
  }
}

TEST_F(CudaDeviceTest, GemmWithEmptyInnerDimensionScalesC) {
  float* c = Upload(*cuda_, std::vector<float>{1, 2, 3, 4, 5, 6});
  cuda_->Gemm(false, false, 2, 3, 0, 1.0f, c, c, 2.0f, c);
  EXPECT_EQ(Download(*cuda_, c, 6), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  cuda_->Gemm(false, false, 2, 3, 0, 1.0f, c, c, 0.0f, c);
  EXPECT_EQ(Download(*cuda_, c, 6), std::vector<float>(6, 0.0f));
}

TEST_F(CudaDeviceTest, ElementwiseKernelsMatchTheCpu) {
  const int rows = 1000, cols = 70;
  const int64_t count = int64_t{rows} * cols;
  const std::vector<float> x = RandomVector(count, 5);
  const std::vector<float> bias = RandomVector(cols, 6);
  const std::vector<float> dy = RandomVector(count, 7);
  std::vector<std::vector<float> > bias_out, sums, relu, relu_back, scaled,
      filled;
  for (Device* device : {cpu_.get(), static_cast<Device*>(cuda_.get())}) {
    float* y = Upload(*device, x);
    float* b = Upload(*device, bias);
    device->AddRowBias(y, b, rows, cols);
    bias_out.push_back(Download(*device, y, count));

    float* sum = *device->Allocate<float>(cols);
    device->SumRows(y, sum, rows, cols);
    sums.push_back(Download(*device, sum, cols));

    device->ReluForward(y, count);
    relu.push_back(Download(*device, y, count));
    float* grad = Upload(*device, dy);
    device->ReluBackward(y, grad, count);
    relu_back.push_back(Download(*device, grad, count));

    device->Scale(grad, count, -1.5f);
    scaled.push_back(Download(*device, grad, count));
    device->Fill(grad, count - 1, 0.125f);  // an odd count: the tail matters
    filled.push_back(Download(*device, grad, count));
  }
  EXPECT_EQ(bias_out[0], bias_out[1]);  // one addition: exact
  ExpectClose(sums[0], sums[1], 1e-4f, "SumRows");
  EXPECT_EQ(relu[0], relu[1]);
  EXPECT_EQ(relu_back[0], relu_back[1]);
  EXPECT_EQ(scaled[0], scaled[1]);
  EXPECT_EQ(filled[0], filled[1]);
}

TEST_F(CudaDeviceTest, SoftmaxCrossEntropyMatchesTheCpu) {
  // 10000 rows exceed the kernel's 1024 blocks × 8 warps, so warps loop;
  // 100 classes make lanes loop over a row.
  for (auto [rows, classes] :
       {std::pair<int, int>{1, 10}, {300, 10}, {10000, 10}, {64, 100}}) {
    const int64_t count = int64_t{rows} * classes;
    std::vector<float> logits = RandomVector(count, 8);
    for (float& v : logits) v *= 8.0f;
    std::vector<int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % classes;
    std::vector<float> losses;
    std::vector<std::vector<float> > gradients;
    for (Device* device : {cpu_.get(), static_cast<Device*>(cuda_.get())}) {
      float* x = Upload(*device, logits);
      int32_t* y = Upload(*device, labels);
      float* d = *device->Allocate<float>(count);
      float* loss = *device->Allocate<float>(1);
      device->SoftmaxCrossEntropy(x, y, rows, classes, d, loss);
      gradients.push_back(Download(*device, d, count));
      losses.push_back(Download(*device, loss, 1)[0]);
    }
    EXPECT_NEAR(losses[0], losses[1], 1e-5f * std::max(1.0f, losses[0]))
        << rows << "x" << classes;
    ExpectClose(gradients[0], gradients[1], 1e-6f, "dlogits");
  }
}

TEST_F(CudaDeviceTest, SoftmaxCrossEntropyWithABadLabelGivesNaN) {
  float* x = Upload(*cuda_, RandomVector(20, 9));
  int32_t* y = Upload(*cuda_, std::vector<int32_t>{3, 10});
  float* d = *cuda_->Allocate<float>(20);
  float* loss = *cuda_->Allocate<float>(1);
  cuda_->SoftmaxCrossEntropy(x, y, 2, 10, d, loss);
  EXPECT_TRUE(std::isnan(Download(*cuda_, loss, 1)[0]));
}

TEST_F(CudaDeviceTest, OptimizerUpdatesMatchTheCpu) {
  const int64_t count = 100003;
  const std::vector<float> params = RandomVector(count, 10);
  const std::vector<float> grads = RandomVector(count, 11);
  struct Case {
    const char* name;
    bool adam;
    float momentum;
    float weight_decay;
  };
  for (const Case& c :
       {Case{"sgd", false, 0.0f, 0.0f},
        Case{"sgd+momentum+wd", false, 0.9f, 1e-4f},
        Case{"adam", true, 0.0f, 0.0f}, Case{"adam+wd", true, 0.0f, 1e-2f}}) {
    std::vector<std::vector<float> > results;
    for (Device* device : {cpu_.get(), static_cast<Device*>(cuda_.get())}) {
      float* p = Upload(*device, params);
      float* g = Upload(*device, grads);
      float* m = *device->Allocate<float>(count);
      float* v = *device->Allocate<float>(count);
      AdamState state;
      for (int step = 1; step <= 3; ++step) {
        if (c.adam) {
          state.step = step;
          device->AdamUpdate(p, g, m, v, count, 1e-3f, state, c.weight_decay);
        } else {
          device->SgdUpdate(p, g, m, count, 0.05f, c.momentum, c.weight_decay);
        }
      }
      results.push_back(Download(*device, p, count));
    }
    // One fused multiply-add (nvcc contracts, GCC at -O2 here does not) is
    // the only difference: a few units in the last place.
    ExpectClose(results[0], results[1], 1e-6f, c.name);
  }
}

TEST_F(CudaDeviceTest, EventsOrderOtherStreamsAfterQueuedWork) {
  const int64_t count = int64_t{16} << 20;  // long enough to still be running
  float* buffer = *cuda_->Allocate<float>(count);
  std::vector<float> host(4);
  auto event = CudaEvent::Create(cuda_->name());
  ASSERT_TRUE(event.ok()) << event.status();
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking),
            cudaSuccess);

  // Compute stream → other stream: the copy sees the fill's result.
  cuda_->Fill(buffer, count, 3.0f);
  ASSERT_TRUE(cuda_->RecordEvent(event->get()).ok());
  ASSERT_EQ(cudaStreamWaitEvent(other, event->get(), 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), buffer + count - 4, sizeof(float) * 4,
                            cudaMemcpyDeviceToHost, other),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_EQ(host, std::vector<float>(4, 3.0f));

  // Other stream → compute stream: Scale runs after the other stream's fill.
  ASSERT_EQ(cudaMemsetAsync(buffer, 0, count * sizeof(float), other),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event->get(), other), cudaSuccess);
  ASSERT_TRUE(cuda_->WaitEvent(event->get()).ok());
  cuda_->Scale(buffer, count, 2.0f);
  EXPECT_EQ(Download(*cuda_, buffer + count - 4, 4),
            std::vector<float>(4, 0.0f));
  cudaStreamDestroy(other);
}

// The device's clock times the GPU's work, not the host's queueing: marks
// are events on the compute stream, reached in stream order, and no span
// between them is longer than the host's window around the work.
TEST_F(CudaDeviceTest, ClockMarksTimeTheWorkOnTheComputeStream) {
  auto made = cuda_->CreateClock(4);
  ASSERT_TRUE(made.ok()) << made.status();
  DeviceClock& clock = **made;
  EXPECT_EQ(clock.marks(), 4);
  EXPECT_EQ(clock.Record(4).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(clock.ElapsedMs(0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);

  const int n = 2048;  // a few milliseconds of GEMM on any GPU
  float* a = *cuda_->Allocate<float>(int64_t{n} * n);
  float* c = *cuda_->Allocate<float>(int64_t{n} * n);
  cuda_->Fill(a, int64_t{n} * n, 0.5f);
  ASSERT_TRUE(cuda_->Synchronize().ok());

  const auto host_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(clock.Record(0).ok());
  cuda_->Gemm(false, false, n, n, n, 1.0f, a, a, 0.0f, c);
  ASSERT_TRUE(clock.Record(1).ok());
  for (int i = 0; i < 4; ++i)
    cuda_->Gemm(false, true, n, n, n, 1.0f, a, a, 0.0f, c);
  ASSERT_TRUE(clock.Record(2).ok());
  const absl::Status synced = cuda_->Synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
  const double host_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - host_start)
                             .count();
  ASSERT_TRUE(clock.Record(3).ok());  // an idle stream: reached at once

  auto first = clock.ElapsedMs(0, 1);
  auto gemms = clock.ElapsedMs(0, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(gemms.ok()) << gemms.status();
  EXPECT_GT(*first, 0.0);
  EXPECT_GT(*gemms, *first);
  EXPECT_LE(*gemms, host_ms);
  auto backwards = clock.ElapsedMs(2, 0);
  ASSERT_TRUE(backwards.ok()) << backwards.status();
  EXPECT_NEAR(*backwards, -*gemms, 1e-3);
  auto after = clock.ElapsedMs(2, 3);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(*after, 0.0);
  // The GEMMs' results are right: the marks did not reorder the stream.
  EXPECT_EQ(Download(*cuda_, c, 1)[0], 0.25f * n);
}

// --precision=bf16's casts (cuda_kernels.cu) round as bfloat16.h does on the
// host, bit for bit: every bf16 value with the low halves that decide its
// rounding (zero, just below a tie, the tie, just above, the largest), NaNs
// kept as NaNs of their sign. And their walks: an NCHW tensor rounded into
// NHWC order and widened back through the same walk is the host-rounded
// tensor, in place; the in-place rounding of a product's output agrees too.
TEST_F(CudaDeviceTest, Bf16CastsRoundAsTheHostDoes) {
  std::vector<float> values;
  for (uint32_t high = 0; high <= 0xffffu; ++high) {
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      values.push_back(bfloat16::FloatFromBits((high << 16) | low));
    }
  }
  const int64_t count = static_cast<int64_t>(values.size());
  float* in = Upload(*cuda_, values);
  uint16_t* out = *cuda_->Allocate<uint16_t>(count);
  ASSERT_EQ(cuda_kernels::RoundToBfloat16(cuda_->stream(), in,
                                          ContiguousWalk(count), out),
            cudaSuccess);
  std::vector<uint16_t> bits(count);
  ASSERT_TRUE(cuda_->CopyToHost(bits.data(), out, count * 2).ok());
  int wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t expected = bfloat16::RoundToBits(values[i]);
    const bool ok = std::isnan(values[i])
                        ? std::isnan(bfloat16::FromBits(bits[i])) &&
                              (bits[i] >> 15) == (expected >> 15)
                        : bits[i] == expected;
    if (!ok && wrong++ < 5) {
      ADD_FAILURE() << "bits 0x" << std::hex << bfloat16::FloatBits(values[i])
                    << ": GPU 0x" << bits[i] << ", host 0x" << expected;
    }
  }
  EXPECT_EQ(wrong, 0);

  // The walk: 2 images of 3 channels of 4×5, NCHW.
  const NhwcWalk walk{2, 3, 4, 5, NchwLayout(3, 4, 5)};
  const std::vector<float> x = RandomVector(walk.count(), 71);
  float* device_x = Upload(*cuda_, x);
  uint16_t* nhwc = *cuda_->Allocate<uint16_t>(walk.count());
  float* back = *cuda_->Allocate<float>(walk.count());
  ASSERT_EQ(
      cuda_kernels::RoundToBfloat16(cuda_->stream(), device_x, walk, nhwc),
      cudaSuccess);
  ASSERT_EQ(cuda_kernels::WidenFromBfloat16(cuda_->stream(), nhwc, walk, back),
            cudaSuccess);
  std::vector<uint16_t> nhwc_bits(walk.count());
  ASSERT_TRUE(cuda_->CopyToHost(nhwc_bits.data(), nhwc, walk.count() * 2).ok());
  const std::vector<float> widened = Download(*cuda_, back, walk.count());
  for (int64_t i = 0; i < walk.count(); ++i) {
    ASSERT_EQ(nhwc_bits[i], bfloat16::RoundToBits(x[walk.OffsetOf(i)])) << i;
    ASSERT_EQ(widened[i], bfloat16::Round(x[i])) << i;
  }
  ASSERT_EQ(cuda_kernels::RoundToBfloat16InPlace(cuda_->stream(), device_x,
                                                 walk.count()),
            cudaSuccess);
  const std::vector<float> rounded = Download(*cuda_, device_x, walk.count());
  for (int64_t i = 0; i < walk.count(); ++i) {
    ASSERT_EQ(rounded[i], bfloat16::Round(x[i])) << i;
  }
  ASSERT_TRUE(cuda_->Synchronize().ok());
}

// A bf16 device says so, and leaves the fp32 device as it was.
TEST_F(CudaDeviceTest, Bf16DeviceIsMade) {
  auto made = CudaDevice::Create(0, false, Precision::kBf16);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->precision(), Precision::kBf16);
  EXPECT_EQ(cuda_->precision(), Precision::kFp32);
}

// --precision=tf32: cuBLAS and cuDNN run with tensor-core math allowed, and
// their results stay within TF32's rounding (10 mantissa bits) of the fp32
// device's; the fp32 device is unchanged by it.
TEST_F(CudaDeviceTest, Tf32DeviceRunsProductsAndConvolutionsNearFp32) {
  auto made = CudaDevice::Create(0, false, Precision::kTf32);
  ASSERT_TRUE(made.ok()) << made.status();
  CudaDevice& tf32 = **made;
  EXPECT_EQ(tf32.precision(), Precision::kTf32);
  EXPECT_EQ(cuda_->precision(), Precision::kFp32);

  const int n = 256;
  const std::vector<float> a = RandomVector(int64_t{n} * n, 61);
  const std::vector<float> b = RandomVector(int64_t{n} * n, 62);
  std::vector<float> products[2];
  CudaDevice* devices[2] = {cuda_.get(), &tf32};
  for (int d = 0; d < 2; ++d) {
    float* c = *devices[d]->Allocate<float>(int64_t{n} * n);
    devices[d]->Gemm(false, true, n, n, n, 1.0f, Upload(*devices[d], a),
                     Upload(*devices[d], b), 0.0f, c);
    products[d] = Download(*devices[d], c, int64_t{n} * n);
  }
  // A sum of 256 products of values in [-1, 1): TF32's relative rounding of
  // each input, 2^-11, over the sum of magnitudes.
  ExpectClose(products[0], products[1], 256 * 0.25f * 2 * 0x1.0p-11f,
              "tf32 gemm");

  ConvGeometry g;
  g.batch = 2;
  g.channels = 64;
  g.height = g.width = 8;
  g.kernel = 3;
  g.stride = 1;
  g.padding = 1;
  g.out_height = g.out_width = 8;
  g.input = NhwcLayout(64, 8, 8);
  const int out = 64;
  const std::vector<float> x = RandomVector(g.input_count(), 63);
  const std::vector<float> w = RandomVector(int64_t{out} * 64 * 9, 64);
  const int64_t y_count = g.column_rows() * out;
  std::vector<float> outputs[2];
  for (int d = 0; d < 2; ++d) {
    auto kernel = devices[d]->CreateConvolution(g, out);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    ASSERT_NE(*kernel, nullptr);
    float* y = *devices[d]->Allocate<float>(y_count);
    (*kernel)->Forward(Upload(*devices[d], x), Upload(*devices[d], w), y);
    const absl::Status synced = devices[d]->Synchronize();
    ASSERT_TRUE(synced.ok()) << synced;
    outputs[d] = Download(*devices[d], y, y_count);
  }
  // 576 products per output.
  ExpectClose(outputs[0], outputs[1], 576 * 0.25f * 2 * 0x1.0p-11f,
              "tf32 convolution");
}

TEST_F(CudaDeviceTest, AsCudaDeviceTellsBackendsApart) {
  EXPECT_EQ(AsCudaDevice(*cuda_), cuda_.get());
  EXPECT_EQ(AsCudaDevice(*cpu_), nullptr);
}

TEST_F(CudaDeviceTest, CreateDeviceMapsLocalRanksThroughGpus) {
  int visible = 0;
  ASSERT_EQ(cudaGetDeviceCount(&visible), cudaSuccess);
  DeviceOptions options;
  options.type = DeviceType::kCuda;
  options.gpu_index = 5;  // the local rank
  options.gpus = {0};
  auto listed = CreateDevice(options);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ((*listed)->name(), "cuda:0");
  options.gpus = {};
  auto modulo = CreateDevice(options);
  ASSERT_TRUE(modulo.ok()) << modulo.status();
  EXPECT_EQ((*modulo)->name(), "cuda:" + std::to_string(5 % visible));
  options.gpus = {visible};  // one too many
  auto missing = CreateDevice(options);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("local rank 5"));
}

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
