// A 2-D convolution prepared once for one geometry by a device's convolution
// library (oneDNN on the CPU, cuDNN on CUDA), then run every step. Models reach
// it through Device::CreateConvolution; a device without such a library returns
// none and the layer (core/model/conv2d.h) runs im2col + Gemm, the reference
// the library is tested against.
//
// Tensors are those of im2col's layers (layer_geometry.h): the input laid out
// as the geometry's ImageLayout, the output NHWC [batch·oh·ow × out], the
// weight PyTorch's [out][in][k][k]. No bias: the layer adds it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "core/device/layer_geometry.h"

namespace gradsync {

class ConvolutionKernel {
 public:
  virtual ~ConvolutionKernel() = default;

  const ConvGeometry& geometry() const { return geometry_; }
  int out_channels() const { return out_channels_; }
  // What the library chose for this shape (algorithms, implementations), for
  // profiles and logs; empty where there is nothing to say.
  virtual std::string Description() const { return ""; }

  // y = x ⋆ weight.
  virtual void Forward(const float* x, const float* weight, float* y) = 0;
  // Overwrites weight_grad with dyᵀ ⋆ x (summed over the batch).
  virtual void BackwardWeights(const float* x, const float* dy,
                               float* weight_grad) = 0;
  // Overwrites dx (laid out as the geometry's input) with the input gradient.
  virtual void BackwardInput(const float* dy, const float* weight,
                             float* dx) = 0;
  // Both gradients from one dy: BackwardWeights, then `weight_grad_ready`
  // (the weight gradient is queued: a model hands it to the strategy before
  // the input gradient runs), then BackwardInput, with their results. A kernel
  // may share their common work (under bf16, cuDNN's rounded copy of dy is
  // made once).
  virtual void Backward(const float* x, const float* dy, const float* weight,
                        float* weight_grad, float* dx,
                        absl::FunctionRef<void()> weight_grad_ready) {
    BackwardWeights(x, dy, weight_grad);
    weight_grad_ready();
    BackwardInput(dy, weight, dx);
  }

  // Under --precision=bf16 a kernel rounds x and dy to bfloat16 before its
  // products. Where the layers around it already made those roundings
  // (a batch norm's epilogue writes the next convolution's input in bf16 in
  // the pass that writes it in float32; a batch norm's backward writes its
  // input gradient, this kernel's dy, in bf16 only), a kernel that accepts
  // them reads them instead: no pass of its own over the float32 values.
  // True for kernels at bf16 whose input is NHWC. The bf16 operands are
  // bfloat16.h's RoundToBits of the float32 values, NHWC like them; the
  // results are those of Forward and Backward given those values, bit for
  // bit. The forward's output, bf16 anyway, is left in bf16 only (`y`,
  // bfloat16.h's bits), for a batch norm to read (Device's InputTensor)
  // without a float32 copy.
  virtual bool AcceptsBf16Operands() const { return false; }
  virtual void ForwardFromBf16(const uint16_t* x, const float* weight,
                               uint16_t* y);
  // Backward's two gradients, and its callback between them, from the bf16
  // operands; the input gradient, bf16 anyway, in bf16 only (`dx`), for the
  // kernels that read it next (Device's InputTensor).
  virtual void BackwardFromBf16(const uint16_t* x, const uint16_t* dy,
                                const float* weight, float* weight_grad,
                                uint16_t* dx,
                                absl::FunctionRef<void()> weight_grad_ready);

 protected:
  ConvolutionKernel(const ConvGeometry& geometry, int out_channels)
      : geometry_(geometry), out_channels_(out_channels) {}

 private:
  const ConvGeometry geometry_;
  const int out_channels_;
};

}  // namespace gradsync
