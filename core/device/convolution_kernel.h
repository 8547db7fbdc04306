// A 2-D convolution prepared once for one geometry by a device's convolution
// library (oneDNN on the CPU, cuDNN on CUDA), then run every step. Models reach it through
// Device::CreateConvolution; a device without such a library returns none and
// the layer (core/model/conv2d.h) runs im2col + Gemm, the reference the
// library is tested against.
//
// Tensors are those of im2col's layers (layer_geometry.h): the input laid out
// as the geometry's ImageLayout, the output NHWC [batch·oh·ow × out], the
// weight PyTorch's [out][in][k][k]. No bias: the layer adds it.
#pragma once

#include "core/device/layer_geometry.h"

namespace gradsync {

class ConvolutionKernel {
 public:
  virtual ~ConvolutionKernel() = default;

  const ConvGeometry& geometry() const { return geometry_; }
  int out_channels() const { return out_channels_; }

  // y = x ⋆ weight.
  virtual void Forward(const float* x, const float* weight, float* y) = 0;
  // Overwrites weight_grad with dyᵀ ⋆ x (summed over the batch).
  virtual void BackwardWeights(const float* x, const float* dy,
                               float* weight_grad) = 0;
  // Overwrites dx (laid out as the geometry's input) with the input gradient.
  virtual void BackwardInput(const float* dy, const float* weight,
                             float* dx) = 0;

 protected:
  ConvolutionKernel(const ConvGeometry& geometry, int out_channels)
      : geometry_(geometry), out_channels_(out_channels) {}

 private:
  const ConvGeometry geometry_;
  const int out_channels_;
};

}  // namespace gradsync
