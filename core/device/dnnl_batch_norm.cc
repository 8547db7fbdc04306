// oneDNN batch normalisation for the CPU device (see the header).
#include "core/device/dnnl_batch_norm.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/device/kernel_math.h"

namespace gradsync {
namespace {

using dnnl::memory;
namespace km = kernel_math;

// x's description: NHWC rows of single-pixel images (plane 1), or NCHW images
// of plane×1 pixels.
memory::desc DataDesc(int64_t rows, int channels, int64_t plane) {
  if (plane == 1) {
    return memory::desc({rows, channels, 1, 1}, memory::data_type::f32,
                        memory::format_tag::nhwc);
  }
  return memory::desc({rows / plane, channels, plane, 1},
                      memory::data_type::f32, memory::format_tag::nchw);
}

// Learned scale (gamma) and shift (beta), as the layer has.
dnnl::normalization_flags ScaleShift() {
  return dnnl::normalization_flags::use_scale |
         dnnl::normalization_flags::use_shift;
}

}  // namespace

DnnlBatchNorm::DnnlBatchNorm(DnnlContext& context, int64_t rows, int channels,
                             int64_t plane, float epsilon, bool parallel)
    : context_(context),
      rows_(rows),
      channels_(channels),
      plane_(plane),
      epsilon_(epsilon),
      parallel_(parallel),
      data_desc_(DataDesc(rows, channels, plane)),
      channel_desc_({channels}, memory::data_type::f32, memory::format_tag::a),
      variance_(channels),
      unused_shift_(channels, 0.0f) {
  UseThreads();
  const dnnl::engine& engine = context_.engine();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::batch_normalization_forward::primitive_desc training(
      {dnnl::prop_kind::forward_training, data_desc_, epsilon, ScaleShift()},
      attr, engine);
  const dnnl::batch_normalization_forward::primitive_desc inference(
      {dnnl::prop_kind::forward_inference, data_desc_, epsilon,
       ScaleShift() | dnnl::normalization_flags::use_global_stats},
      attr, engine);
  // Epsilon 0 (see the header); its forward twin is only oneDNN's hint.
  const dnnl::batch_normalization_forward::primitive_desc hint(
      {dnnl::prop_kind::forward_training, data_desc_, 0.0f, ScaleShift()}, attr,
      engine);
  const dnnl::batch_normalization_backward::primitive_desc backward(
      {dnnl::prop_kind::backward, data_desc_, data_desc_, 0.0f, ScaleShift()},
      attr, engine, hint);
  training_ = dnnl::batch_normalization_forward(training);
  inference_ = dnnl::batch_normalization_forward(inference);
  backward_ = dnnl::batch_normalization_backward(backward);
  const size_t pad_bytes = std::max({training.scratchpad_desc().get_size(),
                                     inference.scratchpad_desc().get_size(),
                                     backward.scratchpad_desc().get_size()});
  context_.Reserve(DnnlContext::kScratchpad, pad_bytes);
  scratchpad_ = memory(
      memory::desc({static_cast<memory::dim>(std::max<size_t>(pad_bytes, 1))},
                   memory::data_type::u8, memory::format_tag::a),
      engine, nullptr);
}

void DnnlBatchNorm::UseThreads() const {
  if (parallel_) {
    context_.UseThreads();
  } else {
    context_.UseOneThread();
  }
}

memory DnnlBatchNorm::Wrap(const memory::desc& desc, const dnnl::engine& engine,
                           const float* data) {
  return memory(desc, engine, const_cast<float*>(data));
}

void DnnlBatchNorm::Execute(dnnl::primitive& primitive,
                            std::unordered_map<int, memory> arguments) {
  scratchpad_.set_data_handle(context_.scratch(DnnlContext::kScratchpad));
  arguments.emplace(DNNL_ARG_SCRATCHPAD, scratchpad_);
  primitive.execute(context_.stream(), arguments);
  context_.stream().wait();
}

void DnnlBatchNorm::ForwardTraining(const float* x, const float* gamma,
                                    const float* beta, float momentum, float* y,
                                    float* saved_mean, float* saved_inv_std,
                                    float* running_mean, float* running_var) {
  UseThreads();
  const dnnl::engine& engine = context_.engine();
  Execute(training_,
          {{DNNL_ARG_SRC, Wrap(data_desc_, engine, x)},
           {DNNL_ARG_DST, Wrap(data_desc_, engine, y)},
           {DNNL_ARG_SCALE, Wrap(channel_desc_, engine, gamma)},
           {DNNL_ARG_SHIFT, Wrap(channel_desc_, engine, beta)},
           {DNNL_ARG_MEAN, Wrap(channel_desc_, engine, saved_mean)},
           {DNNL_ARG_VARIANCE, Wrap(channel_desc_, engine, variance_.data())}});
  // The running statistics and the saved inverse deviation as the reference
  // loops compute them from the batch's mean and (biased) variance.
  for (int c = 0; c < channels_; ++c) {
    saved_inv_std[c] = km::InverseStd(variance_[c], epsilon_);
    running_mean[c] =
        km::RunningAverage(running_mean[c], saved_mean[c], momentum);
    running_var[c] = km::RunningAverage(
        running_var[c], km::UnbiasedVariance(variance_[c], rows_), momentum);
  }
}

void DnnlBatchNorm::ForwardInference(const float* x, const float* gamma,
                                     const float* beta,
                                     const float* running_mean,
                                     const float* running_var, float* y) {
  UseThreads();
  const dnnl::engine& engine = context_.engine();
  Execute(inference_,
          {{DNNL_ARG_SRC, Wrap(data_desc_, engine, x)},
           {DNNL_ARG_DST, Wrap(data_desc_, engine, y)},
           {DNNL_ARG_SCALE, Wrap(channel_desc_, engine, gamma)},
           {DNNL_ARG_SHIFT, Wrap(channel_desc_, engine, beta)},
           {DNNL_ARG_MEAN, Wrap(channel_desc_, engine, running_mean)},
           {DNNL_ARG_VARIANCE, Wrap(channel_desc_, engine, running_var)}});
}

void DnnlBatchNorm::Backward(const float* x, const float* dy,
                             const float* gamma, const float* saved_mean,
                             const float* saved_inv_std, float* dx,
                             float* dgamma, float* dbeta) {
  for (int c = 0; c < channels_; ++c) {
    variance_[c] = 1.0f / (saved_inv_std[c] * saved_inv_std[c]);
  }
  UseThreads();
  const dnnl::engine& engine = context_.engine();
  Execute(backward_,
          {{DNNL_ARG_SRC, Wrap(data_desc_, engine, x)},
           {DNNL_ARG_DIFF_DST, Wrap(data_desc_, engine, dy)},
           {DNNL_ARG_SCALE, Wrap(channel_desc_, engine, gamma)},
           {DNNL_ARG_SHIFT, Wrap(channel_desc_, engine, unused_shift_.data())},
           {DNNL_ARG_MEAN, Wrap(channel_desc_, engine, saved_mean)},
           {DNNL_ARG_VARIANCE, Wrap(channel_desc_, engine, variance_.data())},
           {DNNL_ARG_DIFF_SRC, Wrap(data_desc_, engine, dx)},
           {DNNL_ARG_DIFF_SCALE, Wrap(channel_desc_, engine, dgamma)},
           {DNNL_ARG_DIFF_SHIFT, Wrap(channel_desc_, engine, dbeta)}});
}

}  // namespace gradsync
