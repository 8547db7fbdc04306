// A 2-D convolution layer as im2col + GEMM on the Device interface.
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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  // as `input`.
  ConvGeometry Geometry(int images, int height, int width,
                        const ImageLayout& input) const;
  // Floats of column matrix for one image (the scratch Bind needs at least).
  int64_t ColumnsPerImage(int height, int width) const;

  // `bias` and `bias_grad` are null without a bias. `columns` is scratch of
  // `columns_capacity` floats, at least ColumnsPerImage of every input size
  // this layer sees; layers may share it.
  void Bind(Device& device, const float* weight, float* weight_grad,
            const float* bias, float* bias_grad, float* columns,
            int64_t columns_capacity);

  // y [images·oh·ow × out] (NHWC).
  void Forward(const float* x, const ConvGeometry& g, float* y);
  // Overwrites the weight (and bias) gradient from x and dy.
  void BackwardWeights(const float* x, const ConvGeometry& g, const float* dy);
  // Overwrites dx (laid out as g.input) with the input gradient.
  void BackwardInput(const ConvGeometry& g, const float* dy, float* dx);

 private:
  // Images per piece of the batch whose column matrix fits the scratch.
  int ImagesPerPiece(const ConvGeometry& g) const;
  // Calls visit(piece, input_offset, output_offset) for the batch's pieces in
  // order: each piece's geometry and where its images start in x (dx) and in
  // y (dy), in floats.
  template <typename Visit>
  void ForEachPiece(const ConvGeometry& g, Visit visit) const;

  const std::string name_;
  const Conv2dShape shape_;
  Device* device_ = nullptr;
  const float* weight_ = nullptr;
  float* weight_grad_ = nullptr;
  const float* bias_ = nullptr;
  float* bias_grad_ = nullptr;
  float* columns_ = nullptr;
  int64_t columns_capacity_ = 0;
};

}  // namespace gradsync
