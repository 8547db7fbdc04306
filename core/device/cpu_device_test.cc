// Tests of the CPU backend's kernels against naive references and hand-computed
// values, and of device creation.
#include "core/device/cpu_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
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
    device.BatchNormForwardTraining(
        device_x, rows, channels, /*plane=*/1, gamma, beta, 0.1f, 1e-5f, y,
        saved, saved + channels, running, running + channels,
        BatchNormEpilogue::None());
  }
  device.BatchNormBackward(device_x, dy, rows, channels, /*plane=*/1, gamma,
                           saved, saved + channels, dx, dparams,
                           dparams + channels,
                           /*relu_output=*/nullptr, /*dx_bf16=*/nullptr);
  out.y = download(y, n);
  out.saved = download(saved, 2 * channels);
  out.running = download(running, 2 * channels);
  out.dx = download(dx, n);
  out.dparams = download(dparams, 2 * channels);
  device.BatchNormForwardInference(device_x, rows, channels, /*plane=*/1, gamma,
                                   beta, running, running + channels, 1e-5f, y,
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
                    << ", actual " << actual[i] << " (scale " << scale << ")";
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

// [images × channels × plane] (NCHW) as [images × plane × channels] (NHWC),
// and back.
std::vector<float> NchwToNhwc(const std::vector<float>& nchw, int64_t images,
                              int channels, int64_t plane) {
  std::vector<float> nhwc(nchw.size());
  for (int64_t n = 0; n < images; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t s = 0; s < plane; ++s) {
        nhwc[(n * plane + s) * channels + c] =
            nchw[(n * channels + c) * plane + s];
      }
    }
  }
  return nhwc;
}

std::vector<float> NhwcToNchw(const std::vector<float>& nhwc, int64_t images,
                              int channels, int64_t plane) {
  std::vector<float> nchw(nhwc.size());
  for (int64_t n = 0; n < images; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t s = 0; s < plane; ++s) {
        nchw[(n * channels + c) * plane + s] =
            nhwc[(n * plane + s) * channels + c];
      }
    }
  }
  return nchw;
}

float* UploadTo(Device& device, const std::vector<float>& host) {
  auto buffer = device.Allocate<float>(static_cast<int64_t>(host.size()));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(
      device.CopyToDevice(*buffer, host.data(), host.size() * sizeof(float))
          .ok());
  return *buffer;
}

std::vector<float> DownloadFrom(Device& device, const float* buffer,
                                int64_t count) {
  std::vector<float> host(count);
  EXPECT_TRUE(
      device.CopyToHost(host.data(), buffer, count * sizeof(float)).ok());
  return host;
}

// A batch of `images` images of `channels` × `plane` values, every tensor in
// NCHW order: x with an offset per channel, a residual and dy of either sign,
// and a ReLU's output for the backward, 0 in about half its elements.
struct NchwBatchNormInputs {
  int64_t images = 0;
  int channels = 0;
  int64_t plane = 0;
  std::vector<float> x, residual, dy, relu_output, gamma, beta;

  int64_t count() const { return images * channels * plane; }
};

NchwBatchNormInputs MakeNchwBatchNormInputs(int64_t images, int channels,
                                            int64_t plane) {
  NchwBatchNormInputs in;
  in.images = images;
  in.channels = channels;
  in.plane = plane;
  in.x = RandomVector(in.count(), 41);
  for (int64_t i = 0; i < in.count(); ++i) {
    in.x[i] = 3.0f * in.x[i] + 0.5f * ((i / plane) % channels);
  }
  in.residual = RandomVector(in.count(), 42);
  in.dy = RandomVector(in.count(), 43);
  in.relu_output = RandomVector(in.count(), 46);
  for (float& v : in.relu_output) v = std::max(v, 0.0f);
  in.gamma = RandomVector(channels, 44);
  in.beta = RandomVector(channels, 45);
  return in;
}

// One layout's batch-norm results, the tensors back in NCHW order.
struct LayoutBatchNormResults {
  std::vector<float> y, saved, running, dx, dparams, inference;
  float dx_term_scale = 0;  // as BatchNormOutputs'
};

// On `device`, with the inputs laid out as `layout`: two training forwards
// with the epilogue + residual then ReLU, the backward through a ReLU, and an
// inference forward with the same epilogue. The backward's relu_output is the
// inputs', not the forward's y: the two layouts' y differ by rounding, and
// where that flips a value near 0 across the ReLU's threshold, the gradient
// there would differ by a whole term.
LayoutBatchNormResults RunBatchNormInLayout(Device& device,
                                            ActivationLayout layout,
                                            const NchwBatchNormInputs& in) {
  const bool nchw = layout == ActivationLayout::kNchw;
  const int channels = in.channels;
  const int64_t n = in.count();
  const int64_t rows = in.images * in.plane;
  const int64_t plane = nchw ? in.plane : 1;
  auto as_layout = [&](const std::vector<float>& values) {
    return nchw ? values : NchwToNhwc(values, in.images, channels, in.plane);
  };
  auto as_nchw = [&](const std::vector<float>& values) {
    return nchw ? values : NhwcToNchw(values, in.images, channels, in.plane);
  };
  const float* x = UploadTo(device, as_layout(in.x));
  const float* residual = UploadTo(device, as_layout(in.residual));
  const float* dy = UploadTo(device, as_layout(in.dy));
  const float* relu_output = UploadTo(device, as_layout(in.relu_output));
  const float* gamma = UploadTo(device, in.gamma);
  const float* beta = UploadTo(device, in.beta);
  std::vector<float> running_init(2 * channels, 0.0f);
  std::fill(running_init.begin() + channels, running_init.end(), 1.0f);
  float* running = UploadTo(device, running_init);
  float* y = *device.Allocate<float>(n);
  float* saved = *device.Allocate<float>(2 * channels);
  float* dx = *device.Allocate<float>(n);
  float* dparams = *device.Allocate<float>(2 * channels);
  float* inference = *device.Allocate<float>(n);
  const BatchNormEpilogue epilogue = BatchNormEpilogue::AddThenRelu(residual);
  for (int step = 0; step < 2; ++step) {
    device.BatchNormForwardTraining(x, rows, channels, plane, gamma, beta, 0.1f,
                                    1e-5f, y, saved, saved + channels, running,
                                    running + channels, epilogue);
  }
  device.BatchNormBackward(x, dy, rows, channels, plane, gamma, saved,
                           saved + channels, dx, dparams, dparams + channels,
                           relu_output, /*dx_bf16=*/nullptr);
  device.BatchNormForwardInference(x, rows, channels, plane, gamma, beta,
                                   running, running + channels, 1e-5f,
                                   inference, epilogue);
  LayoutBatchNormResults out;
  out.y = as_nchw(DownloadFrom(device, y, n));
  out.saved = DownloadFrom(device, saved, 2 * channels);
  out.running = DownloadFrom(device, running, 2 * channels);
  out.dx = as_nchw(DownloadFrom(device, dx, n));
  out.dparams = DownloadFrom(device, dparams, 2 * channels);
  out.inference = as_nchw(DownloadFrom(device, inference, n));
  float max_dy = 0, max_gain = 0;
  for (float v : in.dy) max_dy = std::max(max_dy, std::fabs(v));
  for (int c = 0; c < channels; ++c) {
    max_gain =
        std::max(max_gain, std::fabs(in.gamma[c] * out.saved[channels + c]));
  }
  out.dx_term_scale = max_dy * max_gain;
  return out;
}

// Batch norm on NCHW activations (plane = height·width) gives what it gives
// on the same values NHWC, on both of the CPU's batch norms, the fused
// epilogue and the backward through its ReLU included. Both layouts run on
// one device, so that the NCHW call cannot borrow the NHWC shape's oneDNN
// primitive (same rows and channels). Tolerances: the reference loops sum
// each channel in double in another order, which leaves the float statistics
// equal to within an ulp, so only rounding-level differences; oneDNN's NCHW
// and NHWC kernels sum in float in different orders, so as
// OneDnnMatchesTheReferenceLoops.
TEST(CpuBatchNormTest, NchwMatchesNhwcOnTheTransposedTensor) {
  struct Shape {
    int64_t images;
    int channels;
    int64_t plane;
    int threads;
  };
  for (bool reference : {false, true}) {
    for (const Shape& shape :
         {Shape{4, 37, 49, 1}, Shape{2, 5, 4, 1}, Shape{16, 64, 1024, 2}}) {
      SCOPED_TRACE(testing::Message()
                   << (reference ? "reference loops" : "oneDNN") << ", "
                   << shape.images << " x " << shape.channels << " x "
                   << shape.plane << ", " << shape.threads << " threads");
      DeviceOptions options;
      options.cpu_threads = shape.threads;
      options.reference_batch_norm = reference;
      auto device = CreateDevice(options);
      ASSERT_TRUE(device.ok()) << device.status();
      const NchwBatchNormInputs in =
          MakeNchwBatchNormInputs(shape.images, shape.channels, shape.plane);
      const LayoutBatchNormResults nhwc =
          RunBatchNormInLayout(**device, ActivationLayout::kNhwc, in);
      const LayoutBatchNormResults nchw =
          RunBatchNormInLayout(**device, ActivationLayout::kNchw, in);
      const float tolerance = reference ? 1e-6f : 2e-5f;
      ExpectWithin(nhwc.y, nchw.y, tolerance, "y");
      ExpectWithin(nhwc.saved, nchw.saved, tolerance, "mean, inv_std");
      ExpectWithin(nhwc.running, nchw.running, tolerance, "running");
      ExpectWithin(nhwc.dx, nchw.dx, tolerance, "dx", nhwc.dx_term_scale);
      ExpectWithin(nhwc.dparams, nchw.dparams, reference ? 1e-6f : 1e-4f,
                   "dgamma, dbeta");
      ExpectWithin(nhwc.inference, nchw.inference, tolerance, "inference");
      // One primitive per layout for oneDNN, none for the loops.
      EXPECT_EQ(dynamic_cast<CpuDevice&>(**device).onednn_batch_norms(),
                reference ? 0u : 2u);
    }
  }
}

// rows must make whole planes.
TEST(CpuBatchNormDeathTest, RefusesRowsThatAreNotWholePlanes) {
  DeviceOptions options;
  options.reference_batch_norm = true;
  auto device = CreateDevice(options);
  ASSERT_TRUE(device.ok()) << device.status();
  Device& d = **device;
  const std::vector<float> values(10, 1.0f);
  float* x = UploadTo(d, values);
  float* y = UploadTo(d, values);
  float* stats = UploadTo(d, values);
  EXPECT_DEATH(d.BatchNormForwardTraining(x, 5, 2, 2, stats, stats, 0.1f, 1e-5f,
                                          y, stats, stats, stats, stats,
                                          BatchNormEpilogue::None()),
               "whole planes");
}

// Global average pooling of NCHW activations gives NHWC's bits on the
// transposed tensor (the same double sums in the same order), forward and
// backward, and the mean of each (image, channel).
TEST_F(CpuDeviceTest, GlobalAvgPoolNchwMatchesNhwcOnTheTransposedTensor) {
  const int batch = 3, channels = 5, spatial = 7;
  const std::vector<float> x_nchw =
      RandomVector(int64_t{batch} * channels * spatial, 51);
  const std::vector<float> x_nhwc =
      NchwToNhwc(x_nchw, batch, channels, spatial);
  float* y_nchw = Upload(std::vector<float>(batch * channels, 0.0f));
  float* y_nhwc = Upload(std::vector<float>(batch * channels, 0.0f));
  device_->GlobalAvgPoolForward(Upload(x_nchw), batch, spatial, channels,
                                ActivationLayout::kNchw, y_nchw);
  device_->GlobalAvgPoolForward(Upload(x_nhwc), batch, spatial, channels,
                                ActivationLayout::kNhwc, y_nhwc);
  const std::vector<float> means = Download(y_nchw, batch * channels);
  EXPECT_EQ(means, Download(y_nhwc, batch * channels));
  for (int i = 0; i < batch * channels; ++i) {
    double sum = 0.0;
    for (int s = 0; s < spatial; ++s) sum += x_nchw[i * spatial + s];
    EXPECT_NEAR(means[i], sum / spatial, 1e-6) << i;
  }

  const std::vector<float> dy = RandomVector(batch * channels, 52);
  const int64_t count = int64_t{batch} * channels * spatial;
  float* dx_nchw = Upload(std::vector<float>(count, 9.0f));
  float* dx_nhwc = Upload(std::vector<float>(count, 9.0f));
  device_->GlobalAvgPoolBackward(Upload(dy), batch, spatial, channels,
                                 ActivationLayout::kNchw, dx_nchw);
  device_->GlobalAvgPoolBackward(Upload(dy), batch, spatial, channels,
                                 ActivationLayout::kNhwc, dx_nhwc);
  const std::vector<float> grad = Download(dx_nchw, count);
  EXPECT_EQ(NchwToNhwc(grad, batch, channels, spatial),
            Download(dx_nhwc, count));
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(grad[i], dy[i / spatial] / spatial) << i;
  }
}

TEST(CpuActivationLayoutTest, NhwcUnlessAskedForNchw) {
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->activation_layout(), ActivationLayout::kNhwc);
  const CpuDevice nchw(/*cpu_threads=*/0, /*reference_convolutions=*/false,
                       /*reference_batch_norm=*/false, Precision::kFp32,
                       /*convolutions_round_own_operands=*/false,
                       /*nchw_activations=*/true);
  EXPECT_EQ(nchw.activation_layout(), ActivationLayout::kNchw);
}

// A convolution's results, the image tensors in NCHW order.
struct ConvolutionResults {
  std::vector<float> y, weight_grad, dx;
};

// Runs CreateConvolution's kernel for `g` (its input and output layouts as
// g.input and g.nchw_output say) on NCHW-ordered x and dy, laid out as g
// wants them.
ConvolutionResults RunConvolution(Device& device, const ConvGeometry& g,
                                  int out_channels,
                                  const std::vector<float>& x_nchw,
                                  const std::vector<float>& weight,
                                  const std::vector<float>& dy_nchw) {
  const int64_t in_plane = int64_t{g.height} * g.width;
  const int64_t out_plane = int64_t{g.out_height} * g.out_width;
  const bool nchw_input = g.input.column == 1;
  const std::vector<float> x =
      nchw_input ? x_nchw : NchwToNhwc(x_nchw, g.batch, g.channels, in_plane);
  const std::vector<float> dy =
      g.nchw_output ? dy_nchw
                    : NchwToNhwc(dy_nchw, g.batch, out_channels, out_plane);
  auto kernel = device.CreateConvolution(g, out_channels);
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_NE(*kernel, nullptr);
  if (!kernel.ok() || *kernel == nullptr) return {};
  const int64_t y_count = int64_t{g.batch} * out_channels * out_plane;
  float* y = UploadTo(device, std::vector<float>(y_count, 7.0f));
  float* weight_grad = UploadTo(device, std::vector<float>(weight.size(), 7));
  float* dx = UploadTo(device, std::vector<float>(x.size(), 7.0f));
  const float* device_x = UploadTo(device, x);
  const float* device_weight = UploadTo(device, weight);
  const float* device_dy = UploadTo(device, dy);
  (*kernel)->Forward(device_x, device_weight, y);
  (*kernel)->BackwardWeights(device_x, device_dy, weight_grad);
  (*kernel)->BackwardInput(device_dy, device_weight, dx);
  ConvolutionResults out;
  out.y = DownloadFrom(device, y, y_count);
  if (!g.nchw_output) {
    out.y = NhwcToNchw(out.y, g.batch, out_channels, out_plane);
  }
  out.weight_grad =
      DownloadFrom(device, weight_grad, static_cast<int64_t>(weight.size()));
  out.dx = DownloadFrom(device, dx, static_cast<int64_t>(x.size()));
  if (!nchw_input) out.dx = NhwcToNchw(out.dx, g.batch, g.channels, in_plane);
  return out;
}

// oneDNN's convolution with an NCHW output (ConvGeometry::nchw_output), from
// an NCHW input (read as it is) or an NHWC one, gives the NHWC convolution's
// results on the transposed tensors: forward, weight gradient, and the input
// gradient in the input's layout. Tolerance: the NCHW primitives are other
// oneDNN implementations, summing in other orders.
TEST_F(CpuDeviceTest, ConvolutionWithNchwOutputMatchesNhwc) {
  struct Case {
    int kernel, stride, padding;
  };
  const int batch = 2, channels = 3, height = 9, width = 7, out_channels = 4;
  for (const Case& c : {Case{1, 1, 0}, Case{3, 1, 1}, Case{3, 2, 1},
                        Case{1, 2, 0}, Case{3, 2, 0}}) {
    for (bool nchw_input : {true, false}) {
      SCOPED_TRACE(testing::Message()
                   << "kernel " << c.kernel << " stride " << c.stride
                   << " padding " << c.padding << ", "
                   << (nchw_input ? "NCHW" : "NHWC") << " input");
      ConvGeometry g;
      g.batch = batch;
      g.channels = channels;
      g.height = height;
      g.width = width;
      g.kernel = c.kernel;
      g.stride = c.stride;
      g.padding = c.padding;
      g.out_height = ConvOutputSize(height, c.kernel, c.stride, c.padding);
      g.out_width = ConvOutputSize(width, c.kernel, c.stride, c.padding);
      const int64_t out_count =
          int64_t{batch} * out_channels * g.out_height * g.out_width;
      const std::vector<float> x =
          RandomVector(int64_t{batch} * channels * height * width, 61);
      const std::vector<float> weight = RandomVector(
          int64_t{out_channels} * channels * c.kernel * c.kernel, 62);
      const std::vector<float> dy = RandomVector(out_count, 63);

      ConvGeometry nhwc = g;
      nhwc.input = NhwcLayout(channels, height, width);
      ConvGeometry nchw = g;
      nchw.input = nchw_input ? NchwLayout(channels, height, width)
                              : NhwcLayout(channels, height, width);
      nchw.nchw_output = true;
      const ConvolutionResults expected =
          RunConvolution(*device_, nhwc, out_channels, x, weight, dy);
      const ConvolutionResults actual =
          RunConvolution(*device_, nchw, out_channels, x, weight, dy);
      ExpectWithin(expected.y, actual.y, 1e-5f, "y");
      ExpectWithin(expected.weight_grad, actual.weight_grad, 1e-5f,
                   "weight gradient");
      ExpectWithin(expected.dx, actual.dx, 1e-5f, "input gradient");
    }
  }
}

// bf16 runs on NHWC activations only: a convolution with an NCHW output does
// not take the layers' bf16 operands (the model rounds for it instead).
TEST(CpuConvolutionTest, NchwOutputTakesNoBf16Operands) {
  DeviceOptions options;
  options.precision = Precision::kBf16;
  auto device = CreateDevice(options);
  ASSERT_TRUE(device.ok()) << device.status();
  ConvGeometry g;
  g.batch = 2;
  g.channels = 3;
  g.height = g.width = g.out_height = g.out_width = 5;
  g.kernel = 3;
  g.padding = 1;
  g.input = NhwcLayout(3, 5, 5);
  auto nhwc = (*device)->CreateConvolution(g, 4);
  ASSERT_TRUE(nhwc.ok()) << nhwc.status();
  EXPECT_TRUE((*nhwc)->AcceptsBf16Operands());
  g.input = NchwLayout(3, 5, 5);
  g.nchw_output = true;
  auto nchw = (*device)->CreateConvolution(g, 4);
  ASSERT_TRUE(nchw.ok()) << nchw.status();
  EXPECT_FALSE((*nchw)->AcceptsBf16Operands());
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

// The graph API's engines by default where convolutions compute NHWC by
// choice, not where NCHW is asked for or timed; a given flag wins.
TEST(DefaultCudnnGraphTest, FollowsTheLayoutAndPrecision) {
  EXPECT_TRUE(DefaultCudnnGraph(ConvolutionLayout::kNhwc, Precision::kFp32));
  EXPECT_FALSE(DefaultCudnnGraph(ConvolutionLayout::kAuto, Precision::kFp32));
  EXPECT_TRUE(DefaultCudnnGraph(ConvolutionLayout::kAuto, Precision::kTf32));
  EXPECT_TRUE(DefaultCudnnGraph(ConvolutionLayout::kAuto, Precision::kBf16));
  EXPECT_FALSE(DefaultCudnnGraph(ConvolutionLayout::kNchw, Precision::kTf32));
  EXPECT_FALSE(
      DefaultCudnnGraph(ConvolutionLayout::kFastest, Precision::kTf32));
  DeviceOptions options;
  options.precision = Precision::kTf32;
  EXPECT_TRUE(CudnnGraphOf(options));
  options.cudnn_graph = false;
  EXPECT_FALSE(CudnnGraphOf(options));
  options.precision = Precision::kFp32;
  options.cudnn_graph = true;
  EXPECT_TRUE(CudnnGraphOf(options));
  options.cudnn_graph.reset();
  EXPECT_FALSE(CudnnGraphOf(options));
}

TEST(ParseCudnnGraphTest, AutoTrueFalseAndErrors) {
  EXPECT_EQ(*ParseCudnnGraph("auto"), std::nullopt);
  EXPECT_EQ(*ParseCudnnGraph("TRUE"), std::optional<bool>(true));
  EXPECT_EQ(*ParseCudnnGraph("false"), std::optional<bool>(false));
  auto bad = ParseCudnnGraph("maybe");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--cudnn_graph=maybe"),
            std::string::npos);
  EXPECT_NE(bad.status().message().find("auto, true or false"),
            std::string::npos);
}

TEST(ParseConvolutionLayoutTest, NamesAndErrors) {
  for (ConvolutionLayout layout :
       {ConvolutionLayout::kNhwc, ConvolutionLayout::kNchw,
        ConvolutionLayout::kFastest, ConvolutionLayout::kAuto}) {
    EXPECT_EQ(*ParseConvolutionLayout(ConvolutionLayoutName(layout)), layout);
  }
  EXPECT_EQ(*ParseConvolutionLayout("NCHW"), ConvolutionLayout::kNchw);
  EXPECT_EQ(DeviceOptions().cudnn_layout, ConvolutionLayout::kAuto);
  auto bad = ParseConvolutionLayout("channels_last");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--cudnn_layout=channels_last"),
            std::string::npos);
  EXPECT_NE(bad.status().message().find("auto, nhwc, nchw or fastest"),
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
