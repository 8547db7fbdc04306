#include "core/model/conv2d.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"

namespace gradsync {
namespace {

// A piece of `images` images of the batch as a geometry of its own; the
// caller offsets the pointers.
ConvGeometry Piece(const ConvGeometry& g, int images) {
  ConvGeometry piece = g;
  piece.batch = images;
  return piece;
}

}  // namespace

Conv2d::Conv2d(std::string name, Conv2dShape shape)
    : name_(std::move(name)), shape_(shape) {}

std::vector<ParamSpec> Conv2d::ParamSpecs() const {
  std::vector<ParamSpec> specs;
  specs.push_back({absl::StrCat(name_, ".weight"),
                   {shape_.out_channels, shape_.in_channels, shape_.kernel,
                    shape_.kernel}});
  if (shape_.bias) {
    specs.push_back({absl::StrCat(name_, ".bias"), {shape_.out_channels}});
  }
  return specs;
}

int64_t Conv2d::weight_count() const {
  return int64_t{shape_.out_channels} * shape_.in_channels * shape_.kernel *
         shape_.kernel;
}

ConvGeometry Conv2d::Geometry(int images, int height, int width,
                              const ImageLayout& input,
                              ActivationLayout output) const {
  ConvGeometry g;
  g.batch = images;
  g.channels = shape_.in_channels;
  g.height = height;
  g.width = width;
  g.kernel = shape_.kernel;
  g.stride = shape_.stride;
  g.padding = shape_.padding;
  g.out_height =
      ConvOutputSize(height, shape_.kernel, shape_.stride, shape_.padding);
  g.out_width =
      ConvOutputSize(width, shape_.kernel, shape_.stride, shape_.padding);
  g.input = input;
  g.nchw_output = output == ActivationLayout::kNchw;
  return g;
}

int64_t Conv2d::ColumnsPerImage(int height, int width) const {
  const ConvGeometry g = Geometry(1, height, width, ImageLayout{});
  return g.column_rows() * g.column_cols();
}

void Conv2d::Bind(Device& device, const float* weight, float* weight_grad,
                  const float* bias, float* bias_grad) {
  device_ = &device;
  weight_ = weight;
  weight_grad_ = weight_grad;
  bias_ = bias;
  bias_grad_ = bias_grad;
  kernels_.clear();
  uses_columns_ = true;
}

absl::Status Conv2d::Prepare(const ConvGeometry& g) {
  auto kernel = device_->CreateConvolution(g, shape_.out_channels);
  if (!kernel.ok()) {
    return absl::Status(kernel.status().code(),
                        absl::StrCat(name_, ": ", kernel.status().message()));
  }
  uses_columns_ = *kernel == nullptr;
  if (shape_.bias && g.nchw_output) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_,
        ": a convolution with a bias writes NHWC outputs only (the "
        "bias is added per row of the NHWC output); keep the model's "
        "activations NHWC"));
  }
  if (uses_columns_ && g.nchw_output) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": NCHW activations need the device's convolution library; ",
        "the im2col path writes NHWC outputs only (drop "
        "reference_convolutions or NCHW activations)"));
  }
  if (!uses_columns_) kernels_.push_back(*std::move(kernel));
  return absl::OkStatus();
}

void Conv2d::BindColumns(float* columns, int64_t columns_capacity) {
  columns_ = columns;
  columns_capacity_ = columns_capacity;
}

ConvolutionKernel* Conv2d::KernelFor(const ConvGeometry& g) {
  if (uses_columns_) return nullptr;
  for (const auto& kernel : kernels_) {
    const ConvGeometry& made = kernel->geometry();
    if (made.batch == g.batch && made.height == g.height &&
        made.width == g.width && made.nchw_output == g.nchw_output &&
        made.input.batch == g.input.batch &&
        made.input.channel == g.input.channel &&
        made.input.row == g.input.row && made.input.column == g.input.column) {
      return kernel.get();
    }
  }
  auto kernel = device_->CreateConvolution(g, shape_.out_channels);
  GS_CHECK(kernel.ok() && *kernel != nullptr)
      << name_ << ": no convolution kernel for batch " << g.batch << ": "
      << kernel.status();
  kernels_.push_back(*std::move(kernel));
  return kernels_.back().get();
}

int Conv2d::ImagesPerPiece(const ConvGeometry& g) const {
  const int64_t per_image =
      int64_t{g.out_height} * g.out_width * g.column_cols();
  GS_CHECK(per_image <= columns_capacity_)
      << name_ << ": column scratch of " << columns_capacity_
      << " floats is smaller than one image's " << per_image;
  return static_cast<int>(
      std::min<int64_t>(g.batch, columns_capacity_ / per_image));
}

template <typename Visit>
void Conv2d::ForEachPiece(const ConvGeometry& g, Visit visit) const {
  const int per_piece = ImagesPerPiece(g);
  const int64_t output_per_image =
      int64_t{g.out_height} * g.out_width * shape_.out_channels;
  for (int first = 0; first < g.batch; first += per_piece) {
    visit(Piece(g, std::min(per_piece, g.batch - first)), first * g.input.batch,
          first * output_per_image);
  }
}

void Conv2d::Forward(const float* x, const ConvGeometry& g, float* y) {
  const int out = shape_.out_channels;
  if (ConvolutionKernel* kernel = KernelFor(g)) {
    kernel->Forward(x, weight_, y);
    if (bias_ != nullptr) {
      device_->AddRowBias(y, bias_, static_cast<int>(g.column_rows()), out);
    }
    return;
  }
  ForEachPiece(g, [&](const ConvGeometry& piece, int64_t in, int64_t at) {
    const int rows = static_cast<int>(piece.column_rows());
    const int cols = static_cast<int>(piece.column_cols());
    device_->Im2Col(x + in, piece, columns_);
    device_->Gemm(/*transpose_a=*/false, /*transpose_b=*/true, rows, out, cols,
                  1.0f, columns_, weight_, 0.0f, y + at);
    if (bias_ != nullptr) device_->AddRowBias(y + at, bias_, rows, out);
  });
}

void Conv2d::BackwardWeights(const float* x, const ConvGeometry& g,
                             const float* dy) {
  const int out = shape_.out_channels;
  if (ConvolutionKernel* kernel = KernelFor(g)) {
    kernel->BackwardWeights(x, dy, weight_grad_);
  } else {
    ForEachPiece(g, [&](const ConvGeometry& piece, int64_t in, int64_t at) {
      const int rows = static_cast<int>(piece.column_rows());
      const int cols = static_cast<int>(piece.column_cols());
      device_->Im2Col(x + in, piece, columns_);
      // dW (+)= dyᵀ · C: [out × rows] · [rows × cols]; the first piece
      // overwrites.
      device_->Gemm(/*transpose_a=*/true, /*transpose_b=*/false, out, cols,
                    rows, 1.0f, dy + at, columns_, in == 0 ? 0.0f : 1.0f,
                    weight_grad_);
    });
  }
  if (bias_grad_ != nullptr) {
    device_->SumRows(dy, bias_grad_, static_cast<int>(g.column_rows()), out);
  }
}

void Conv2d::Backward(const float* x, const ConvGeometry& g, const float* dy,
                      float* dx, absl::FunctionRef<void()> weight_grad_ready) {
  ConvolutionKernel* kernel = KernelFor(g);
  if (kernel == nullptr) {
    BackwardWeights(x, g, dy);
    weight_grad_ready();
    BackwardInput(g, dy, dx);
    return;
  }
  kernel->Backward(x, dy, weight_, weight_grad_, dx, [&] {
    if (bias_grad_ != nullptr) {
      device_->SumRows(dy, bias_grad_, static_cast<int>(g.column_rows()),
                       shape_.out_channels);
    }
    weight_grad_ready();
  });
}

ConvolutionKernel* Conv2d::Bf16KernelFor(const ConvGeometry& g) {
  if (shape_.bias) return nullptr;
  ConvolutionKernel* kernel = KernelFor(g);
  return kernel != nullptr && kernel->AcceptsBf16Operands() ? kernel : nullptr;
}

bool Conv2d::AcceptsBf16Operands(const ConvGeometry& g) {
  return Bf16KernelFor(g) != nullptr;
}

void Conv2d::ForwardFromBf16(const uint16_t* x, const ConvGeometry& g,
                             uint16_t* y) {
  ConvolutionKernel* kernel = Bf16KernelFor(g);
  GS_CHECK(kernel != nullptr)
      << name_ << ": ForwardFromBf16 where AcceptsBf16Operands is false";
  kernel->ForwardFromBf16(x, weight_, y);
}

void Conv2d::BackwardFromBf16(const uint16_t* x, const ConvGeometry& g,
                              const uint16_t* dy, uint16_t* dx,
                              absl::FunctionRef<void()> weight_grad_ready) {
  ConvolutionKernel* kernel = Bf16KernelFor(g);
  GS_CHECK(kernel != nullptr)
      << name_ << ": BackwardFromBf16 where AcceptsBf16Operands is false";
  kernel->BackwardFromBf16(x, dy, weight_, weight_grad_, dx, weight_grad_ready);
}

void Conv2d::BackwardInput(const ConvGeometry& g, const float* dy, float* dx) {
  if (ConvolutionKernel* kernel = KernelFor(g)) {
    kernel->BackwardInput(dy, weight_, dx);
    return;
  }
  const int out = shape_.out_channels;
  ForEachPiece(g, [&](const ConvGeometry& piece, int64_t in, int64_t at) {
    const int rows = static_cast<int>(piece.column_rows());
    const int cols = static_cast<int>(piece.column_cols());
    // dC = dy · W: [rows × out] · [out × cols].
    device_->Gemm(/*transpose_a=*/false, /*transpose_b=*/false, rows, cols, out,
                  1.0f, dy + at, weight_, 0.0f, columns_);
    device_->Col2Im(columns_, piece, dx + in);
  });
}

}  // namespace gradsync
