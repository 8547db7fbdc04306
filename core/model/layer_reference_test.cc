// Every layer ResNet-18 (and the CNN's pooling) is made of, at ResNet-18's
// CIFAR shapes, on a device's float32 kernels against loops in double: the
// convolutions (the 3×3 stem reading NCHW rows, 3×3 stride 1 and 2, the 1×1
// stride-2 projection, the widest layer), batch normalisation in training
// mode over more rows per channel than one CUDA block of the statistics
// kernels covers and over more channels than one block holds, ReLU, max and
// global average pooling, the fully connected layer and the softmax
// cross-entropy. The same cases run on the CPU device and, in a CUDA build
// with a GPU, on the CUDA device (skipped otherwise, saying why).
//
// Tolerance: a float32 sum of L terms, added in any order, is within
// L·u·Σ|term| of the exact sum (u = 2⁻²⁴, the unit roundoff; Higham,
// Accuracy and Stability of Numerical Algorithms, §4.2). Each output is
// held to kSafety·L·u·M, where L is the length of the longest sum behind it
// and M the same expression evaluated on absolute values (computed beside
// the reference, in double), so summation order, blocking, FMA and cuDNN's
// transforms stay inside while a wrong index, padding, stride, layout or
// formula, off by at least one whole term, does not (the bound is checked
// to tell the two apart in RoundingBoundTest). Element-wise moves (ReLU,
// max pooling) must be exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/device/layer_geometry.h"
#include "core/model/batch_norm.h"
#include "core/model/conv2d.h"
#include "core/model/pooling.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

constexpr double kUnitRoundoff = 0x1.0p-24;
// Room for the few roundings outside the sums (a division, a square root, a
// weight reorder's none) and for cuDNN's Winograd or FFT transforms, whose
// constants exceed one.
constexpr double kSafety = 4;

// How many outputs break `bound`; the first few are reported under `what`.
int CountOutsideBound(const std::vector<float>& actual,
                      const std::vector<double>& expected,
                      const std::vector<double>& magnitude, double length,
                      const std::string& what, bool report) {
  EXPECT_EQ(actual.size(), expected.size()) << what;
  EXPECT_EQ(magnitude.size(), expected.size()) << what;
  int outside = 0;
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    // The smallest normal float keeps all-zero sums from asking for 0 exactly.
    const double bound = kSafety * length * kUnitRoundoff * magnitude[i] +
                         std::numeric_limits<float>::min();
    const double error = std::fabs(double{actual[i]} - expected[i]);
    if (!(error <= bound)) {
      if (report && outside < 5) {
        ADD_FAILURE() << what << "[" << i << "]: " << actual[i]
                      << ", float64 reference " << expected[i] << ", error "
                      << error << " > bound " << bound << " (L = " << length
                      << ", magnitude " << magnitude[i] << ")";
      }
      ++outside;
    }
  }
  return outside;
}

void ExpectWithinRoundingBound(const std::vector<float>& actual,
                               const std::vector<double>& expected,
                               const std::vector<double>& magnitude,
                               double length, const std::string& what) {
  const int outside =
      CountOutsideBound(actual, expected, magnitude, length, what, true);
  EXPECT_EQ(outside, 0) << what << ": " << outside << " of " << actual.size()
                        << " outputs outside the float32 rounding bound";
}

void ExpectExact(const std::vector<float>& actual,
                 const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int wrong = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (double{actual[i]} != expected[i] && wrong++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << actual[i]
                    << ", expected exactly " << expected[i];
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

// Uniform in [low, high), from a seed, the same on every platform.
std::vector<float> Uniform(int64_t count, uint64_t seed, double low = -1.0,
                           double high = 1.0) {
  std::mt19937_64 generator(seed);
  std::vector<float> values(count);
  for (float& v : values) {
    const double unit = static_cast<double>(generator() >> 11) * 0x1.0p-53;
    v = static_cast<float>(low + (high - low) * unit);
  }
  return values;
}

// --- The device under test -------------------------------------------------

class LayerReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DeviceOptions options;
    // "cuda": CUDA, NHWC convolutions on the legacy API's algorithms;
    // "cuda_graph": with the graph API's convolution engines tried too;
    // "cuda_nchw": CUDA convolutions on NCHW copies (--cudnn_layout=nchw);
    // "cuda_fastest": both layouts timed, the faster runs;
    // "cuda_auto": the defaults (--cudnn_layout=auto).
    options.type = GetParam() == "cpu" ? DeviceType::kCpu : DeviceType::kCuda;
    if (GetParam() != "cuda_auto") {
      options.cudnn_graph = GetParam() == "cuda_graph";
      options.cudnn_layout = ConvolutionLayout::kNhwc;
    }
    if (GetParam() == "cuda_nchw") {
      options.cudnn_layout = ConvolutionLayout::kNchw;
    } else if (GetParam() == "cuda_fastest") {
      options.cudnn_layout = ConvolutionLayout::kFastest;
    }
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(options);
    if (!device.ok() && options.type == DeviceType::kCuda &&
        (absl::IsUnimplemented(device.status()) ||
         absl::IsFailedPrecondition(device.status()))) {
      GTEST_SKIP() << "no CUDA device to check: " << device.status();
    }
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
  }

  template <typename T>
  T* Upload(const std::vector<T>& host) {
    absl::StatusOr<T*> buffer =
        device_->Allocate<T>(static_cast<int64_t>(host.size()));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return nullptr;
    const absl::Status copied =
        device_->CopyToDevice(*buffer, host.data(), host.size() * sizeof(T));
    EXPECT_TRUE(copied.ok()) << copied;
    return *buffer;
  }

  float* Zeros(int64_t count) { return Upload(std::vector<float>(count)); }

  template <typename T>
  std::vector<T> Download(const T* buffer, int64_t count) {
    std::vector<T> host(count);
    const absl::Status copied =
        device_->CopyToHost(host.data(), buffer, count * sizeof(T));
    EXPECT_TRUE(copied.ok()) << copied;
    return host;
  }

  std::unique_ptr<Device> device_;
};

// --- Convolutions ------------------------------------------------------------

struct ConvCase {
  const char* name;
  int images, in, out, kernel, stride, padding, size;
  bool nchw_input;
};

// PyTorch's Conv2d (cross-correlation, zero padding, no bias) in double: y
// and dy NHWC, x laid out as g.input, weight [out][in][k][k]; beside each
// output, the same sum over absolute values.
struct ConvReference {
  std::vector<double> y, dweight, dx;
  std::vector<double> y_abs, dweight_abs, dx_abs;
};

ConvReference DirectConvolution(const ConvGeometry& g, int out,
                                const std::vector<float>& x,
                                const std::vector<float>& weight,
                                const std::vector<float>& dy) {
  const int k = g.kernel;
  const int in = g.channels;
  // The weight as [kh][kw][in][out], so the innermost loop runs over
  // consecutive outputs.
  std::vector<double> w(weight.size()), dw(weight.size()),
      dw_abs(weight.size());
  for (int o = 0; o < out; ++o)
    for (int c = 0; c < in; ++c)
      for (int kh = 0; kh < k; ++kh)
        for (int kw = 0; kw < k; ++kw) {
          w[((int64_t{kh} * k + kw) * in + c) * out + o] =
              weight[((int64_t{o} * in + c) * k + kh) * k + kw];
        }
  ConvReference r;
  const int64_t rows = g.column_rows();
  r.y.assign(rows * out, 0.0);
  r.y_abs.assign(rows * out, 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dx_abs.assign(x.size(), 0.0);
  for (int b = 0; b < g.batch; ++b)
    for (int oh = 0; oh < g.out_height; ++oh)
      for (int ow = 0; ow < g.out_width; ++ow) {
        const int64_t row = (int64_t{b} * g.out_height + oh) * g.out_width + ow;
        double* y = &r.y[row * out];
        double* y_abs = &r.y_abs[row * out];
        const float* grad = &dy[row * out];
        for (int kh = 0; kh < k; ++kh)
          for (int kw = 0; kw < k; ++kw) {
            const int h = oh * g.stride - g.padding + kh;
            const int wi = ow * g.stride - g.padding + kw;
            if (h < 0 || h >= g.height || wi < 0 || wi >= g.width) continue;
            for (int c = 0; c < in; ++c) {
              const int64_t xi = b * g.input.batch + c * g.input.channel +
                                 h * g.input.row + wi * g.input.column;
              const double xv = x[xi];
              const int64_t base = ((int64_t{kh} * k + kw) * in + c) * out;
              double dx = 0.0, dx_abs = 0.0;
              for (int o = 0; o < out; ++o) {
                const double wv = w[base + o];
                const double gv = grad[o];
                y[o] += xv * wv;
                y_abs[o] += std::fabs(xv * wv);
                dw[base + o] += gv * xv;
                dw_abs[base + o] += std::fabs(gv * xv);
                dx += gv * wv;
                dx_abs += std::fabs(gv * wv);
              }
              r.dx[xi] += dx;
              r.dx_abs[xi] += dx_abs;
            }
          }
      }
  r.dweight.assign(weight.size(), 0.0);
  r.dweight_abs.assign(weight.size(), 0.0);
  for (int o = 0; o < out; ++o)
    for (int c = 0; c < in; ++c)
      for (int kh = 0; kh < k; ++kh)
        for (int kw = 0; kw < k; ++kw) {
          const int64_t from = ((int64_t{kh} * k + kw) * in + c) * out + o;
          const int64_t to = ((int64_t{o} * in + c) * k + kh) * k + kw;
          r.dweight[to] = dw[from];
          r.dweight_abs[to] = dw_abs[from];
        }
  return r;
}

TEST_P(LayerReferenceTest, ConvolutionsAtResNet18Shapes) {
  const ConvCase cases[] = {
      {"conv1 (stem, NCHW rows)", 2, 3, 64, 3, 1, 1, 32, true},
      {"layer1 3x3/1", 1, 64, 64, 3, 1, 1, 32, false},
      {"layer2.0.conv1 3x3/2", 2, 64, 128, 3, 2, 1, 32, false},
      {"layer2.0.downsample 1x1/2", 2, 64, 128, 1, 2, 0, 32, false},
      {"layer3.0.conv1 3x3/2", 2, 128, 256, 3, 2, 1, 16, false},
      {"layer4 3x3/1", 1, 512, 512, 3, 1, 1, 4, false},
  };
  uint64_t seed = 100;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    Conv2d conv("conv", {c.in, c.out, c.kernel, c.stride, c.padding, false});
    const ImageLayout layout = c.nchw_input ? NchwLayout(c.in, c.size, c.size)
                                            : NhwcLayout(c.in, c.size, c.size);
    const ConvGeometry g = conv.Geometry(c.images, c.size, c.size, layout);
    const std::vector<float> weight = Uniform(conv.weight_count(), ++seed);
    const std::vector<float> x = Uniform(g.input_count(), ++seed);
    const int64_t outputs = g.column_rows() * c.out;
    const std::vector<float> dy = Uniform(outputs, ++seed);

    float* weight_grad = Zeros(conv.weight_count());
    conv.Bind(*device_, Upload(weight), weight_grad, nullptr, nullptr);
    const absl::Status prepared = conv.Prepare(g);
    ASSERT_TRUE(prepared.ok()) << prepared;
    if (conv.uses_columns()) {
      const int64_t capacity = conv.ColumnsPerImage(c.size, c.size) * c.images;
      conv.BindColumns(Zeros(capacity), capacity);
    }
    const float* device_x = Upload(x);
    float* y = Zeros(outputs);
    float* dx = Zeros(g.input_count());
    conv.Forward(device_x, g, y);
    conv.BackwardWeights(device_x, g, Upload(dy));
    conv.BackwardInput(g, Upload(dy), dx);
    const absl::Status synced = device_->Synchronize();
    ASSERT_TRUE(synced.ok()) << synced;

    const ConvReference r = DirectConvolution(g, c.out, x, weight, dy);
    const double taps = static_cast<double>(c.kernel) * c.kernel;
    ExpectWithinRoundingBound(Download(y, outputs), r.y, r.y_abs, c.in * taps,
                              "y");
    ExpectWithinRoundingBound(
        Download(weight_grad, conv.weight_count()), r.dweight, r.dweight_abs,
        static_cast<double>(c.images) * g.out_height * g.out_width,
        "weight gradient");
    ExpectWithinRoundingBound(Download(dx, g.input_count()), r.dx, r.dx_abs,
                              c.out * taps, "input gradient");
  }
}

// --- Batch normalisation, training mode --------------------------------------

struct NormCase {
  const char* name;
  int64_t rows;
  int channels;
  int64_t plane;  // pixels per image, for the NCHW run: rows = images·plane
};

// An NHWC tensor [rows × channels] as NCHW [rows/plane × channels × plane]
// (`to_nchw`), or such an NCHW tensor back as NHWC.
std::vector<float> Transposed(const std::vector<float>& values, int channels,
                              int64_t plane, bool to_nchw) {
  std::vector<float> out(values.size());
  const int64_t rows = static_cast<int64_t>(values.size()) / channels;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t image = r / plane, pixel = r % plane;
    for (int c = 0; c < channels; ++c) {
      const int64_t nhwc = r * channels + c;
      const int64_t nchw = (image * channels + c) * plane + pixel;
      out[to_nchw ? nchw : nhwc] = values[to_nchw ? nhwc : nchw];
    }
  }
  return out;
}
std::vector<float> NhwcToNchw(const std::vector<float>& nhwc, int channels,
                              int64_t plane) {
  return Transposed(nhwc, channels, plane, /*to_nchw=*/true);
}
std::vector<float> NchwToNhwc(const std::vector<float>& nchw, int channels,
                              int64_t plane) {
  return Transposed(nchw, channels, plane, /*to_nchw=*/false);
}

TEST_P(LayerReferenceTest, BatchNormTrainingAtResNet18Shapes) {
  // 4096 rows of 64 channels: on CUDA a sliced plan (launch_config.h's
  // PlanChannelSums: 2 channel tiles × 16 row slices, then the finishing
  // kernel adds the slices). 64 rows of 512 channels: the deepest layer, where
  // the biased and unbiased variances differ most, one pass of 16 channel
  // tiles. 4173 rows of 96 channels: slices of unequal length (the last one
  // short) and a channel tile only partly used. Each case runs on NHWC and
  // on NCHW activations (ActivationLayout; `plane` > 1): on CUDA the NCHW
  // plans (launch_config.h's PlanPlaneSums) of one block per channel, and,
  // for 32 images of 32x32, 4 image slices per channel.
  const NormCase cases[] = {
      {"bn1 / layer1 (4 images of 32x32, 64 channels)", 4 * 32 * 32, 64, 1024},
      {"layer4 (4 images of 4x4, 512 channels)", 4 * 4 * 4, 512, 16},
      {"odd rows and channels (sliced, short last slice)", 4173, 96, 107},
      {"layer1 at batch 32 (NCHW: image slices)", 32 * 32 * 32, 64, 1024},
  };
  uint64_t seed = 200;
  for (const NormCase& nc : cases) {
    SCOPED_TRACE(nc.name);
    const int64_t rows = nc.rows;
    const int channels = nc.channels;
    const int64_t count = rows * channels;
    // Channels of different means and spreads, as after a convolution.
    std::vector<float> x = Uniform(count, ++seed);
    for (int64_t i = 0; i < count; ++i) {
      const int c = static_cast<int>(i % channels);
      x[i] = x[i] * static_cast<float>(1 + c % 3) + 0.25f * (c % 5);
    }
    const std::vector<float> dy = Uniform(count, ++seed);
    const std::vector<float> gamma = Uniform(channels, ++seed, 0.5, 1.5);
    const std::vector<float> beta = Uniform(channels, ++seed);

    // The reference, per channel, with each output's magnitude: the same
    // formula on absolute values, widened by the relative error the batch
    // statistics carry into it.
    const double n = static_cast<double>(rows);
    const double m = BatchNorm::kMomentum;
    std::vector<double> ry(count), ry_abs(count), rdx(count), rdx_abs(count);
    std::vector<double> rdgamma(channels), rdgamma_abs(channels),
        rdbeta(channels), rdbeta_abs(channels);
    std::vector<double> running(2 * channels), running_abs(2 * channels);
    for (int c = 0; c < channels; ++c) {
      double sum = 0, sum_abs = 0, sum_squares = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const double v = x[r * channels + c];
        sum += v;
        sum_abs += std::fabs(v);
        sum_squares += v * v;
      }
      const double mean = sum / n;
      double variance = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const double d = x[r * channels + c] - mean;
        variance += d * d;
      }
      variance /= n;
      const double inv_std = 1.0 / std::sqrt(variance + BatchNorm::kEpsilon);
      // Relative error of the statistics: the mean's, and the variance's
      // (from sums of squares that may be far larger than the variance).
      const double mean_spread = sum_abs / n * inv_std;
      const double variance_spread =
          (sum_squares / n + mean * mean) / (variance + BatchNorm::kEpsilon);
      const double g = gamma[c];
      double dbeta = 0, dbeta_abs = 0, dgamma = 0, dgamma_abs = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r * channels + c;
        const double x_hat = (x[i] - mean) * inv_std;
        ry[i] = g * x_hat + beta[c];
        ry_abs[i] = std::fabs(g) * (std::fabs(x_hat) * (1 + variance_spread) +
                                    mean_spread) +
                    std::fabs(beta[c]);
        dbeta += dy[i];
        dbeta_abs += std::fabs(dy[i]);
        dgamma += dy[i] * x_hat;
        dgamma_abs += std::fabs(dy[i]) *
                      (std::fabs(x_hat) * (1 + variance_spread) + mean_spread);
      }
      rdbeta[c] = dbeta;
      rdbeta_abs[c] = dbeta_abs;
      rdgamma[c] = dgamma;
      rdgamma_abs[c] = dgamma_abs;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r * channels + c;
        const double x_hat = (x[i] - mean) * inv_std;
        rdx[i] = g * inv_std * (dy[i] - dbeta / n - x_hat * dgamma / n);
        rdx_abs[i] = std::fabs(g) * inv_std *
                     ((std::fabs(dy[i]) + dbeta_abs / n +
                       (std::fabs(x_hat) + mean_spread) * dgamma_abs / n) *
                          (1 + variance_spread) +
                      std::fabs(x_hat) * variance_spread * dgamma_abs / n);
      }
      // PyTorch's running statistics from 0 and 1: the batch's mean and
      // unbiased variance, weighted by the momentum.
      running[c] = m * mean;
      running_abs[c] = m * sum_abs / n;
      running[channels + c] = (1 - m) + m * variance * n / (n - 1);
      running_abs[channels + c] =
          (1 - m) + m * n / (n - 1) * (sum_squares / n + mean * mean) *
                        (1 + variance_spread);
    }
    for (const int64_t plane : {int64_t{1}, nc.plane}) {
      SCOPED_TRACE(plane == 1 ? "NHWC" : "NCHW");
      ASSERT_EQ(rows % plane, 0);
      BatchNorm norm("bn", channels);
      float* gamma_grad = Zeros(channels);
      float* beta_grad = Zeros(channels);
      float* buffers = Zeros(norm.buffer_count());
      norm.Bind(*device_, Upload(gamma), Upload(beta), gamma_grad, beta_grad,
                buffers, Zeros(2 * int64_t{channels}));
      const float* device_x =
          Upload(plane == 1 ? x : NhwcToNchw(x, channels, plane));
      const float* device_dy =
          Upload(plane == 1 ? dy : NhwcToNchw(dy, channels, plane));
      float* y = Zeros(count);
      float* dx = Zeros(count);
      norm.ForwardTraining(device_x, rows, y, {}, plane);
      norm.Backward(device_x, device_dy, rows, dx, nullptr, nullptr, plane);
      const absl::Status synced = device_->Synchronize();
      ASSERT_TRUE(synced.ok()) << synced;
      const auto as_nhwc = [&](const float* buffer) {
        const std::vector<float> values = Download(buffer, count);
        return plane == 1 ? values : NchwToNhwc(values, channels, plane);
      };
      ExpectWithinRoundingBound(as_nhwc(y), ry, ry_abs, n, "y");
      ExpectWithinRoundingBound(Download(beta_grad, channels), rdbeta,
                                rdbeta_abs, n, "beta gradient");
      ExpectWithinRoundingBound(Download(gamma_grad, channels), rdgamma,
                                rdgamma_abs, n, "gamma gradient");
      ExpectWithinRoundingBound(as_nhwc(dx), rdx, rdx_abs, n, "input gradient");
      ExpectWithinRoundingBound(Download(buffers, 2 * int64_t{channels}),
                                running, running_abs, n,
                                "running mean and variance");
    }
  }
}

// --- ReLU, pooling ---------------------------------------------------------

TEST_P(LayerReferenceTest, ReluIsExact) {
  const int64_t count = 2 * 32 * 32 * 64;  // layer1's activations
  const std::vector<float> x = Uniform(count, 300);
  const std::vector<float> dy = Uniform(count, 301);
  float* y = Upload(x);
  device_->ReluForward(y, count);
  float* grad = Upload(dy);
  device_->ReluBackward(y, grad, count);
  std::vector<double> ry(count), rdx(count);
  for (int64_t i = 0; i < count; ++i) {
    ry[i] = std::max(double{x[i]}, 0.0);
    rdx[i] = x[i] > 0 ? dy[i] : 0.0;
  }
  ExpectExact(Download(y, count), ry, "relu y");
  ExpectExact(Download(grad, count), rdx, "relu input gradient");
}

// The CNN's 2×2 stride-2 max pooling (ResNet-18's CIFAR form has none).
TEST_P(LayerReferenceTest, MaxPoolingIsExact) {
  MaxPool2d pool(2, 2);
  const PoolGeometry g = pool.Geometry(2, 32, 28, 28);
  const std::vector<float> x = Uniform(g.input_count(), 310);
  const std::vector<float> dy = Uniform(g.output_count(), 311);
  float* y = Zeros(g.output_count());
  absl::StatusOr<int32_t*> where = device_->Allocate<int32_t>(g.output_count());
  ASSERT_TRUE(where.ok()) << where.status();
  float* dx = Zeros(g.input_count());
  const float* device_x = Upload(x);
  pool.Forward(*device_, device_x, g, y, *where);
  pool.Backward(*device_, Upload(dy), *where, g, dx);
  std::vector<double> ry(g.output_count()), rdx(g.input_count(), 0.0);
  for (int b = 0; b < g.batch; ++b)
    for (int oh = 0; oh < g.out_height; ++oh)
      for (int ow = 0; ow < g.out_width; ++ow)
        for (int c = 0; c < g.channels; ++c) {
          int64_t best = -1;
          for (int kh = 0; kh < g.kernel; ++kh)
            for (int kw = 0; kw < g.kernel; ++kw) {
              const int64_t i =
                  ((int64_t{b} * g.height + oh * g.stride + kh) * g.width +
                   ow * g.stride + kw) *
                      g.channels +
                  c;
              if (best < 0 || x[i] > x[best]) best = i;
            }
          const int64_t out =
              ((int64_t{b} * g.out_height + oh) * g.out_width + ow) *
                  g.channels +
              c;
          ry[out] = x[best];
          rdx[best] += dy[out];
        }
  ExpectExact(Download(y, g.output_count()), ry, "max pool y");
  ExpectExact(Download(dx, g.input_count()), rdx, "max pool input gradient");
}

// ResNet-18's head: 4×4 pixels of 512 channels averaged per image.
TEST_P(LayerReferenceTest, GlobalAveragePoolingAtResNet18Shape) {
  const int images = 16, pixels = 16, channels = 512;
  const std::vector<float> x =
      Uniform(int64_t{images} * pixels * channels, 320);
  const std::vector<float> dy = Uniform(int64_t{images} * channels, 321);
  float* y = Zeros(int64_t{images} * channels);
  float* dx = Zeros(int64_t{images} * pixels * channels);
  GlobalAvgPoolForward(*device_, Upload(x), images, pixels, channels, y);
  GlobalAvgPoolBackward(*device_, Upload(dy), images, pixels, channels, dx);
  // The same on NCHW activations: the same sums in the same order.
  float* y_nchw = Zeros(int64_t{images} * channels);
  float* dx_nchw = Zeros(int64_t{images} * pixels * channels);
  GlobalAvgPoolForward(*device_, Upload(NhwcToNchw(x, channels, pixels)),
                       images, pixels, channels, y_nchw,
                       ActivationLayout::kNchw);
  GlobalAvgPoolBackward(*device_, Upload(dy), images, pixels, channels, dx_nchw,
                        ActivationLayout::kNchw);
  std::vector<double> ry(int64_t{images} * channels, 0.0), ry_abs(ry.size());
  std::vector<double> rdx(x.size()), rdx_abs(x.size());
  for (int b = 0; b < images; ++b)
    for (int c = 0; c < channels; ++c) {
      double sum = 0, sum_abs = 0;
      for (int s = 0; s < pixels; ++s) {
        const double v = x[(int64_t{b} * pixels + s) * channels + c];
        sum += v;
        sum_abs += std::fabs(v);
        rdx[(int64_t{b} * pixels + s) * channels + c] =
            dy[int64_t{b} * channels + c] / double{pixels};
        rdx_abs[(int64_t{b} * pixels + s) * channels + c] =
            std::fabs(dy[int64_t{b} * channels + c]) / pixels;
      }
      ry[int64_t{b} * channels + c] = sum / pixels;
      ry_abs[int64_t{b} * channels + c] = sum_abs / pixels;
    }
  ExpectWithinRoundingBound(Download(y, ry.size()), ry, ry_abs, pixels + 1,
                            "global average pool y");
  ExpectWithinRoundingBound(Download(dx, rdx.size()), rdx, rdx_abs, 1,
                            "global average pool input gradient");
  EXPECT_EQ(Download(y_nchw, ry.size()), Download(y, ry.size()));
  EXPECT_EQ(NchwToNhwc(Download(dx_nchw, rdx.size()), channels, pixels),
            Download(dx, rdx.size()));
}

// --- The fully connected layer and the loss --------------------------------

// ResNet-18's fc as the model runs it (core/model/resnet.cc): y = x·Wᵀ + b,
// dW = dyᵀ·x, dx = dy·W, db = Σ_rows dy.
TEST_P(LayerReferenceTest, FullyConnectedAtResNet18Shape) {
  const int batch = 16, features = 512, classes = 10;
  const std::vector<float> x = Uniform(int64_t{batch} * features, 330);
  const std::vector<float> w = Uniform(int64_t{classes} * features, 331);
  const std::vector<float> bias = Uniform(classes, 332);
  const std::vector<float> dy = Uniform(int64_t{batch} * classes, 333);
  const float* device_x = Upload(x);
  const float* device_w = Upload(w);
  const float* device_dy = Upload(dy);
  float* y = Zeros(int64_t{batch} * classes);
  float* dw = Zeros(w.size());
  float* dx = Zeros(x.size());
  float* db = Zeros(classes);
  device_->Gemm(false, true, batch, classes, features, 1.0f, device_x, device_w,
                0.0f, y);
  device_->AddRowBias(y, Upload(bias), batch, classes);
  device_->Gemm(true, false, classes, features, batch, 1.0f, device_dy,
                device_x, 0.0f, dw);
  device_->Gemm(false, false, batch, features, classes, 1.0f, device_dy,
                device_w, 0.0f, dx);
  device_->SumRows(device_dy, db, batch, classes);

  std::vector<double> ry(batch * classes), ry_abs(batch * classes);
  std::vector<double> rdw(w.size(), 0.0), rdw_abs(w.size(), 0.0);
  std::vector<double> rdx(x.size(), 0.0), rdx_abs(x.size(), 0.0);
  std::vector<double> rdb(classes, 0.0), rdb_abs(classes, 0.0);
  for (int r = 0; r < batch; ++r)
    for (int o = 0; o < classes; ++o) {
      double sum = bias[o], sum_abs = std::fabs(bias[o]);
      const double g = dy[int64_t{r} * classes + o];
      for (int f = 0; f < features; ++f) {
        const double xv = x[int64_t{r} * features + f];
        const double wv = w[int64_t{o} * features + f];
        sum += xv * wv;
        sum_abs += std::fabs(xv * wv);
        rdw[int64_t{o} * features + f] += g * xv;
        rdw_abs[int64_t{o} * features + f] += std::fabs(g * xv);
        rdx[int64_t{r} * features + f] += g * wv;
        rdx_abs[int64_t{r} * features + f] += std::fabs(g * wv);
      }
      ry[int64_t{r} * classes + o] = sum;
      ry_abs[int64_t{r} * classes + o] = sum_abs;
      rdb[o] += g;
      rdb_abs[o] += std::fabs(g);
    }
  ExpectWithinRoundingBound(Download(y, ry.size()), ry, ry_abs, features + 1,
                            "fc y");
  ExpectWithinRoundingBound(Download(dw, w.size()), rdw, rdw_abs, batch,
                            "fc weight gradient");
  ExpectWithinRoundingBound(Download(dx, x.size()), rdx, rdx_abs, classes,
                            "fc input gradient");
  ExpectWithinRoundingBound(Download(db, classes), rdb, rdb_abs, batch,
                            "fc bias gradient");
}

// Softmax cross-entropy averaged over the batch, and d(loss)/d(logits).
// L counts the sum of exponentials and the batch mean, plus a few roundings
// for expf and logf (each within a few units in the last place).
TEST_P(LayerReferenceTest, SoftmaxCrossEntropyAtResNet18Shape) {
  const int batch = 16, classes = 10;
  std::vector<float> logits = Uniform(int64_t{batch} * classes, 340, -4, 4);
  std::vector<int32_t> labels(batch);
  for (int r = 0; r < batch; ++r) labels[r] = (7 * r + 3) % classes;
  float* dlogits = Zeros(logits.size());
  float* loss = Zeros(1);
  device_->SoftmaxCrossEntropy(Upload(logits), Upload(labels), batch, classes,
                               dlogits, loss);
  std::vector<double> rd(logits.size()), rd_abs(logits.size());
  double rloss = 0, rloss_abs = 0;
  for (int r = 0; r < batch; ++r) {
    const float* z = &logits[int64_t{r} * classes];
    const double top = *std::max_element(z, z + classes);
    double sum = 0;
    for (int j = 0; j < classes; ++j) sum += std::exp(z[j] - top);
    const double log_sum = std::log(sum);
    rloss += (log_sum - (z[labels[r]] - top)) / batch;
    rloss_abs += (log_sum + std::fabs(z[labels[r]] - top) + 1) / batch;
    for (int j = 0; j < classes; ++j) {
      const double p = std::exp(z[j] - top) / sum;
      const double target = j == labels[r] ? 1.0 : 0.0;
      rd[int64_t{r} * classes + j] = (p - target) / batch;
      rd_abs[int64_t{r} * classes + j] = (p + target) / batch;
    }
  }
  const double transcendental = 8;
  ExpectWithinRoundingBound(Download(dlogits, logits.size()), rd, rd_abs,
                            classes + transcendental, "dlogits");
  ExpectWithinRoundingBound(Download(loss, 1), {rloss}, {rloss_abs},
                            batch + classes + transcendental, "loss");
}

INSTANTIATE_TEST_SUITE_P(Devices, LayerReferenceTest,
                         ::testing::Values("cpu", "cuda", "cuda_graph",
                                           "cuda_nchw", "cuda_fastest",
                                           "cuda_auto"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// --- The bound itself --------------------------------------------------------

// The tolerance tells summation order from a wrong kernel: float32 dot
// products of ResNet-18's fc length, added forwards, backwards and pairwise,
// all pass; the same sums missing one term (a wrong index or padding) or with
// one term counted twice fail wherever that term is not tiny: in most outputs.
TEST(RoundingBoundTest, PassesAnyOrderAndFailsAMissingTerm) {
  const int outputs = 200, length = 512;
  const std::vector<float> a = Uniform(int64_t{outputs} * length, 400);
  const std::vector<float> b = Uniform(int64_t{outputs} * length, 401);
  std::vector<double> exact(outputs), magnitude(outputs);
  std::vector<float> forwards(outputs), backwards(outputs), pairwise(outputs),
      missing(outputs), doubled(outputs);
  for (int o = 0; o < outputs; ++o) {
    const float* x = &a[int64_t{o} * length];
    const float* y = &b[int64_t{o} * length];
    std::vector<float> products(length);
    for (int i = 0; i < length; ++i) {
      exact[o] += double{x[i]} * y[i];
      magnitude[o] += std::fabs(double{x[i]} * y[i]);
      products[i] = x[i] * y[i];
    }
    float sum = 0;
    for (int i = 0; i < length; ++i) sum += products[i];
    forwards[o] = sum;
    sum = 0;
    for (int i = length - 1; i >= 0; --i) sum += products[i];
    backwards[o] = sum;
    std::vector<float> level = products;
    while (level.size() > 1) {
      std::vector<float> next;
      for (size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(level[i] + level[i + 1]);
      if (level.size() % 2 == 1) next.push_back(level.back());
      level = next;
    }
    pairwise[o] = level[0];
    const int skipped = (o * 37) % length;
    missing[o] = forwards[o] - products[skipped];
    doubled[o] = forwards[o] + products[skipped];
  }
  for (const auto* sums : {&forwards, &backwards, &pairwise}) {
    EXPECT_EQ(CountOutsideBound(*sums, exact, magnitude, length, "sum", true),
              0);
  }
  EXPECT_GE(CountOutsideBound(missing, exact, magnitude, length, "", false),
            outputs * 3 / 4);
  EXPECT_GE(CountOutsideBound(doubled, exact, magnitude, length, "", false),
            outputs * 3 / 4);
}

}  // namespace
}  // namespace gradsync
