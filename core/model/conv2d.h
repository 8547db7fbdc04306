// A 2-D convolution layer on the Device interface: through the device's
// convolution library where it has one (Device::CreateConvolution: oneDNN on
// the CPU, cuDNN on CUDA), else as im2col + GEMM, which is also the reference
// the library is tested against (DeviceOptions::reference_convolutions).
//
// Activations are NHWC ([images·height·width × channels] row-major,
// core/device/layer_geometry.h); the input may be laid out otherwise (the
// data set's CHW rows), as its ImageLayout says. With W the weight
// [out × in·k·k] (PyTorch's [out][in][k][k]) and C = im2col(x)
// [images·oh·ow × in·k·k]:
//   forward   y  = C · Wᵀ (+ bias per row)          [images·oh·ow × out]
//   backward  dW = dyᵀ · C,  db = Σ_rows dy,  dC = dy · W,  dx = col2im(dC)
// One GEMM per layer covers the whole batch, unless the column matrix would
// pass the scratch buffer given to Bind: then the batch is cut into pieces of
// whole images, each one GEMM (the weight gradient accumulates over them).
// The backward recomputes C rather than keep every layer's column matrix,
// which for ResNet-18 would be several times the activations.
//
// A library's kernels are made for one batch size each: Prepare makes the one
// for the batch a model binds (at Bind), and a call with another batch size
// (a shorter last batch, an evaluation piece) makes and keeps its own on first
// use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "core/device/convolution_kernel.h"
#include "core/device/device.h"
#include "core/device/layer_geometry.h"
#include "core/sync/param_layout.h"

namespace gradsync {

struct Conv2dShape {
  int in_channels = 1;
  int out_channels = 1;
  int kernel = 3;
  int stride = 1;
  int padding = 0;
  bool bias = false;
};

class Conv2d {
 public:
  Conv2d(std::string name, Conv2dShape shape);

  const std::string& name() const { return name_; }
  const Conv2dShape& shape() const { return shape_; }
  // <name>.weight [out, in, k, k], then <name>.bias [out] if it has one.
  std::vector<ParamSpec> ParamSpecs() const;
  int64_t weight_count() const;

  // The geometry of this layer on `images` inputs of height × width, laid out
  // as `input`, its output in `output`'s layout (NCHW only through a
  // device's convolution library: Prepare refuses it on the im2col path).
  ConvGeometry Geometry(
      int images, int height, int width, const ImageLayout& input,
      ActivationLayout output = ActivationLayout::kNhwc) const;
  // Floats of column matrix for one image (the scratch Bind needs at least).
  int64_t ColumnsPerImage(int height, int width) const;

  // `bias` and `bias_grad` are null without a bias.
  void Bind(Device& device, const float* weight, float* weight_grad,
            const float* bias, float* bias_grad);
  // Asks the device for its kernel of geometry `g` (called at Bind for the
  // bound batch). Afterwards uses_columns() says whether the layer needs the
  // column scratch.
  absl::Status Prepare(const ConvGeometry& g);
  // True where the device has no convolution library: im2col + GEMM.
  bool uses_columns() const { return uses_columns_; }
  // The im2col path's scratch of `columns_capacity` floats, at least
  // ColumnsPerImage of every input size this layer sees; layers may share it.
  void BindColumns(float* columns, int64_t columns_capacity);

  // y [images·oh·ow × out] (NHWC), or NCHW where g.nchw_output.
  void Forward(const float* x, const ConvGeometry& g, float* y);
  // Overwrites the weight (and bias) gradient from x and dy.
  void BackwardWeights(const float* x, const ConvGeometry& g, const float* dy);
  // Overwrites dx (laid out as g.input) with the input gradient.
  void BackwardInput(const ConvGeometry& g, const float* dy, float* dx);
  // BackwardWeights, then `weight_grad_ready` (the weight and bias
  // gradients are queued), then BackwardInput, on one dy: through the
  // kernel's Backward where the device has one, which may share their work.
  void Backward(const float* x, const ConvGeometry& g, const float* dy,
                float* dx, absl::FunctionRef<void()> weight_grad_ready);

  // Under --precision=bf16, whether the layer's kernel for g reads x and dy
  // already rounded to bf16 by the layers around it
  // (ConvolutionKernel::AcceptsBf16Operands); never for a layer with a bias,
  // whose gradient needs dy in float32. Makes the kernel for g's batch if it
  // has none yet.
  bool AcceptsBf16Operands(const ConvGeometry& g);
  // Forward and Backward from those operands (x NHWC, bfloat16.h's bits):
  // the same results, bit for bit, as from the float32 values they round;
  // the forward's output y and the backward's dx in bf16 bits only
  // (ConvolutionKernel). Only where AcceptsBf16Operands(g).
  void ForwardFromBf16(const uint16_t* x, const ConvGeometry& g, uint16_t* y);
  void BackwardFromBf16(const uint16_t* x, const ConvGeometry& g,
                        const uint16_t* dy, uint16_t* dx,
                        absl::FunctionRef<void()> weight_grad_ready);

 private:
  // Images per piece of the batch whose column matrix fits the scratch.
  int ImagesPerPiece(const ConvGeometry& g) const;
  // Calls visit(piece, input_offset, output_offset) for the batch's pieces in
  // order: each piece's geometry and where its images start in x (dx) and in
  // y (dy), in floats.
  template <typename Visit>
  void ForEachPiece(const ConvGeometry& g, Visit visit) const;
  // The library's kernel for g's batch size (made on first use), or null on
  // the im2col path.
  ConvolutionKernel* KernelFor(const ConvGeometry& g);
  // That kernel where it takes bf16 operands and the layer has no bias, else
  // null.
  ConvolutionKernel* Bf16KernelFor(const ConvGeometry& g);

  const std::string name_;
  const Conv2dShape shape_;
  Device* device_ = nullptr;
  const float* weight_ = nullptr;
  float* weight_grad_ = nullptr;
  const float* bias_ = nullptr;
  float* bias_grad_ = nullptr;
  float* columns_ = nullptr;
  int64_t columns_capacity_ = 0;
  bool uses_columns_ = true;
  // The library's kernels, one per batch size seen (a few at most).
  std::vector<std::unique_ptr<ConvolutionKernel>> kernels_;
};

}  // namespace gradsync
