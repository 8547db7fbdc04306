// The CPU device's convolutions through oneDNN's primitives: forward, input
// gradient and weight gradient of one geometry, created once (at a model's
// Bind) and run every step.
//
// Layouts, chosen by measurement (core/device/README.md): activations stay in
// the layers' own NHWC (oneDNN's `nhwc`), which oneDNN's AVX-512 kernels read
// and write directly, so no activation between layers is ever reordered. An
// input of another layout (the data set's NCHW rows at the stem) is reordered
// into NHWC scratch first: oneDNN 2.6 has only its reference loops for an
// NCHW input with an NHWC output, 30 times slower than the reorder and an
// NHWC convolution together. NCHW activations (ConvGeometry::nchw_output, for
// ActivationLayout::kNchw) are the same the other way round: the output and
// its gradient are `nchw`, the primitives read their input in `nchw` too
// (oneDNN's GEMM-based kernels; an NHWC input with an NCHW output would get
// its reference loops), and an input of another layout is reordered into NCHW
// scratch. The CPU's NCHW
// path is a test vehicle for the models' NCHW code (DeviceOptions::
// nchw_activations), correct rather than fast.
//
// Weights are left to oneDNN (`any`): with PyTorch's plain [out][in][k][k] it
// falls back to its reference loops, tens of times slower, so each call
// reorders the weight into the primitive's blocked layout and the weight
// gradient back, into scratch the device shares between layers
// (dnnl_context.h). That reorder touches each weight twice a step, well under
// 1 % of a ResNet-18 step's memory traffic.
//
// --precision=bf16 (`bf16` at Create): every direction rounds its two inputs
// to bf16 (bfloat16.h) in scratch, never in the caller's buffers (the
// parameters stay float32 master weights), runs the same float32 primitive
// (the product of two bf16 values is exact in float32, so this is a bf16
// product with float32 sums, what a bf16 tensor core computes), and rounds
// its output to bf16 in place, as PyTorch's bf16 autocast convolution
// returns bf16. Rounding commutes with the reorders (they move values), so
// the weight is rounded after its reorder, in the scratch that holds it.
#pragma once

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "core/device/convolution_kernel.h"
#include "core/device/dnnl_context.h"
#include "core/device/layer_geometry.h"

namespace gradsync {

class DnnlConvolution : public ConvolutionKernel {
 public:
  // The primitives for `geometry` with `out_channels` outputs; an error names
  // the geometry if oneDNN cannot make them.
  static absl::StatusOr<std::unique_ptr<ConvolutionKernel>> Create(
      DnnlContext& context, const ConvGeometry& geometry, int out_channels,
      bool bf16 = false, bool accept_bf16_operands = true);

  void Forward(const float* x, const float* weight, float* y) override;
  void BackwardWeights(const float* x, const float* dy,
                       float* weight_grad) override;
  void BackwardInput(const float* dy, const float* weight, float* dx) override;
  // At bf16 with NHWC input and output (unless Create was told not to):
  // the bf16 operands are widened into the scratch the kernel's own roundings
  // use. bf16 runs on NHWC activations only (device.h).
  bool AcceptsBf16Operands() const override {
    return bf16_ && accept_bf16_operands_ && !src_to_layout_ &&
           !geometry().nchw_output;
  }
  void ForwardFromBf16(const uint16_t* x, const float* weight,
                       uint16_t* y) override;
  void BackwardFromBf16(const uint16_t* x, const uint16_t* dy,
                        const float* weight, float* weight_grad, uint16_t* dx,
                        absl::FunctionRef<void()> weight_grad_ready) override;

  // oneDNN's implementation names ("brgconv:avx512_core", ...), for logs and
  // tests that check no reference loop was picked.
  std::string implementations() const;
  std::string Description() const override { return implementations(); }

 private:
  DnnlConvolution(DnnlContext& context, const ConvGeometry& geometry,
                  int out_channels, bool bf16, bool accept_bf16_operands)
      : ConvolutionKernel(geometry, out_channels),
        context_(context),
        bf16_(bf16),
        accept_bf16_operands_(accept_bf16_operands) {}
  // Builds every primitive; throws dnnl::error.
  void Build();
  // `weight` in the layout `layout`: itself, or its reorder into the shared
  // weight scratch.
  dnnl::memory& WeightsAs(const float* weight, dnnl::reorder& to_layout,
                          dnnl::memory& in_layout);
  // x in the primitives' source layout (the output's): src_ on x itself or
  // on its reorder into the input scratch (bf16: always in the input
  // scratch, rounded).
  dnnl::memory& Source(const float* x);
  // bf16: dy rounded into the output scratch; else dy itself.
  const float* OutputGradient(const float* dy);
  // bf16 operands: x widened into the input scratch, src_ on it.
  dnnl::memory& SourceFromBf16(const uint16_t* x);
  // The three directions from their prepared operands (the source from
  // Source; dy rounded already under bf16).
  void RunForward(dnnl::memory& src, const float* weight, float* y);
  void RunBackwardWeights(dnnl::memory& src, const float* dy,
                          float* weight_grad);
  void RunBackwardInput(const float* dy, const float* weight, float* dx);
  void Execute(dnnl::primitive& primitive,
               std::unordered_map<int, dnnl::memory> arguments);

  DnnlContext& context_;
  const bool bf16_;
  const bool accept_bf16_operands_;
  dnnl::convolution_forward::primitive_desc forward_desc_;
  dnnl::convolution_backward_data::primitive_desc input_desc_;
  dnnl::convolution_backward_weights::primitive_desc weights_desc_;
  dnnl::convolution_forward forward_;
  dnnl::convolution_backward_data backward_input_;
  dnnl::convolution_backward_weights backward_weights_;
  // Memory objects whose handles are set before each call.
  dnnl::memory user_weight_, src_, dst_, diff_src_, diff_dst_;
  dnnl::memory forward_weight_, input_weight_, weight_grad_, scratchpad_;
  // Reorders of an input that is not in the primitives' source layout into
  // it, and of its gradient back.
  dnnl::memory user_src_, user_diff_src_;
  dnnl::reorder src_to_layout_, diff_src_to_user_;
  // Reorders between PyTorch's weight layout and the primitives' (empty
  // where they agree).
  dnnl::reorder weight_to_forward_, weight_to_input_, weight_grad_to_user_;
};

}  // namespace gradsync
