// Tests of the CPU backend's kernels against naive references and hand-computed
// values, and of device creation.
#include "core/device/cpu_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "core/device/batch_norm_epilogue_check.h"
#include "core/device/device.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

// Deterministic values in [-1, 1) without std's platform-dependent
// distributions.
std::vector<float> RandomVector(int64_t count, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<float> values(count);
  for (float& v : values) {
    v = static_cast<float>(static_cast<double>(generator() >> 11) * 0x1.0p-52 -
                           1.0);
  }
  return values;
}

class CpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = CreateDevice(DeviceOptions{});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
  }

  // Device memory holding `values`.
  template <typename T>
  T* Upload(const std::vector<T>& values) {
    auto buffer = device_->Allocate<T>(static_cast<int64_t>(values.size()));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_TRUE(
        device_->CopyToDevice(*buffer, values.data(), values.size() * sizeof(T))
            .ok());
    return *buffer;
  }

  std::vector<float> Download(const float* buffer, int64_t count) {
    std::vector<float> values(count);
    EXPECT_TRUE(
        device_->CopyToHost(values.data(), buffer, count * sizeof(float)).ok());
    return values;
  }

  std::unique_ptr<Device> device_;
};

TEST_F(CpuDeviceTest, AllocationsAreAlignedAndZeroed) {
  for (int64_t count : {1, 3, 17, 1000}) {
    auto buffer = device_->Allocate<float>(count);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*buffer) % 64, 0u) << count;
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ((*buffer)[i], 0.0f);
  }
  auto empty = device_->AllocateBytes(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_NE(*empty, nullptr);
  EXPECT_EQ(device_->type(), DeviceType::kCpu);
  EXPECT_EQ(device_->name(), "cpu");
}

// c = alpha·op(a)·op(b) + beta·c in double, straight from the definition.
std::vector<float> ReferenceGemm(bool transpose_a, bool transpose_b, int m,
                                 int n, int k, float alpha,
                                 const std::vector<float>& a,
                                 const std::vector<float>& b, float beta,
                                 const std::vector<float>& c) {
  std::vector<float> result(c.size());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double a_ip = transpose_a ? a[p * m + i] : a[i * k + p];
        const double b_pj = transpose_b ? b[j * k + p] : b[p * n + j];
        sum += a_ip * b_pj;
      }
      result[i * n + j] =
          static_cast<float>(alpha * sum + beta * double{c[i * n + j]});
    }
  }
  return result;
}

TEST_F(CpuDeviceTest, GemmMatchesReferenceInAllTransposeCombinations) {
  // Distinct m, n, k so a wrong leading dimension cannot go unnoticed.
  const int m = 5, n = 7, k = 3;
  const float alpha = 0.5f, beta = 0.25f;
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      SCOPED_TRACE(testing::Message() << "transpose_a=" << transpose_a
                                      << " transpose_b=" << transpose_b);
      const std::vector<float> a = RandomVector(m * k, 1);
      const std::vector<float> b = RandomVector(k * n, 2);
      const std::vector<float> c = RandomVector(m * n, 3);
      float* a_dev = Upload(a);
      float* b_dev = Upload(b);
      float* c_dev = Upload(c);
      device_->Gemm(transpose_a, transpose_b, m, n, k, alpha, a_dev, b_dev,
                    beta, c_dev);
      const std::vector<float> expected = ReferenceGemm(
          transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
      const std::vector<float> got = Download(c_dev, m * n);
      for (int i = 0; i < m * n; ++i)
        EXPECT_NEAR(got[i], expected[i], 1e-5f) << i;
    }
  }
}

TEST_F(CpuDeviceTest, GemmWithBetaZeroOverwritesGarbage) {
  const std::vector<float> a = {1, 2, 3, 4};  // 2×2
  const std::vector<float> b = {1, 0, 0, 1};  // identity
  float* c =
      Upload(std::vector<float>(4, std::numeric_limits<float>::quiet_NaN()));
  device_->Gemm(false, false, 2, 2, 2, 1.0f, Upload(a), Upload(b), 0.0f, c);
  EXPECT_EQ(Download(c, 4), a);
}

TEST_F(CpuDeviceTest, GemmWithEmptyInnerDimensionScalesC) {
  float* c = Upload(std::vector<float>{1, 2, 3, 4, 5, 6});
  device_->Gemm(false, false, 2, 3, 0, 1.0f, nullptr, nullptr, 0.5f, c);
  EXPECT_EQ(Download(c, 6), (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
}

TEST_F(CpuDeviceTest, AddRowBiasAddsToEveryRow) {
  float* y = Upload(std::vector<float>{1, 2, 3, 4, 5, 6});  // 2×3
  float* bias = Upload(std::vector<float>{10, 20, 30});
  device_->AddRowBias(y, bias, 2, 3);
  EXPECT_EQ(Download(y, 6), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST_F(CpuDeviceTest, SumRowsSumsColumnsAndOverwrites) {
  float* x = Upload(std::vector<float>{1, 2, 3, 4, 5, 6});  // 2×3
  float* out = Upload(std::vector<float>{100, 100, 100});   // must be replaced
  device_->SumRows(x, out, 2, 3);
  EXPECT_EQ(Download(out, 3), (std::vector<float>{5, 7, 9}));
}

TEST_F(CpuDeviceTest, ReluForwardAndBackward) {
  float* x = Upload(std::vector<float>{-2, -0.0f, 0, 0.5f, 3});
  device_->ReluForward(x, 5);
  const std::vector<float> y = Download(x, 5);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0.5f, 3}));
  // The gradient passes only where the output is positive (the subgradient at
  // 0 is taken as 0, like PyTorch).
  float* dy = Upload(std::vector<float>{1, 2, 3, 4, 5});
  device_->ReluBackward(x, dy, 5);
  EXPECT_EQ(Download(dy, 5), (std::vector<float>{0, 0, 0, 4, 5}));
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyMatchesHandComputedCase) {
  // Row 0: logits (1, 2, 3), label 2: loss = log(e + e² + e³) - 3 = 0.40760596.
  // Row 1: logits (0, 0, 0), label 0: loss = log 3 = 1.09861229.
  float* logits = Upload(std::vector<float>{1, 2, 3, 0, 0, 0});
  int32_t* labels = Upload(std::vector<int32_t>{2, 0});
  float* dlogits = Upload(std::vector<float>(6, 0.0f));
  float* loss = Upload(std::vector<float>{0});
  device_->SoftmaxCrossEntropy(logits, labels, 2, 3, dlogits, loss);
  EXPECT_NEAR(Download(loss, 1)[0], (0.40760596 + 1.09861229) / 2, 1e-6);

  // d loss / d logits = (softmax - onehot) / rows.
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const std::vector<double> expected = {
      std::exp(1.0) / z / 2, std::exp(2.0) / z / 2, (std::exp(3.0) / z - 1) / 2,
      (1.0 / 3 - 1) / 2,     1.0 / 3 / 2,           1.0 / 3 / 2};
  const std::vector<float> got = Download(dlogits, 6);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], expected[i], 1e-6) << i;
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyIsStableForLargeLogits) {
  // Without subtracting the row max, exp(1000) overflows to inf.
  float* logits = Upload(std::vector<float>{1000, 1001, -1000, -1001});
  int32_t* labels = Upload(std::vector<int32_t>{1, 0});
  float* dlogits = Upload(std::vector<float>(4, 0.0f));
  float* loss = Upload(std::vector<float>{0});
  device_->SoftmaxCrossEntropy(logits, labels, 2, 2, dlogits, loss);
  // Both rows: loss = log(1 + e^-1) = 0.31326169.
  EXPECT_NEAR(Download(loss, 1)[0], 0.31326169, 1e-6);
  for (float d : Download(dlogits, 4)) EXPECT_TRUE(std::isfinite(d));
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyFlagsOutOfRangeLabelWithoutCrashing) {
  float* logits = Upload(std::vector<float>{0, 0, 0, 0});
  int32_t* labels = Upload(std::vector<int32_t>{0, 7});
  float* dlogits = Upload(std::vector<float>(4, 0.0f));
  float* loss = Upload(std::vector<float>{0});
  device_->SoftmaxCrossEntropy(logits, labels, 2, 2, dlogits, loss);
  EXPECT_TRUE(std::isnan(Download(loss, 1)[0]));
}

TEST_F(CpuDeviceTest, ScaleFillAndCopy) {
  float* x = Upload(std::vector<float>{1, -2, 3});
  device_->Scale(x, 3, -0.5f);
  EXPECT_EQ(Download(x, 3), (std::vector<float>{-0.5f, 1, -1.5f}));
  device_->Fill(x, 2, 7.0f);
  EXPECT_EQ(Download(x, 3), (std::vector<float>{7, 7, -1.5f}));
  float* y = Upload(std::vector<float>(3, 0.0f));
  device_->CopyOnDevice(y, x, 3);
  EXPECT_EQ(Download(y, 3), (std::vector<float>{7, 7, -1.5f}));
  EXPECT_TRUE(device_->Synchronize().ok());
}

TEST_F(CpuDeviceTest, SgdWithoutMomentumIsPlainGradientDescent) {
  float* p = Upload(std::vector<float>{1, -1});
  float* g = Upload(std::vector<float>{0.5f, 0.25f});
  // No velocity buffer: with momentum 0 it must not be touched.
  device_->SgdUpdate(p, g, nullptr, 2, 0.1f, 0.0f, 0.0f);
  const std::vector<float> got = Download(p, 2);
  EXPECT_FLOAT_EQ(got[0], 0.95f);
  EXPECT_FLOAT_EQ(got[1], -1.025f);
}

TEST_F(CpuDeviceTest, SgdWithMomentumAndWeightDecayMatchesHandComputedSteps) {
  // lr 0.1, momentum 0.9, weight decay 0.01, p0 = 1, g = 0.5 twice:
  //   step 1: g' = 0.5 + 0.01·1 = 0.51;     v = 0.51 (PyTorch: v = g first);
  //           p = 1 - 0.1·0.51 = 0.949
  //   step 2: g' = 0.5 + 0.01·0.949 = 0.50949; v = 0.9·0.51 + 0.50949 =
  //   0.96849;
  //           p = 0.949 - 0.096849 = 0.852151
  float* p = Upload(std::vector<float>{1});
  float* g = Upload(std::vector<float>{0.5f});
  float* v = Upload(std::vector<float>{0});
  device_->SgdUpdate(p, g, v, 1, 0.1f, 0.9f, 0.01f);
  EXPECT_NEAR(Download(p, 1)[0], 0.949f, 1e-6);
  EXPECT_NEAR(Download(v, 1)[0], 0.51f, 1e-6);
  device_->SgdUpdate(p, g, v, 1, 0.1f, 0.9f, 0.01f);
  EXPECT_NEAR(Download(p, 1)[0], 0.852151f, 1e-6);
  EXPECT_NEAR(Download(v, 1)[0], 0.96849f, 1e-6);
}

TEST_F(CpuDeviceTest, AdamMatchesHandComputedSteps) {
  // lr 0.01, betas (0.9, 0.999), eps 1e-8, p0 = 1:
  //   step 1, g = 0.5:   m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25,
  //                      p = 1 - 0.01·0.5/(0.5 + 1e-8) = 0.99 (the first Adam
  //                      step moves every weight by lr, whatever the gradient)
  //   step 2, g = -0.25: m = 0.045 - 0.025 = 0.02,
  //                      v = 0.00024975 + 0.0000625 = 0.00031225,
  //                      m̂ = 0.02/0.19, v̂ = 0.00031225/0.001999,
  //                      p = 0.99 - 0.01·m̂/(sqrt(v̂) + eps) = 0.98733663
  float* p = Upload(std::vector<float>{1});
  float* g = Upload(std::vector<float>{0.5f});
  float* m = Upload(std::vector<float>{0});
  float* v = Upload(std::vector<float>{0});
  AdamState state;
  state.step = 1;
  device_->AdamUpdate(p, g, m, v, 1, 0.01f, state, 0.0f);
  EXPECT_NEAR(Download(p, 1)[0], 0.99f, 1e-6);
  EXPECT_NEAR(Download(m, 1)[0], 0.05f, 1e-7);
  // 1 - beta2 in float is 0.00099998713 (0.999 is not a float), so v is
  // 1.3e-5 below the decimal figure; PyTorch forms 1 - beta2 in double.
  EXPECT_NEAR(Download(v, 1)[0], 0.00025f, 1e-8);

  float* g2 = Upload(std::vector<float>{-0.25f});
  state.step = 2;
  device_->AdamUpdate(p, g2, m, v, 1, 0.01f, state, 0.0f);
  const double m_hat = 0.02 / 0.19;
  const double v_hat = 0.00031225 / (1 - 0.999 * 0.999);
  const double expected = 0.99 - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);
  EXPECT_NEAR(expected, 0.98733663, 1e-7);  // the comment's figure
  EXPECT_NEAR(Download(p, 1)[0], expected, 1e-6);
}

TEST_F(CpuDeviceTest, AdamAddsWeightDecayToTheGradient) {
  // torch.optim.Adam's weight_decay is L2 added to the gradient (not AdamW):
  // g' = g + wd·p = 0 + 0.5·2 = 1, so the first step is p - lr = 2 - 0.1.
  float* p = Upload(std::vector<float>{2, -2});
  float* g = Upload(std::vector<float>{0, 0});
  float* m = Upload(std::vector<float>{0, 0});
  float* v = Upload(std::vector<float>{0, 0});
  AdamState state;
  state.step = 1;
  device_->AdamUpdate(p, g, m, v, 2, 0.1f, state, 0.5f);
  const std::vector<float> got = Download(p, 2);
  EXPECT_NEAR(got[0], 1.9f, 1e-6);
  EXPECT_NEAR(got[1], -1.9f, 1e-6);
  EXPECT_NEAR(Download(m, 2)[0], 0.1f, 1e-7);  // (1 - 0.9)·1
}

// oneDNN's batch normalisation against the reference loops (kernel_math.h's
// arithmetic, which the CUDA kernels share): training forward with its saved
// and running statistics, backward, inference, over odd channel counts, two
// rows, and a shape large enough to be shared among threads. Tolerances:
// oneDNN sums in float where the loops sum in double. The normalised outputs
// and statistics differ by 2e-5 of their largest value at most. dgamma and
// dbeta are sums over up to 16384 rows whose terms' magnitudes add up to far
// more than the result: float rounding of ~sqrt(rows)·2⁻²⁴ of that sum is up
// to 1e-4 of the largest result. dx is measured against the size of its
// terms, dy·gamma·inv_std: with two rows it is nearly zero by cancellation,
// so its own size would make any rounding look wrong.
struct BatchNormOutputs {
  std::vector<float> y, saved, running, dx, dparams, inference;
  float dx_term_scale = 0;  // max |dy| · max |gamma · inv_std|
};

BatchNormOutputs RunBatchNorm(bool reference, int64_t rows, int channels,
                              int threads) {
  DeviceOptions options;
  options.cpu_threads = threads;
  options.reference_batch_norm = reference;
  auto created = CreateDevice(options);
  EXPECT_TRUE(created.ok()) << created.status();
  Device& device = **created;
  const int64_t n = rows * channels;
  auto upload = [&](const std::vector<float>& host) {
    float* buffer = *device.Allocate<float>(static_cast<int64_t>(host.size()));
    EXPECT_TRUE(device.CopyToDevice(buffer, host.data(), host.size() * 4).ok());
    return buffer;
  };
  auto download = [&](const float* buffer, int64_t count) {
    std::vector<float> host(count);
    EXPECT_TRUE(device.CopyToHost(host.data(), buffer, count * 4).ok());
    return host;
  };
  // Offsets and scales per channel, as activations have.
  std::vector<float> x = RandomVector(n, 31);
  for (int64_t i = 0; i < n; ++i) x[i] = 3.0f * x[i] + 0.5f * (i % channels);
  const float* device_x = upload(x);
  const std::vector<float> host_dy = RandomVector(n, 32);
  const std::vector<float> host_gamma = RandomVector(channels, 33);
  const float* dy = upload(host_dy);
  const float* gamma = upload(host_gamma);
  const float* beta = upload(RandomVector(channels, 34));
  std::vector<float> running_init(2 * channels, 0.0f);
  for (int c = 0; c < channels; ++c) running_init[channels + c] = 1.0f;
  float* running = upload(running_init);
  float* y = *device.Allocate<float>(n);
  float* saved = *device.Allocate<float>(2 * channels);
  float* dx = *device.Allocate<float>(n);
  float* dparams = *device.Allocate<float>(2 * channels);
  BatchNormOutputs out;
  // Two steps, so that the running statistics move twice.
  for (int step = 0; step < 2; ++step) {
    device.BatchNormForwardTraining(device_x, rows, channels, gamma, beta, 0.1f,
                                    1e-5f, y, saved, saved + channels, running,
                                    running + channels,
                                    BatchNormEpilogue::None());
  }
  device.BatchNormBackward(device_x, dy, rows, channels, gamma, saved,
                           saved + channels, dx, dparams, dparams + channels,
                           /*relu_output=*/nullptr, /*dx_bf16=*/nullptr);
  out.y = download(y, n);
  out.saved = download(saved, 2 * channels);
  out.running = download(running, 2 * channels);
  out.dx = download(dx, n);
  out.dparams = download(dparams, 2 * channels);
  device.BatchNormForwardInference(device_x, rows, channels, gamma, beta,
                                   running, running + channels, 1e-5f, y,
                                   BatchNormEpilogue::None());
  out.inference = download(y, n);
  // Backward and both forwards of this one shape: one oneDNN kernel, none
  // for the reference.
  EXPECT_EQ(dynamic_cast<CpuDevice&>(device).onednn_batch_norms(),
            reference ? 0u : 1u);
  float max_dy = 0, max_gain = 0;
  for (float v : host_dy) max_dy = std::max(max_dy, std::fabs(v));
  for (int c = 0; c < channels; ++c) {
    max_gain =
        std::max(max_gain, std::fabs(host_gamma[c] * out.saved[channels + c]));
  }
  out.dx_term_scale = max_dy * max_gain;
  return out;
}

// Within relative·scale, scale being the largest reference value unless
// given.
void ExpectWithin(const std::vector<float>& reference,
                  const std::vector<float>& actual, float relative,
                  const char* what, float scale = 0.0f) {
  ASSERT_EQ(reference.size(), actual.size()) << what;
  if (scale == 0.0f) {
    scale = 1e-6f;
    for (float v : reference) scale = std::max(scale, std::fabs(v));
  }
  int failures = 0;
  for (size_t i = 0; i < reference.size() && failures < 5; ++i) {
    if (!(std::fabs(reference[i] - actual[i]) <= relative * scale)) {
      ADD_FAILURE() << what << "[" << i << "]: reference " << reference[i]
                    << ", oneDNN " << actual[i] << " (scale " << scale << ")";
      ++failures;
    }
  }
}

TEST(CpuBatchNormTest, OneDnnMatchesTheReferenceLoops) {
  struct Shape {
    int64_t rows;
    int channels;
    int threads;
  };
  for (const Shape& shape : {Shape{300, 37, 1}, Shape{2, 5, 1},
                             Shape{16384, 64, 2}, Shape{33, 512, 2}}) {
    SCOPED_TRACE(testing::Message() << shape.rows << " x " << shape.channels
                                    << ", " << shape.threads << " threads");
    const BatchNormOutputs reference =
        RunBatchNorm(true, shape.rows, shape.channels, shape.threads);
    const BatchNormOutputs onednn =
        RunBatchNorm(false, shape.rows, shape.channels, shape.threads);
    ExpectWithin(reference.y, onednn.y, 2e-5f, "y");
    ExpectWithin(reference.saved, onednn.saved, 2e-5f, "mean, inv_std");
    ExpectWithin(reference.running, onednn.running, 2e-5f, "running");
    ExpectWithin(reference.dx, onednn.dx, 2e-5f, "dx", reference.dx_term_scale);
    ExpectWithin(reference.dparams, onednn.dparams, 1e-4f, "dgamma, dbeta");
    ExpectWithin(reference.inference, onednn.inference, 2e-5f, "inference");
  }
}

// The fused epilogues give the unfused passes' bits on both of the CPU's
// batch norms: oneDNN's (then one epilogue pass) and the reference loops
// (kernel_math.h's, which the CUDA kernels share), over shapes that take one
// thread and several.
TEST(CpuBatchNormTest, FusedEpiloguesMatchTheUnfusedPasses) {
  for (bool reference : {false, true}) {
    for (const auto& [rows, channels, threads] :
         {std::tuple<int64_t, int, int>{300, 37, 1},
          std::tuple<int64_t, int, int>{4096, 64, 2}}) {
      SCOPED_TRACE(testing::Message()
                   << (reference ? "reference loops" : "oneDNN") << ", " << rows
                   << " x " << channels);
      DeviceOptions options;
      options.cpu_threads = threads;
      options.reference_batch_norm = reference;
      auto device = CreateDevice(options);
      ASSERT_TRUE(device.ok()) << device.status();
      const absl::Status checked =
          CheckBatchNormEpilogues(**device, rows, channels);
      EXPECT_TRUE(checked.ok()) << checked;
      EXPECT_EQ(dynamic_cast<CpuDevice&>(**device).onednn_batch_norms(),
                reference ? 0u : 1u);
    }
  }
}

TEST(CreateDeviceTest, CpuThreadsAndErrors) {
  DeviceOptions options;
  options.cpu_threads = 1;
  EXPECT_TRUE(CreateDevice(options).ok());
  options.cpu_threads = -1;
  EXPECT_FALSE(CreateDevice(options).ok());
#ifndef GRADSYNC_CUDA
  options.type = DeviceType::kCuda;
  options.cpu_threads = 0;
  auto cuda = CreateDevice(options);
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.status().message().find("rebuild with --config=cuda"),
            std::string::npos)
      << cuda.status();
#endif
}

TEST(ParsePrecisionTest, NamesAndErrors) {
  EXPECT_EQ(*ParsePrecision("fp32"), Precision::kFp32);
  EXPECT_EQ(*ParsePrecision("TF32"), Precision::kTf32);
  EXPECT_STREQ(PrecisionName(Precision::kTf32), "tf32");
  EXPECT_EQ(*ParsePrecision("bf16"), Precision::kBf16);
  EXPECT_EQ(*ParsePrecision("BF16"), Precision::kBf16);
  EXPECT_STREQ(PrecisionName(Precision::kBf16), "bf16");
  EXPECT_STREQ(PrecisionName(Precision::kFp32), "fp32");
  auto bad = ParsePrecision("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--precision=fp16"), std::string::npos);
}

TEST(ParseConvolutionLayoutTest, NamesAndErrors) {
  for (ConvolutionLayout layout :
       {ConvolutionLayout::kNhwc, ConvolutionLayout::kNchw,
        ConvolutionLayout::kFastest}) {
    EXPECT_EQ(*ParseConvolutionLayout(ConvolutionLayoutName(layout)), layout);
  }
  EXPECT_EQ(*ParseConvolutionLayout("NCHW"), ConvolutionLayout::kNchw);
  EXPECT_EQ(DeviceOptions().cudnn_layout, ConvolutionLayout::kNhwc);
  auto bad = ParseConvolutionLayout("channels_last");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--cudnn_layout=channels_last"),
            std::string::npos);
  EXPECT_NE(bad.status().message().find("nhwc, nchw or fastest"),
            std::string::npos);
}

// TF32 is a tensor-core format: the CPU device refuses it rather than
// silently computing in fp32 under a tf32 label.
TEST(ParsePrecisionTest, CpuDeviceRefusesTf32) {
  DeviceOptions options;
  options.precision = Precision::kTf32;
  auto device = CreateDevice(options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(device.status().message().find("--precision=tf32"),
            std::string::npos)
      << device.status();
}

// bf16 runs on the CPU: its products are the GPU's reference.
TEST(ParsePrecisionTest, CpuDeviceTakesBf16) {
  DeviceOptions options;
  options.precision = Precision::kBf16;
  auto device = CreateDevice(options);
  ASSERT_TRUE(device.ok()) << device.status();
  auto* cpu = dynamic_cast<CpuDevice*>(device->get());
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->precision(), Precision::kBf16);
}

TEST(ParseDeviceTypeTest, NamesAndErrors) {
  EXPECT_EQ(*ParseDeviceType("cpu"), DeviceType::kCpu);
  EXPECT_EQ(*ParseDeviceType("cuda"), DeviceType::kCuda);
  auto bad = ParseDeviceType("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--device=tpu"), std::string::npos);
}

}  // namespace
}  // namespace gradsync
