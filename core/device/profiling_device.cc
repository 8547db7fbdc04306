#include "core/device/profiling_device.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/device/convolution_kernel.h"

namespace gradsync {
namespace {

std::string ConvShape(const ConvGeometry& g, int out_channels) {
  return absl::StrCat(g.kernel, "x", g.kernel, "/", g.stride, " ", g.channels,
                      "->", out_channels, " at ", g.height, "x", g.width);
}

std::string Elements(int64_t count) { return absl::StrCat(count, " floats"); }

std::string Rows(int64_t rows, int channels) {
  return absl::StrCat(rows, "x", channels);
}

// " bf16 x" where a kernel reads a convolution's bf16 output or gradient.
const char* Input(const InputTensor& x) {
  return x.bf16 != nullptr ? " bf16 x" : "";
}

// " bf16 dy" where a kernel reads a convolution's bf16 input gradient.
const char* Gradient(const InputTensor& dy) {
  return dy.bf16 != nullptr ? " bf16 dy" : "";
}

// " NCHW" for a batch norm over NCHW activations (plane > 1), else "".
const char* Planes(int64_t plane) { return plane > 1 ? " NCHW" : ""; }

// "", " +residual +relu", ...: what a batch norm's epilogue adds.
std::string Epilogue(const BatchNormEpilogue& epilogue) {
  return absl::StrCat(epilogue.residual != nullptr ? " +residual" : "",
                      epilogue.relu ? " +relu" : "",
                      epilogue.bf16_copy != nullptr ? " +bf16 copy" : "");
}

// Each direction of a convolution is an operation of its own.
class ProfilingConvolution : public ConvolutionKernel {
 public:
  ProfilingConvolution(ProfilingDevice& device,
                       std::unique_ptr<ConvolutionKernel> inner)
      : ConvolutionKernel(inner->geometry(), inner->out_channels()),
        device_(device),
        inner_(std::move(inner)),
        shape_(ConvShape(geometry(), out_channels())) {}

  void Forward(const float* x, const float* weight, float* y) override {
    inner_->Forward(x, weight, y);
    device_.Mark("conv forward", [&] { return shape_; });
  }
  void BackwardWeights(const float* x, const float* dy,
                       float* weight_grad) override {
    inner_->BackwardWeights(x, dy, weight_grad);
    device_.Mark("conv weight gradient", [&] { return shape_; });
  }
  void BackwardInput(const float* dy, const float* weight, float* dx) override {
    inner_->BackwardInput(dy, weight, dx);
    device_.Mark("conv input gradient", [&] { return shape_; });
  }
  void Backward(const float* x, const float* dy, const float* weight,
                float* weight_grad, float* dx,
                absl::FunctionRef<void()> weight_grad_ready) override {
    inner_->Backward(x, dy, weight, weight_grad, dx, [&] {
      device_.Mark("conv weight gradient", [&] { return shape_; });
      weight_grad_ready();
    });
    device_.Mark("conv input gradient", [&] { return shape_; });
  }
  bool AcceptsBf16Operands() const override {
    return inner_->AcceptsBf16Operands();
  }
  void ForwardFromBf16(const uint16_t* x, const float* weight,
                       uint16_t* y) override {
    inner_->ForwardFromBf16(x, weight, y);
    device_.Mark("conv forward", [&] { return shape_; });
  }
  void BackwardFromBf16(const uint16_t* x, const uint16_t* dy,
                        const float* weight, float* weight_grad, uint16_t* dx,
                        absl::FunctionRef<void()> weight_grad_ready) override {
    inner_->BackwardFromBf16(x, dy, weight, weight_grad, dx, [&] {
      device_.Mark("conv weight gradient", [&] { return shape_; });
      weight_grad_ready();
    });
    device_.Mark("conv input gradient", [&] { return shape_; });
  }

 private:
  ProfilingDevice& device_;
  const std::unique_ptr<ConvolutionKernel> inner_;
  const std::string shape_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProfilingDevice>> ProfilingDevice::Create(
    Device& inner, int max_ops) {
  if (max_ops < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a profiling device times at least 1 operation a step; got ", max_ops));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock,
                   inner.CreateClock(max_ops + 1));
  return std::unique_ptr<ProfilingDevice>(
      new ProfilingDevice(inner, max_ops, std::move(clock)));
}

ProfilingDevice::ProfilingDevice(Device& inner, int max_ops,
                                 std::unique_ptr<DeviceClock> clock)
    : inner_(inner),
      max_ops_(max_ops),
      clock_(std::move(clock)),
      ops_(static_cast<size_t>(max_ops)) {}

absl::Status ProfilingDevice::BeginStep() {
  if (timing_) {
    return absl::FailedPreconditionError(
        "ProfilingDevice::BeginStep: the previous step was not ended");
  }
  count_ = 0;
  mark_status_ = clock_->Record(0);
  timing_ = true;
  host_mark_ = std::chrono::steady_clock::now();
  return mark_status_;
}

void ProfilingDevice::Mark(const char* category,
                           absl::FunctionRef<std::string()> label) {
  if (!timing_) return;
  const auto queued = std::chrono::steady_clock::now();
  ++count_;
  if (count_ > max_ops_ || !mark_status_.ok()) return;
  mark_status_ = clock_->Record(count_);
  ProfiledOp& op = ops_[count_ - 1];
  op.category = category;
  op.label = absl::StrCat(category, " ", label());
  op.host_ms =
      std::chrono::duration<double, std::milli>(queued - host_mark_).count();
  // The event record and the label above are the profile's cost, not the
  // next operation's.
  host_mark_ = std::chrono::steady_clock::now();
}

absl::StatusOr<std::vector<ProfiledOp>> ProfilingDevice::EndStep() {
  if (!timing_) {
    return absl::FailedPreconditionError(
        "ProfilingDevice::EndStep without BeginStep");
  }
  timing_ = false;
  RETURN_IF_ERROR(mark_status_);
  if (count_ > max_ops_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the step queued ", count_, " device operations; the profile times ",
        max_ops_, " (raise the limit to at least ", count_, ")"));
  }
  RETURN_IF_ERROR(inner_.Synchronize());
  std::vector<ProfiledOp> ops(ops_.begin(), ops_.begin() + count_);
  for (int i = 0; i < count_; ++i) {
    ASSIGN_OR_RETURN(ops[i].ms, clock_->ElapsedMs(i, i + 1));
  }
  return ops;
}

void ProfilingDevice::CopyOnDevice(float* dst, const float* src,
                                   int64_t count) {
  inner_.CopyOnDevice(dst, src, count);
  Mark("copy", [&] { return Elements(count); });
}

void ProfilingDevice::Gemm(bool transpose_a, bool transpose_b, int m, int n,
                           int k, float alpha, const float* a, const float* b,
                           float beta, float* c) {
  inner_.Gemm(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
  Mark("matrix product", [&] {
    return absl::StrCat(m, "x", n, "x", k, transpose_a ? " a^T" : "",
                        transpose_b ? " b^T" : "");
  });
}

void ProfilingDevice::AddRowBias(float* y, const float* bias, int rows,
                                 int cols) {
  inner_.AddRowBias(y, bias, rows, cols);
  Mark("element-wise", [&] { return absl::StrCat("bias ", Rows(rows, cols)); });
}

void ProfilingDevice::SumRows(const float* x, float* out, int rows, int cols) {
  inner_.SumRows(x, out, rows, cols);
  Mark("element-wise",
       [&] { return absl::StrCat("bias gradient ", Rows(rows, cols)); });
}

void ProfilingDevice::ReluForward(float* x, int64_t count) {
  inner_.ReluForward(x, count);
  Mark("element-wise", [&] { return absl::StrCat("relu ", Elements(count)); });
}

void ProfilingDevice::ReluBackward(const float* y, float* dy, int64_t count) {
  inner_.ReluBackward(y, dy, count);
  Mark("element-wise",
       [&] { return absl::StrCat("relu backward ", Elements(count)); });
}

void ProfilingDevice::ReluBackwardOfSum(const float* y, const InputTensor& x,
                                        const InputTensor& dy, float* out,
                                        int64_t count) {
  inner_.ReluBackwardOfSum(y, x, dy, out, count);
  Mark("element-wise", [&] {
    return absl::StrCat("add + relu backward ", Elements(count), Input(x),
                        Gradient(dy));
  });
}

void ProfilingDevice::SoftmaxCrossEntropy(const float* logits,
                                          const int32_t* labels, int rows,
                                          int classes, float* dlogits,
                                          float* loss) {
  inner_.SoftmaxCrossEntropy(logits, labels, rows, classes, dlogits, loss);
  Mark("loss", [&] {
    return absl::StrCat("softmax cross-entropy ", Rows(rows, classes));
  });
}

void ProfilingDevice::Scale(float* x, int64_t count, float alpha) {
  inner_.Scale(x, count, alpha);
  Mark("element-wise", [&] { return absl::StrCat("scale ", Elements(count)); });
}

void ProfilingDevice::Fill(float* x, int64_t count, float value) {
  inner_.Fill(x, count, value);
  Mark("element-wise", [&] { return absl::StrCat("fill ", Elements(count)); });
}

void ProfilingDevice::Im2Col(const float* input, const ConvGeometry& g,
                             float* columns) {
  inner_.Im2Col(input, g, columns);
  Mark("im2col", [&] {
    return absl::StrCat(
        "im2col ", Rows(g.column_rows(), static_cast<int>(g.column_cols())));
  });
}

void ProfilingDevice::Col2Im(const float* columns, const ConvGeometry& g,
                             float* input_grad) {
  inner_.Col2Im(columns, g, input_grad);
  Mark("im2col", [&] {
    return absl::StrCat(
        "col2im ", Rows(g.column_rows(), static_cast<int>(g.column_cols())));
  });
}

void ProfilingDevice::BatchNormForwardTraining(
    const InputTensor& x, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* beta, float momentum, float epsilon,
    float* y, float* saved_mean, float* saved_inv_std, float* running_mean,
    float* running_var, const BatchNormEpilogue& epilogue) {
  inner_.BatchNormForwardTraining(
      x, rows, channels, plane, gamma, beta, momentum, epsilon, y, saved_mean,
      saved_inv_std, running_mean, running_var, epilogue);
  Mark("batch norm forward", [&] {
    return absl::StrCat(Rows(rows, channels), Planes(plane), Input(x),
                        Epilogue(epilogue));
  });
}

void ProfilingDevice::BatchNormForwardInference(
    const InputTensor& x, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* beta, const float* running_mean,
    const float* running_var, float epsilon, float* y,
    const BatchNormEpilogue& epilogue) {
  inner_.BatchNormForwardInference(x, rows, channels, plane, gamma, beta,
                                   running_mean, running_var, epsilon, y,
                                   epilogue);
  Mark("batch norm forward", [&] {
    return absl::StrCat("inference ", Rows(rows, channels), Planes(plane),
                        Input(x), Epilogue(epilogue));
  });
}

void ProfilingDevice::BatchNormBackward(
    const InputTensor& x, const InputTensor& dy, int64_t rows, int channels,
    int64_t plane, const float* gamma, const float* saved_mean,
    const float* saved_inv_std, float* dx, float* dgamma, float* dbeta,
    const float* relu_output, uint16_t* dx_bf16) {
  inner_.BatchNormBackward(x, dy, rows, channels, plane, gamma, saved_mean,
                           saved_inv_std, dx, dgamma, dbeta, relu_output,
                           dx_bf16);
  Mark("batch norm backward", [&] {
    return absl::StrCat(Rows(rows, channels), Planes(plane), Input(x),
                        Gradient(dy), relu_output != nullptr ? " +relu" : "",
                        dx_bf16 == nullptr ? ""
                        : dx == nullptr    ? " bf16 dx"
                                           : " +bf16 dx");
  });
}

void ProfilingDevice::MaxPoolForward(const float* x, const PoolGeometry& g,
                                     float* y, int32_t* where) {
  inner_.MaxPoolForward(x, g, y, where);
  Mark("pooling", [&] {
    return absl::StrCat("max pool ", g.kernel, "/", g.stride, " ", g.channels,
                        " at ", g.height, "x", g.width);
  });
}

void ProfilingDevice::MaxPoolBackward(const float* dy, const int32_t* where,
                                      const PoolGeometry& g, float* dx) {
  inner_.MaxPoolBackward(dy, where, g, dx);
  Mark("pooling", [&] {
    return absl::StrCat("max pool backward ", g.kernel, "/", g.stride, " ",
                        g.channels, " at ", g.height, "x", g.width);
  });
}

void ProfilingDevice::GlobalAvgPoolForward(const float* x, int batch,
                                           int spatial, int channels,
                                           ActivationLayout layout, float* y) {
  inner_.GlobalAvgPoolForward(x, batch, spatial, channels, layout, y);
  Mark("pooling", [&] {
    return absl::StrCat("average pool ", channels, " over ", spatial);
  });
}

void ProfilingDevice::GlobalAvgPoolBackward(const float* dy, int batch,
                                            int spatial, int channels,
                                            ActivationLayout layout,
                                            float* dx) {
  inner_.GlobalAvgPoolBackward(dy, batch, spatial, channels, layout, dx);
  Mark("pooling", [&] {
    return absl::StrCat("average pool backward ", channels, " over ", spatial);
  });
}

void ProfilingDevice::Add(float* y, const float* x, int64_t count) {
  inner_.Add(y, x, count);
  Mark("element-wise", [&] { return absl::StrCat("add ", Elements(count)); });
}

absl::StatusOr<std::unique_ptr<ConvolutionKernel>>
ProfilingDevice::CreateConvolution(const ConvGeometry& g, int out_channels) {
  ASSIGN_OR_RETURN(std::unique_ptr<ConvolutionKernel> kernel,
                   inner_.CreateConvolution(g, out_channels));
  if (kernel == nullptr) return kernel;  // im2col + Gemm: marked as such
  convolutions_.push_back(
      {ConvShape(kernel->geometry(), kernel->out_channels()),
       kernel->Description()});
  return std::unique_ptr<ConvolutionKernel>(
      std::make_unique<ProfilingConvolution>(*this, std::move(kernel)));
}

void ProfilingDevice::SgdUpdate(float* params, const float* grads,
                                float* velocity, int64_t count, float lr,
                                float momentum, float weight_decay) {
  inner_.SgdUpdate(params, grads, velocity, count, lr, momentum, weight_decay);
  Mark("optimizer", [&] { return absl::StrCat("sgd ", Elements(count)); });
}

void ProfilingDevice::AdamUpdate(float* params, const float* grads, float* m,
                                 float* v, int64_t count, float lr,
                                 const AdamState& state, float weight_decay) {
  inner_.AdamUpdate(params, grads, m, v, count, lr, state, weight_decay);
  Mark("optimizer", [&] { return absl::StrCat("adam ", Elements(count)); });
}

}  // namespace gradsync
