// The CPU device's batch normalisation through oneDNN's primitives: training
// forward (batch statistics), backward (input, scale and shift gradients) and
// inference forward (running statistics) of one shape, [rows × channels]
// (NHWC) or [rows/plane × channels × plane] (NCHW), made at the first call of
// that shape and run every step.
//
// Layout: the layers' NHWC activations (plane 1), described to oneDNN as an
// NHWC tensor of `rows` single-pixel images (the same bytes), for which
// oneDNN 2.6 picks its AVX-512 kernel (`bnorm_jit:avx512_core`); as a 2-D
// `nc` tensor it picks `ncsp_bnorm:any`, plain loops. Against the device's own
// loops (double sums per channel, kernel_math.h's arithmetic) on ResNet-18's
// shapes see docs/results/compute.md, "Batch norm through oneDNN". NCHW
// activations (plane = height·width > 1, ActivationLayout::kNchw) are
// described as what they are, rows/plane images of plane×1 pixels in `nchw`.
//
// What the Device interface keeps differs from oneDNN's arguments: the layer
// saves 1/sqrt(var + eps), oneDNN wants the variance, and the backward call
// carries no epsilon. So the backward primitive is made with epsilon 0 and
// given var + eps = 1/inv_std² as its "variance": oneDNN's 1/sqrt(that + 0)
// is the saved inv_std again, to rounding.
#pragma once

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "core/device/dnnl_context.h"

namespace gradsync {

class DnnlBatchNorm {
 public:
  // Primitives for `rows` × `channels` in planes of `plane` values (1: NHWC,
  // else NCHW; rows a multiple of it) with `epsilon`; throws dnnl::error if
  // oneDNN cannot make them. `parallel`: run on the context's threads, else
  // on one (the primitives are made under the same choice, since oneDNN sizes
  // their per-thread scratch by the thread count at creation).
  DnnlBatchNorm(DnnlContext& context, int64_t rows, int channels, int64_t plane,
                float epsilon, bool parallel);

  int64_t rows() const { return rows_; }
  int channels() const { return channels_; }
  int64_t plane() const { return plane_; }
  float epsilon() const { return epsilon_; }

  // As Device::BatchNormForwardTraining.
  void ForwardTraining(const float* x, const float* gamma, const float* beta,
                       float momentum, float* y, float* saved_mean,
                       float* saved_inv_std, float* running_mean,
                       float* running_var);
  // As Device::BatchNormForwardInference.
  void ForwardInference(const float* x, const float* gamma, const float* beta,
                        const float* running_mean, const float* running_var,
                        float* y);
  // As Device::BatchNormBackward.
  void Backward(const float* x, const float* dy, const float* gamma,
                const float* saved_mean, const float* saved_inv_std, float* dx,
                float* dgamma, float* dbeta);

 private:
  void UseThreads() const;
  void Execute(dnnl::primitive& primitive,
               std::unordered_map<int, dnnl::memory> arguments);
  static dnnl::memory Wrap(const dnnl::memory::desc& desc,
                           const dnnl::engine& engine, const float* data);

  DnnlContext& context_;
  const int64_t rows_;
  const int channels_;
  const int64_t plane_;
  const float epsilon_;
  const bool parallel_;
  dnnl::memory::desc data_desc_, channel_desc_;
  dnnl::batch_normalization_forward training_, inference_;
  dnnl::batch_normalization_backward backward_;
  dnnl::memory scratchpad_;
  // Per-channel staging: the batch variance oneDNN returns, and var + eps
  // rebuilt from inv_std for the backward.
  std::vector<float> variance_;
  // oneDNN 2.6's backward refuses to run without a shift argument although
  // its result does not depend on it.
  std::vector<float> unused_shift_;
};

}  // namespace gradsync
