// The arithmetic of the device kernels, per element and per row, written once
// for both backends: CpuDevice (cpu_device.cc) loops over these functions, and
// the CUDA kernels (cuda_kernels.cu) call the same functions from each thread.
// No GPU is lent to this project's machines, so this is how the GPU's
// arithmetic gets tested: kernel_math_test, cpu_device_test and the training
// tests run it on the CPU.
//
// Same bits on both devices, given the same inputs:
//   - +, -, *, / and sqrt are IEEE-754 single (or double) precision rounded
//     to nearest on both. GCC on x86-64 evaluates float in SSE registers (no
//     excess precision); the :device target adds -ffp-contract=off so that a
//     build for an FMA-capable -march keeps a*b+c two roundings. nvcc would
//     fuse a*b+c into one multiply-add (one rounding), so cuda_kernels.cu is
//     compiled with --fmad=false; nvcc's default -prec-div=true and
//     -prec-sqrt=true give IEEE division and square root (--use_fast_math
//     would undo all three).
//   - Every sum whose order affects the result is added in the order written
//     here (SumInOrder), on the GPU by one lane.
// Not the same bits: expf and log come from each platform's math library
// (glibc; CUDA's libdevice), which differ by an ulp or two, so softmax
// gradients and the loss agree to those ulps. SumRows and the batch loss are
// summed in a different (fixed, deterministic) order on each device; see
// SumInOrder's comment for why.
#pragma once

#include <math.h>

#include <cstdint>

// Defines GS_HOST_DEVICE (__host__ __device__ under nvcc, nothing for GCC).
#include "core/device/layer_geometry.h"

namespace gradsync {
namespace kernel_math {

// --- Layers ------------------------------------------------------------------

// y[r, c] + bias[c].
GS_HOST_DEVICE inline float AddBias(float y, float bias) { return y + bias; }

// max(x, 0); NaN becomes 0 (the comparison is false), on both devices.
GS_HOST_DEVICE inline float Relu(float x) { return x > 0.0f ? x : 0.0f; }

// The gradient through a ReLU whose output was y: dy where y > 0, else 0.
GS_HOST_DEVICE inline float ReluGradient(float y, float dy) {
  return y > 0.0f ? dy : 0.0f;
}

// x · alpha (gradient averaging, loss scaling).
GS_HOST_DEVICE inline float Scaled(float x, float alpha) { return x * alpha; }

// --- Softmax cross-entropy, one row of `classes` logits ----------------------
// loss_row = -log softmax(x)[label] and dlogits_row = (softmax(x) - onehot) /
// rows, so that the batch's mean loss has dlogits as its gradient.

// 1/rows, the factor of every gradient entry.
GS_HOST_DEVICE inline float InverseRows(int rows) {
  return 1.0f / static_cast<float>(rows);
}

// std::max's choice: `a` unless a < b. The maximum is exact, so the order in
// which lanes or loop steps compare does not matter (for numbers; a NaN logit
// makes the row's loss NaN either way).
GS_HOST_DEVICE inline float MaxOf(float a, float b) { return a < b ? b : a; }

// exp(x - max(row)): in (0, 1], so large logits cannot overflow exp, and the
// row's largest term is exactly 1, so the row's sum is at least 1.
GS_HOST_DEVICE inline float ShiftedExp(float x, float row_max) {
  return expf(x - row_max);
}

// values[0] + values[1] + ... in double, left to right. Both devices sum a
// row's exponentials with this (the GPU in one lane: a row has few classes,
// 10 for Fashion-MNIST, so a serial sum costs less than a warp reduction's
// shuffles, and it keeps the CPU's order). The sums that stay per device,
// and why: SumRows (the CPU's row-by-row order is serial per column; a GPU
// following it would have one thread per column for a whole batch) and the
// batch loss (a double sum of one term per row, rounded once to float, where
// the order shows only at double precision).
GS_HOST_DEVICE inline double SumInOrder(const float* values, int count) {
  double sum = 0.0;
  for (int i = 0; i < count; ++i) sum += values[i];
  return sum;
}

// The factor that turns a shifted exponential into its gradient entry:
// softmax / rows = exp(x - max) · (1 / sum) / rows.
GS_HOST_DEVICE inline float SoftmaxGradientScale(double exp_sum,
                                                 float inv_rows) {
  return static_cast<float>(1.0 / exp_sum) * inv_rows;
}

// One dlogits entry from its shifted exponential: softmax / rows, minus 1/rows
// at the label.
GS_HOST_DEVICE inline float SoftmaxGradient(float shifted_exp, float scale,
                                            bool is_label, float inv_rows) {
  float gradient = shifted_exp * scale;
  if (is_label) gradient -= inv_rows;
  return gradient;
}

// -log softmax(x)[label] = log(sum) - (x[label] - max), in double. A label
// outside [0, classes) gives NaN rather than a read out of bounds, so that a
// bad data set shows in the logged loss instead of training on garbage.
GS_HOST_DEVICE inline double CrossEntropyRowLoss(double exp_sum,
                                                 const float* row,
                                                 float row_max, int32_t label,
                                                 int classes) {
  if (label < 0 || label >= classes) return nan("");
  return log(exp_sum) - static_cast<double>(row[label] - row_max);
}

// The batch's mean loss from the double sum of its rows' losses.
GS_HOST_DEVICE inline float MeanLoss(double loss_sum, int rows) {
  return static_cast<float>(loss_sum / rows);
}

// One row end to end, as the CPU runs it; the GPU runs the same steps with a
// warp's lanes sharing the element-wise ones (max, exponentials, gradient)
// and lane 0 doing the sum. Writes the row's gradient to `gradient` (which
// must not overlap `row`) and returns the row's loss.
GS_HOST_DEVICE inline double SoftmaxCrossEntropyRow(const float* row,
                                                    int32_t label, int classes,
                                                    float inv_rows,
                                                    float* gradient) {
  float row_max = row[0];
  for (int c = 1; c < classes; ++c) row_max = MaxOf(row_max, row[c]);
  for (int c = 0; c < classes; ++c) gradient[c] = ShiftedExp(row[c], row_max);
  const double exp_sum = SumInOrder(gradient, classes);
  const float scale = SoftmaxGradientScale(exp_sum, inv_rows);
  for (int c = 0; c < classes; ++c) {
    gradient[c] = SoftmaxGradient(gradient[c], scale, c == label, inv_rows);
  }
  return CrossEntropyRowLoss(exp_sum, row, row_max, label, classes);
}

// --- Convolution as im2col + GEMM (layer_geometry.h)
// --------------------------

// Column-matrix entry (row, col) of im2col: the input value under kernel tap
// (c, kh, kw) of output pixel (b, oh, ow), or 0 in the padding. The GPU runs
// one thread per entry.
GS_HOST_DEVICE inline float Im2ColValue(const float* input,
                                        const ConvGeometry& g, int64_t row,
                                        int64_t col) {
  const int64_t ow = row % g.out_width;
  const int64_t oh = row / g.out_width % g.out_height;
  const int64_t b = row / (int64_t{g.out_width} * g.out_height);
  const int64_t kw = col % g.kernel;
  const int64_t kh = col / g.kernel % g.kernel;
  const int64_t c = col / (int64_t{g.kernel} * g.kernel);
  const int64_t ih = oh * g.stride - g.padding + kh;
  const int64_t iw = ow * g.stride - g.padding + kw;
  if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) return 0.0f;
  return input[b * g.input.batch + c * g.input.channel + ih * g.input.row +
               iw * g.input.column];
}

// One whole row of the column matrix (the CPU's loop: the row's pixel is
// decoded once, not per entry). Same values as Im2ColValue, entry by entry.
GS_HOST_DEVICE inline void Im2ColRow(const float* input, const ConvGeometry& g,
                                     int64_t row, float* out) {
  const int64_t ow = row % g.out_width;
  const int64_t oh = row / g.out_width % g.out_height;
  const int64_t b = row / (int64_t{g.out_width} * g.out_height);
  const float* image = input + b * g.input.batch;
  const int64_t ih0 = oh * g.stride - g.padding;
  const int64_t iw0 = ow * g.stride - g.padding;
  int64_t col = 0;
  for (int c = 0; c < g.channels; ++c) {
    const float* plane = image + c * g.input.channel;
    for (int kh = 0; kh < g.kernel; ++kh) {
      const int64_t ih = ih0 + kh;
      const bool row_inside = ih >= 0 && ih < g.height;
      for (int kw = 0; kw < g.kernel; ++kw, ++col) {
        const int64_t iw = iw0 + kw;
        out[col] = row_inside && iw >= 0 && iw < g.width
                       ? plane[ih * g.input.row + iw * g.input.column]
                       : 0.0f;
      }
    }
  }
}

// col2im for one input element (b, c, h, w): the sum of the column-matrix
// entries that im2col copied from it, i.e. the input gradient of the
// convolution given the gradient of its column matrix. A gather (each input
// element sums its own taps) rather than a scatter, so the GPU needs no
// atomics and the result is deterministic. Taps are added with kh and kw
// descending, which is the order of increasing output pixel: the CPU's
// row-by-row scatter (cpu_device.cc) adds the same terms in the same order,
// so both devices give the same bits.
GS_HOST_DEVICE inline float Col2ImValue(const float* columns,
                                        const ConvGeometry& g, int64_t b,
                                        int64_t c, int64_t h, int64_t w) {
  const int64_t cols = g.column_cols();
  float sum = 0.0f;
  for (int kh = g.kernel - 1; kh >= 0; --kh) {
    const int64_t oh_scaled = h + g.padding - kh;
    if (oh_scaled < 0 || oh_scaled % g.stride != 0) continue;
    const int64_t oh = oh_scaled / g.stride;
    if (oh >= g.out_height) continue;
    for (int kw = g.kernel - 1; kw >= 0; --kw) {
      const int64_t ow_scaled = w + g.padding - kw;
      if (ow_scaled < 0 || ow_scaled % g.stride != 0) continue;
      const int64_t ow = ow_scaled / g.stride;
      if (ow >= g.out_width) continue;
      const int64_t row = (b * g.out_height + oh) * g.out_width + ow;
      const int64_t col = (c * g.kernel + kh) * g.kernel + kw;
      sum += columns[row * cols + col];
    }
  }
  return sum;
}

// --- Batch normalisation over the rows of a [rows × channels] matrix ---------
// Training mode normalises with the batch's mean and (biased) variance and
// moves the running statistics towards them (PyTorch: momentum 0.1, the
// running variance unbiased); inference mode normalises with the running
// statistics. The per-channel sums are in double, in an order of each
// device's own (the CPU row by row; the GPU in a fixed tree), so the devices
// agree within rounding.

GS_HOST_DEVICE inline float BatchMean(double sum, int64_t rows) {
  return static_cast<float>(sum / static_cast<double>(rows));
}

// E[x²] - E[x]², in double (the float difference would cancel), never below
// zero.
GS_HOST_DEVICE inline float BatchVariance(double sum, double sum_squares,
                                          int64_t rows) {
  const double n = static_cast<double>(rows);
  const double mean = sum / n;
  const double variance = sum_squares / n - mean * mean;
  return static_cast<float>(variance > 0.0 ? variance : 0.0);
}

GS_HOST_DEVICE inline float InverseStd(float variance, float epsilon) {
  return 1.0f / sqrtf(variance + epsilon);
}

// x̂ = (x - mean) / sqrt(var + eps).
GS_HOST_DEVICE inline float Normalized(float x, float mean, float inv_std) {
  return (x - mean) * inv_std;
}

// y = γ·x̂ + β.
GS_HOST_DEVICE inline float BatchNormOutput(float x, float mean, float inv_std,
                                            float gamma, float beta) {
  return Normalized(x, mean, inv_std) * gamma + beta;
}

// running = (1 - momentum)·running + momentum·batch (PyTorch's convention for
// momentum).
GS_HOST_DEVICE inline float RunningAverage(float running, float batch,
                                           float momentum) {
  return (1.0f - momentum) * running + momentum * batch;
}

// The running variance takes the unbiased batch variance, as PyTorch does.
GS_HOST_DEVICE inline float UnbiasedVariance(float variance, int64_t rows) {
  if (rows < 2) return variance;
  return static_cast<float>(static_cast<double>(variance) *
                            static_cast<double>(rows) /
                            static_cast<double>(rows - 1));
}

// dx for training mode, from Σdy (= dβ) and Σdy·x̂ (= dγ) over the channel:
//   dx = γ·inv_std · (dy - Σdy/n - x̂·Σdy·x̂/n).
GS_HOST_DEVICE inline float BatchNormInputGradient(float dy, float x_hat,
                                                   float gamma_inv_std,
                                                   float mean_dy,
                                                   float mean_dy_x_hat) {
  return gamma_inv_std * (dy - mean_dy - x_hat * mean_dy_x_hat);
}

// --- Pooling over NHWC activations -------------------------------------------

// The maximum of output element (b, oh, ow, c)'s window and where it lies in
// the window (kh·kernel + kw; the first of equal maxima, as PyTorch picks).
// The window is inside the image (no padding): out_height and out_width come
// from ConvOutputSize with padding 0.
GS_HOST_DEVICE inline float MaxPoolValue(const float* x, const PoolGeometry& g,
                                         int64_t b, int64_t oh, int64_t ow,
                                         int64_t c, int32_t* where) {
  const float* image = x + b * g.height * g.width * g.channels;
  float best = 0.0f;
  int32_t best_at = -1;
  for (int kh = 0; kh < g.kernel; ++kh) {
    const int64_t ih = oh * g.stride + kh;
    for (int kw = 0; kw < g.kernel; ++kw) {
      const int64_t iw = ow * g.stride + kw;
      const float value = image[(ih * g.width + iw) * g.channels + c];
      // PyTorch's rule: a NaN takes the place (value != value), and no
      // number replaces it afterwards (nothing compares > NaN), so it shows
      // in the loss.
      if (best_at < 0 || value > best || value != value) {
        best = value;
        best_at = kh * g.kernel + kw;
      }
    }
  }
  *where = best_at;
  return best;
}

// The input gradient of max pooling at input element (b, h, w, c): the sum of
// dy over the windows whose maximum it was. A gather over the (at most
// ceil(kernel/stride)² ) windows covering it, in increasing output order on
// both devices.
GS_HOST_DEVICE inline float MaxPoolInputGradient(const float* dy,
                                                 const int32_t* where,
                                                 const PoolGeometry& g,
                                                 int64_t b, int64_t h,
                                                 int64_t w, int64_t c) {
  float sum = 0.0f;
  // Output rows oh with oh·stride <= h < oh·stride + kernel.
  const int64_t oh_first = h < g.kernel ? 0 : (h - g.kernel) / g.stride + 1;
  const int64_t ow_first = w < g.kernel ? 0 : (w - g.kernel) / g.stride + 1;
  for (int64_t oh = oh_first; oh < g.out_height && oh * g.stride <= h; ++oh) {
    for (int64_t ow = ow_first; ow < g.out_width && ow * g.stride <= w; ++ow) {
      const int64_t out =
          ((b * g.out_height + oh) * g.out_width + ow) * g.channels + c;
      const int32_t local = static_cast<int32_t>(
          (h - oh * g.stride) * g.kernel + (w - ow * g.stride));
      if (where[out] == local) sum += dy[out];
    }
  }
  return sum;
}

// Global average pooling of one (b, c): the mean over the image's `spatial`
// pixels, summed in pixel order in double.
GS_HOST_DEVICE inline float SpatialMean(const float* x, int64_t b, int64_t c,
                                        int spatial, int channels) {
  const float* image = x + b * spatial * channels;
  double sum = 0.0;
  for (int s = 0; s < spatial; ++s) sum += image[int64_t{s} * channels + c];
  return static_cast<float>(sum / spatial);
}

// The same over NCHW activations, where (b, c)'s pixels lie together as
// plane `plane_index` = b·channels + c: the same sum in the same order.
GS_HOST_DEVICE inline float PlaneMean(const float* x, int64_t plane_index,
                                      int spatial) {
  const float* plane = x + plane_index * spatial;
  double sum = 0.0;
  for (int s = 0; s < spatial; ++s) sum += plane[s];
  return static_cast<float>(sum / spatial);
}

// Its gradient: every pixel gets dy / spatial.
GS_HOST_DEVICE inline float SpatialMeanGradient(float dy, int spatial) {
  return dy / static_cast<float>(spatial);
}

// Residual addition, and gradients meeting from two branches: y + x.
GS_HOST_DEVICE inline float Sum(float y, float x) { return y + x; }

// --- Fused batch-norm epilogues (device.h's BatchNormEpilogue) --------------
// Sum, Relu and ReluGradient in the order Add, ReluForward and ReluBackward
// apply them, so a fused pass gives the unfused passes' bits.

// A batch norm's output y at element i: + residual[i] when there is a
// residual, then ReLU when asked.
GS_HOST_DEVICE inline float BatchNormEpilogueOutput(float y,
                                                    const float* residual,
                                                    int64_t i, bool relu) {
  if (residual != nullptr) y = Sum(y, residual[i]);
  return relu ? Relu(y) : y;
}

// The gradient a batch-norm backward reads at element i: dy[i], or
// ReluGradient(relu_output[i], dy[i]) when a ReLU followed the batch norm.
GS_HOST_DEVICE inline float MaskedByRelu(float dy, const float* relu_output,
                                         int64_t i) {
  return relu_output != nullptr ? ReluGradient(relu_output[i], dy) : dy;
}

GS_HOST_DEVICE inline float GradientBeforeRelu(const float* dy,
                                               const float* relu_output,
                                               int64_t i) {
  return MaskedByRelu(dy[i], relu_output, i);
}

// Two gradients meeting at a ReLU's output y, then through the ReLU:
// ReluGradient(y, dy + x), as Add then ReluBackward compute it.
GS_HOST_DEVICE inline float ReluGradientOfSum(float y, float dy, float x) {
  return ReluGradient(y, Sum(dy, x));
}

// --- Optimizers, per element (PyTorch's update rules) ------------------------

// SGD without momentum: p -= lr · (g + weight_decay · p).
GS_HOST_DEVICE inline float SgdStep(float p, float g, float lr,
                                    float weight_decay) {
  return p - lr * (g + weight_decay * p);
}

// SGD with momentum: g' = g + wd·p; v = momentum·v + g'; p -= lr·v. PyTorch
// starts v at the first gradient; a zero-filled v gives exactly that.
GS_HOST_DEVICE inline void SgdMomentumStep(float& p, float& v, float g,
                                           float lr, float momentum,
                                           float weight_decay) {
  const float decayed = g + weight_decay * p;
  const float velocity = momentum * v + decayed;
  v = velocity;
  p -= lr * velocity;
}

// The per-step constants of Adam, computed once per step on the host.
struct AdamCoefficients {
  float step_size;                  // lr / (1 - beta1^t)
  float inv_sqrt_bias_correction2;  // 1 / sqrt(1 - beta2^t)
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float epsilon;
  float weight_decay;
};

// From the bias-corrected factors, which the caller computes in double.
GS_HOST_DEVICE inline AdamCoefficients AdamCoefficientsFrom(
    float step_size, float inv_sqrt_bias_correction2, float beta1, float beta2,
    float epsilon, float weight_decay) {
  return AdamCoefficients{step_size,    inv_sqrt_bias_correction2,
                          beta1,        beta2,
                          1.0f - beta1, 1.0f - beta2,
                          epsilon,      weight_decay};
}

// For step t (1-based; t < 1 is taken as 1 rather than divide by zero). The
// bias corrections are computed in double: 1 - 0.999^t loses most of its
// digits in float for small t. Host only (pow in double once per step).
inline AdamCoefficients MakeAdamCoefficients(float lr, float beta1, float beta2,
                                             float epsilon, float weight_decay,
                                             int64_t step) {
  const double t = static_cast<double>(step < 1 ? 1 : step);
  const double bias_correction1 = 1.0 - pow(static_cast<double>(beta1), t);
  const double bias_correction2 = 1.0 - pow(static_cast<double>(beta2), t);
  return AdamCoefficientsFrom(static_cast<float>(lr / bias_correction1),
                              static_cast<float>(1.0 / sqrt(bias_correction2)),
                              beta1, beta2, epsilon, weight_decay);
}

// Adam (Kingma & Ba) with L2 weight decay added to the gradient, as
// torch.optim.Adam, in PyTorch's arrangement:
//   p -= (lr / bc1) · m / (sqrt(v) / sqrt(bc2) + eps).
GS_HOST_DEVICE inline void AdamStep(float& p, float& m, float& v, float g,
                                    const AdamCoefficients& k) {
  const float decayed = g + k.weight_decay * p;
  const float m_new = k.beta1 * m + k.one_minus_beta1 * decayed;
  const float v_new = k.beta2 * v + k.one_minus_beta2 * decayed * decayed;
  m = m_new;
  v = v_new;
  p -= k.step_size * m_new /
       (sqrtf(v_new) * k.inv_sqrt_bias_correction2 + k.epsilon);
}

}  // namespace kernel_math
}  // namespace gradsync
