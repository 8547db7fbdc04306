// The device abstraction: memory and the handful of kernels a model, its loss
// and its optimizer need. The CPU backend (cpu_device.cc) uses oneDNN for
// matrix products and convolutions; a CUDA backend (cuda_device.cc,
// --config=cuda) implements the same interface with cuBLAS, cuDNN
// convolutions and kernels of its own, so models and optimizers are written
// once.
//
// All pointers passed to the math functions are device memory obtained from
// Allocate(). Work may be queued (asynchronous on CUDA); Synchronize() waits
// for it. Matrices are row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/convolution_kernel.h"
#include "core/device/device_clock.h"
#include "core/device/layer_geometry.h"

namespace gradsync {

enum class DeviceType { kCpu, kCuda };

// The arithmetic of matrix products and convolutions (--precision).
//   kFp32: float32 products and sums throughout, on every device: what the
//     parity tests hold the devices to.
//   kTf32: CUDA only: cuBLAS and cuDNN may use TF32 tensor cores for float32
//     data (inputs rounded to 10 mantissa bits, float32 sums), as PyTorch
//     does for convolutions by default (torch.backends.cudnn.allow_tf32).
//   kBf16: mixed precision as PyTorch's bf16 autocast has it, on every
//     device: each matrix product (Gemm) and convolution (all three
//     directions) rounds its inputs to bfloat16 (bfloat16.h: nearest, ties
//     to even), multiplies them exactly and sums in float32, and rounds its
//     output to bfloat16, as autocast's bf16 matmul and convolution outputs
//     are. Everything else stays float32: the parameters (master weights),
//     the optimizer and its state, batch norm (statistics and arithmetic),
//     ReLU, pooling, residual additions, the loss, and the buffers that hold
//     activations and gradients (values that are bf16 after a product are
//     kept exactly), so the gradients handed to a strategy are float32.
//     Where a convolution's operands come from, or its results go to, a
//     batch norm or a residual sum, those may pass them in bf16 instead
//     (BatchNormEpilogue::bf16_copy, BatchNormBackward's dx_bf16, InputTensor;
//     ConvolutionKernel::AcceptsBf16Operands): fewer passes, same values.
enum class Precision { kFp32, kTf32, kBf16 };

// CUDA: the layout cuDNN computes float32 (fp32 and tf32) convolutions in
// (cudnn_convolution_plan.h); bf16 convolutions always compute on NHWC, with
// NHWC activations.
//  - kNhwc: NHWC activations, NHWC convolutions, the weight copied to KRSC.
//  - kNchw: NCHW activations where the model keeps them so (ResNet:
//    Device::activation_layout), as PyTorch's default tensors are, so that
//    every convolution, batch norm and pooling works on NCHW buffers with no
//    copies between them and the legacy API's NCHW-only algorithms (FFT)
//    qualify; the weight read as stored. A model with NHWC activations (the
//    CNN) gets NCHW copies of them around each convolution instead.
//  - kFastest: NHWC activations; each shape's convolution timed at set-up in
//    both layouts (a forward and both gradients, the NCHW copies included,
//    on the device's stream), and the faster runs, as an algorithm search
//    picks an algorithm.
//  - kAuto (the default): what measured fastest on a GPU for each precision
//    (docs/results/gpu.md): fp32 as kNchw where the model keeps NCHW
//    activations, and no copies anywhere (a model with NHWC activations
//    computes NHWC); tf32 and bf16 as kNhwc, with the graph API's engines
//    (DefaultCudnnGraph).
enum class ConvolutionLayout { kNhwc, kNchw, kFastest, kAuto };

// What a batch norm's output goes through in the same pass over memory (a
// fused epilogue): y = BN(x), then y += residual (when given; [rows ×
// channels], must not alias y), then y = max(y, 0) (when relu). The values
// are those of BatchNorm*, Add and ReluForward run one after the other, bit
// for bit: the fusion saves the passes (a residual block's tail reads and
// writes its output once instead of three times), not the arithmetic.
//
// Under --precision=bf16 the pass may also leave y's bfloat16 rounding (the
// bits of bfloat16.h's RoundToBits, [rows × channels]) in `bf16_copy`: the
// next convolution's input, which that convolution would otherwise round
// itself, reading y again (ConvolutionKernel::ForwardFromBf16).
struct BatchNormEpilogue {
  const float* residual = nullptr;
  bool relu = false;
  uint16_t* bf16_copy = nullptr;

  static BatchNormEpilogue None() { return {}; }
  static BatchNormEpilogue Relu() { return {nullptr, true}; }
  static BatchNormEpilogue AddThenRelu(const float* residual) {
    return {residual, true};
  }
  // This epilogue, leaving a bf16 copy in `copy` (null: none).
  BatchNormEpilogue WithBf16Copy(uint16_t* copy) const {
    BatchNormEpilogue epilogue = *this;
    epilogue.bf16_copy = copy;
    return epilogue;
  }
};

// A tensor a kernel reads: float32 values, or, under --precision=bf16, a
// convolution's output or input gradient as that convolution wrote it
// (ConvolutionKernel::ForwardFromBf16, BackwardFromBf16): bf16 bits
// (bfloat16.h) that stand exactly for the float32 values they widen to, so
// that the kernel gives the bits it gives on those float32 values. Made from
// a `const float*` implicitly.
struct InputTensor {
  InputTensor(const float* x) : values(x) {}  // NOLINT: implicit on purpose
  static InputTensor Bf16(const uint16_t* bits) {
    InputTensor input(nullptr);
    input.bf16 = bits;
    return input;
  }
  const float* values = nullptr;
  const uint16_t* bf16 = nullptr;
};

struct AdamState {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  int64_t step = 0;  // 1-based step for bias correction, set by the optimizer
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceType type() const = 0;
  // "cpu" or "cuda:0".
  virtual std::string name() const = 0;

  // Allocates `bytes` of zero-filled device memory that lives as long as the
  // device. Called at set-up only; the step loop never allocates.
  virtual absl::StatusOr<void*> AllocateBytes(size_t bytes) = 0;
  template <typename T>
  absl::StatusOr<T*> Allocate(int64_t count) {
    auto bytes = AllocateBytes(static_cast<size_t>(count) * sizeof(T));
    if (!bytes.ok()) return bytes.status();
    return static_cast<T*>(*bytes);
  }

  // Host <-> device copies (byte counts). CopyToHost is complete on return.
  virtual absl::Status CopyToDevice(void* dst, const void* src,
                                    size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(float* dst, const float* src, int64_t count) = 0;
  // Waits for all queued work.
  virtual absl::Status Synchronize() = 0;

  // A clock of `marks` marks on this device's timeline (device_clock.h), made
  // at set-up: on CUDA, timing events on the compute stream; here, for a
  // device that runs its work on the calling thread, the host's steady clock.
  virtual absl::StatusOr<std::unique_ptr<DeviceClock>> CreateClock(int marks) {
    if (marks < 0) {
      return absl::InvalidArgumentError("a device clock needs marks >= 0");
    }
    return std::unique_ptr<DeviceClock>(
        std::make_unique<HostDeviceClock>(marks));
  }

  // The layout of the image activations a model keeps on this device, where
  // the model can keep that one (layer_geometry.h; ResNet can keep NCHW, the
  // CNN keeps NHWC on every device). NHWC unless the device computes faster
  // on NCHW (CUDA's --cudnn_layout=nchw).
  virtual ActivationLayout activation_layout() const {
    return ActivationLayout::kNhwc;
  }

  // --- Math -----------------------------------------------------------------
  // c[m×n] = alpha · op(a) · op(b) + beta · c, with op(a) m×k and op(b) k×n.
  virtual void Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) = 0;
  // y[r, c] += bias[c] for every row r.
  virtual void AddRowBias(float* y, const float* bias, int rows, int cols) = 0;
  // out[c] = sum_r x[r, c].
  virtual void SumRows(const float* x, float* out, int rows, int cols) = 0;
  // x = max(x, 0) in place.
  virtual void ReluForward(float* x, int64_t count) = 0;
  // dy[i] = 0 where y[i] <= 0 (y is the ReLU output).
  virtual void ReluBackward(const float* y, float* dy, int64_t count) = 0;
  // out[i] = dy[i] + x[i], then 0 where y[i] <= 0: two branches' gradients
  // meeting at a ReLU's output y (a residual block's input) and going through
  // that ReLU, in one pass: the same values as Add then ReluBackward. `out`
  // may be dy's float32 values (in place); it must not overlap x.
  virtual void ReluBackwardOfSum(const float* y, const InputTensor& x,
                                 const InputTensor& dy, float* out,
                                 int64_t count) = 0;
  // Softmax cross-entropy averaged over `rows`. Writes the mean loss to
  // *loss (one device float) and d(loss)/d(logits) to dlogits.
  virtual void SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                   int rows, int classes, float* dlogits,
                                   float* loss) = 0;
  // x *= alpha.
  virtual void Scale(float* x, int64_t count, float alpha) = 0;
  // x = value.
  virtual void Fill(float* x, int64_t count, float value) = 0;

  // --- Convolutional layers (layer_geometry.h: NHWC activations) ------------
  // columns[g.column_rows() × g.column_cols()] = im2col(input), input laid out
  // as g.input says.
  virtual void Im2Col(const float* input, const ConvGeometry& g,
                      float* columns) = 0;
  // input_grad (laid out as g.input) = col2im(columns): each input element
  // gets the sum of the column entries copied from it. Overwrites input_grad.
  virtual void Col2Im(const float* columns, const ConvGeometry& g,
                      float* input_grad) = 0;
  // Batch normalisation, per channel, of x [rows × channels] (NHWC: `plane`
  // 1) or [rows/plane × channels × plane] (NCHW: `plane` = height·width,
  // ActivationLayout::kNchw); rows is the count of one channel's values
  // either way. Training mode: per channel,
  // the batch mean and biased variance normalise x into y = γ·x̂ + β; the
  // mean and 1/sqrt(var + eps) are saved for the backward; the running mean
  // and the running (unbiased) variance move by `momentum` towards the
  // batch's (PyTorch's convention). Needs rows >= 1. `epilogue` (below) is
  // applied to y in the same pass (a residual in x's layout).
  virtual void BatchNormForwardTraining(const InputTensor& x, int64_t rows,
                                        int channels, int64_t plane,
                                        const float* gamma, const float* beta,
                                        float momentum, float epsilon, float* y,
                                        float* saved_mean, float* saved_inv_std,
                                        float* running_mean, float* running_var,
                                        const BatchNormEpilogue& epilogue) = 0;
  // Inference mode: normalises with the running statistics.
  virtual void BatchNormForwardInference(const InputTensor& x, int64_t rows,
                                         int channels, int64_t plane,
                                         const float* gamma, const float* beta,
                                         const float* running_mean,
                                         const float* running_var,
                                         float epsilon, float* y,
                                         const BatchNormEpilogue& epilogue) = 0;
  // x here, and dy in the backward, are InputTensors (above): float32, or a
  // convolution's bf16 output and input gradient.
  // The training-mode backward: dγ = Σ dy·x̂, dβ = Σ dy per channel
  // (overwritten), and dx (overwritten; must not alias dy or x) from the
  // saved batch statistics. With `relu_output` (the output of a ReLU that
  // followed this batch norm, as a fused epilogue or ReluForward made it),
  // dy is that ReLU's output gradient and is taken as 0 wherever
  // relu_output <= 0 (ReluBackward's rule); dy itself is not written.
  // With `dx_bf16`, dx is also written there rounded to bfloat16 (the bits
  // of bfloat16.h's RoundToBits), and `dx` may be null (then only the bf16
  // values are written): under --precision=bf16 the convolution before this
  // batch norm reads its output gradient so (ConvolutionKernel::
  // BackwardFromBf16), and needs no float32 copy.
  virtual void BatchNormBackward(const InputTensor& x, const InputTensor& dy,
                                 int64_t rows, int channels, int64_t plane,
                                 const float* gamma, const float* saved_mean,
                                 const float* saved_inv_std, float* dx,
                                 float* dgamma, float* dbeta,
                                 const float* relu_output,
                                 uint16_t* dx_bf16) = 0;
  // y [batch·out_h·out_w × channels] = the maximum of each window of x; `where`
  // (one int32 per output) keeps the position of the maximum in its window.
  virtual void MaxPoolForward(const float* x, const PoolGeometry& g, float* y,
                              int32_t* where) = 0;
  // dx (overwritten) = dy routed to the maxima that `where` recorded.
  virtual void MaxPoolBackward(const float* dy, const int32_t* where,
                               const PoolGeometry& g, float* dx) = 0;
  // y[b, c] = the mean of x[b, s, c] (NHWC; x[b, c, s] for kNchw) over the
  // `spatial` pixels s.
  virtual void GlobalAvgPoolForward(const float* x, int batch, int spatial,
                                    int channels, ActivationLayout layout,
                                    float* y) = 0;
  // dx[b, s, c] (x's layout) = dy[b, c] / spatial (overwritten).
  virtual void GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                                     int channels, ActivationLayout layout,
                                     float* dx) = 0;
  // y += x (residual connections; gradients of two branches meeting).
  virtual void Add(float* y, const float* x, int64_t count) = 0;

  // A convolution of geometry `g` with `out_channels` outputs from the
  // device's convolution library (convolution_kernel.h), made at set-up and
  // run every step; null where the device has none or is told to use the
  // reference, and then the layer runs Im2Col, Gemm and Col2Im.
  virtual absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CreateConvolution(
      const ConvGeometry& /*g*/, int /*out_channels*/) {
    return std::unique_ptr<ConvolutionKernel>();
  }

  // --- Optimizer updates (element-wise over a flat parameter buffer) ---------
  // PyTorch's SGD: g += wd·p; v = momentum·v + g; p -= lr·v (v unused if
  // momentum == 0).
  virtual void SgdUpdate(float* params, const float* grads, float* velocity,
                         int64_t count, float lr, float momentum,
                         float weight_decay) = 0;
  // Adam (Kingma & Ba) with L2 weight decay added to the gradient, as PyTorch's
  // torch.optim.Adam.
  virtual void AdamUpdate(float* params, const float* grads, float* m, float* v,
                          int64_t count, float lr, const AdamState& state,
                          float weight_decay) = 0;
};

struct DeviceOptions {
  DeviceType type = DeviceType::kCpu;
  int gpu_index = 0;  // CUDA only
  // CUDA only: the GPUs local ranks use (gpu_selection.h); empty: local rank
  // modulo the visible GPUs.
  std::vector<int> gpus;
  // BLAS and oneDNN threads on the CPU backend; 0 = the libraries' default.
  int cpu_threads = 0;
  // Test-only: convolutions through Im2Col + Gemm, the reference the
  // device's convolution library is compared against.
  bool reference_convolutions = false;
  // Test-only, CPU: batch normalisation through the loops over kernel_math.h
  // (the CUDA kernels' arithmetic) instead of oneDNN's primitives.
  bool reference_batch_norm = false;
  // Test-only: convolutions refuse operands rounded by the layers before
  // them (ConvolutionKernel::AcceptsBf16Operands is false), so that a model
  // takes the path where each convolution rounds its own; the two give the
  // same bits.
  bool convolutions_round_own_operands = false;
  // Test-only, CPU: ask models for NCHW activations (activation_layout), as
  // CUDA's --cudnn_layout=nchw does, so that a model's NCHW path and the
  // CPU's NCHW kernels are held to its NHWC one on machines without a GPU.
  bool nchw_activations = false;
  // CUDA: also time the engines of cuDNN's graph API for each convolution
  // direction and run one where it beats the legacy algorithms
  // (cudnn_graph.h); --cudnn_graph. Unset: DefaultCudnnGraph.
  std::optional<bool> cudnn_graph;
  // CUDA: the layout of float32 convolutions (ConvolutionLayout);
  // --cudnn_layout.
  ConvolutionLayout cudnn_layout = ConvolutionLayout::kAuto;
  // kTf32 is refused on the CPU, which has no TF32 arithmetic; kBf16 runs
  // on both devices (the CPU's rounded float32 products are the reference of
  // the GPU's bf16 tensor-core products).
  Precision precision = Precision::kFp32;
};

// Creates the device named by `options`; CUDA is an error in a build without
// --config=cuda.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options);

absl::StatusOr<DeviceType> ParseDeviceType(const std::string& name);

// --precision: "fp32", "tf32" or "bf16" (any case).
absl::StatusOr<Precision> ParsePrecision(const std::string& name);
// --cudnn_layout: "auto", "nhwc", "nchw" or "fastest" (any case).
absl::StatusOr<ConvolutionLayout> ParseConvolutionLayout(
    const std::string& name);

// --cudnn_graph: "true" or "false", or "auto" (unset: DefaultCudnnGraph);
// any case.
absl::StatusOr<std::optional<bool>> ParseCudnnGraph(const std::string& name);

// Whether CUDA's convolutions try the graph API's engines under
// --cudnn_graph=auto: where they compute NHWC by choice (kNhwc, and
// kAuto in tf32 and bf16), which the graph engines beat the legacy
// algorithms on in every precision measured (docs/results/gpu.md); not
// where NCHW is asked for or timed, a pairing not measured yet.
bool DefaultCudnnGraph(ConvolutionLayout layout, Precision precision);
// `options.cudnn_graph` where set, else DefaultCudnnGraph.
bool CudnnGraphOf(const DeviceOptions& options);

// "auto", "nhwc", "nchw" or "fastest", as the flag spells it.
inline const char* ConvolutionLayoutName(ConvolutionLayout layout) {
  switch (layout) {
    case ConvolutionLayout::kNhwc:
      return "nhwc";
    case ConvolutionLayout::kNchw:
      return "nchw";
    case ConvolutionLayout::kFastest:
      return "fastest";
    case ConvolutionLayout::kAuto:
      return "auto";
  }
  return "unknown";
}

// "fp32", "tf32" or "bf16", as the flag spells it. Inline: the CUDA backend,
// which :device links after it, names the precision too.
inline const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace gradsync
