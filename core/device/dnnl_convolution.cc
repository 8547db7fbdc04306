#include "core/device/dnnl_convolution.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/device/bfloat16.h"

namespace gradsync {
namespace {

using dnnl::memory;

// --precision=bf16's roundings (bfloat16.h), over `count` floats.
void RoundInPlace(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) values[i] = bfloat16::Round(values[i]);
}

void RoundInto(float* __restrict out, const float* __restrict in,
               int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = bfloat16::Round(in[i]);
}

int64_t Floats(const memory::desc& desc) {
  return static_cast<int64_t>(desc.get_size() / sizeof(float));
}

// The input as the caller lays it out (g.input).
memory::desc UserInputDesc(const ConvGeometry& g) {
  return memory::desc(
      {g.batch, g.channels, g.height, g.width}, memory::data_type::f32,
      {g.input.batch, g.input.channel, g.input.row, g.input.column});
}

// The input as the primitives read it: in the output's layout (the header
// says why).
memory::desc InputDesc(const ConvGeometry& g) {
  return memory::desc(
      {g.batch, g.channels, g.height, g.width}, memory::data_type::f32,
      g.nchw_output ? memory::format_tag::nchw : memory::format_tag::nhwc);
}

// The output and its gradient: NHWC, or NCHW for g.nchw_output.
memory::desc OutputDesc(const ConvGeometry& g, int out) {
  return memory::desc(
      {g.batch, out, g.out_height, g.out_width}, memory::data_type::f32,
      g.nchw_output ? memory::format_tag::nchw : memory::format_tag::nhwc);
}

memory::dims WeightDims(const ConvGeometry& g, int out) {
  return {out, g.channels, g.kernel, g.kernel};
}

std::string Describe(const ConvGeometry& g, int out) {
  return absl::StrCat(g.batch, "x", g.channels, "x", g.height, "x", g.width,
                      " -> ", out, " channels, kernel ", g.kernel, " stride ",
                      g.stride, " padding ", g.padding);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConvolutionKernel>> DnnlConvolution::Create(
    DnnlContext& context, const ConvGeometry& geometry, int out_channels,
    bool bf16, bool accept_bf16_operands) {
  if (geometry.batch < 1 || geometry.out_height < 1 || geometry.out_width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("oneDNN convolution of ", Describe(geometry, out_channels),
                     ": empty batch or output"));
  }
  std::unique_ptr<DnnlConvolution> kernel(new DnnlConvolution(
      context, geometry, out_channels, bf16, accept_bf16_operands));
  try {
    kernel->Build();
  } catch (const dnnl::error& error) {
    return absl::InternalError(
        absl::StrCat("oneDNN could not make the convolution of ",
                     Describe(geometry, out_channels), ": ", error.what(),
                     " (status ", static_cast<int>(error.status), ")"));
  }
  return std::unique_ptr<ConvolutionKernel>(std::move(kernel));
}

void DnnlConvolution::Build() {
  const ConvGeometry& g = geometry();
  const int out = out_channels();
  const dnnl::engine& engine = context_.engine();
  const memory::desc src = InputDesc(g);
  const memory::desc user_src = UserInputDesc(g);
  const memory::desc dst = OutputDesc(g, out);
  const memory::desc any_weight(WeightDims(g, out), memory::data_type::f32,
                                memory::format_tag::any);
  const memory::desc user_weight(WeightDims(g, out), memory::data_type::f32,
                                 memory::format_tag::oihw);
  const memory::dims strides = {g.stride, g.stride};
  const memory::dims padding = {g.padding, g.padding};
  // Padding on the far side as PyTorch pads: symmetric, the output size from
  // ConvOutputSize (oneDNN checks that they agree).
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  forward_desc_ = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::convolution_direct, src,
                                      any_weight, dst, strides, padding,
                                      padding),
      attr, engine);
  input_desc_ = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct,
                                            src, any_weight, dst, strides,
                                            padding, padding),
      attr, engine, forward_desc_);
  weights_desc_ = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(
          dnnl::algorithm::convolution_direct, src, any_weight, dst, strides,
          padding, padding),
      attr, engine, forward_desc_);
  forward_ = dnnl::convolution_forward(forward_desc_);
  backward_input_ = dnnl::convolution_backward_data(input_desc_);
  backward_weights_ = dnnl::convolution_backward_weights(weights_desc_);

  user_weight_ = memory(user_weight, engine, nullptr);
  src_ = memory(src, engine, nullptr);
  dst_ = memory(dst, engine, nullptr);
  diff_src_ = memory(src, engine, nullptr);
  diff_dst_ = memory(dst, engine, nullptr);
  forward_weight_ = memory(forward_desc_.weights_desc(), engine, nullptr);
  input_weight_ = memory(input_desc_.weights_desc(), engine, nullptr);
  weight_grad_ = memory(weights_desc_.diff_weights_desc(), engine, nullptr);
  if (user_src != src) {
    user_src_ = memory(user_src, engine, nullptr);
    user_diff_src_ = memory(user_src, engine, nullptr);
    src_to_layout_ = dnnl::reorder(user_src_, src_);
    diff_src_to_user_ = dnnl::reorder(diff_src_, user_diff_src_);
    context_.Reserve(DnnlContext::kInput, src.get_size());
  }
  if (forward_desc_.weights_desc() != user_weight) {
    weight_to_forward_ = dnnl::reorder(user_weight_, forward_weight_);
    context_.Reserve(DnnlContext::kWeights,
                     forward_desc_.weights_desc().get_size());
  }
  if (input_desc_.weights_desc() != user_weight) {
    weight_to_input_ = dnnl::reorder(user_weight_, input_weight_);
    context_.Reserve(DnnlContext::kWeights,
                     input_desc_.weights_desc().get_size());
  }
  if (weights_desc_.diff_weights_desc() != user_weight) {
    weight_grad_to_user_ = dnnl::reorder(weight_grad_, user_weight_);
    context_.Reserve(DnnlContext::kWeightGrad,
                     weights_desc_.diff_weights_desc().get_size());
  }
  if (bf16_) {
    // The rounded copies: the input (in src's layout), the weight where no
    // reorder already puts it in scratch, the output gradient.
    context_.Reserve(DnnlContext::kInput, src.get_size());
    context_.Reserve(DnnlContext::kWeights, user_weight.get_size());
    context_.Reserve(DnnlContext::kOutput, dst.get_size());
  }
  const memory::desc pads[] = {forward_desc_.scratchpad_desc(),
                               input_desc_.scratchpad_desc(),
                               weights_desc_.scratchpad_desc()};
  size_t pad_bytes = 0;
  for (const memory::desc& pad : pads) {
    pad_bytes = std::max(pad_bytes, pad.get_size());
  }
  context_.Reserve(DnnlContext::kScratchpad, pad_bytes);
  // A byte-sized view of the shared scratchpad; each primitive reads the
  // prefix it asked for.
  scratchpad_ =
      memory(memory::desc({static_cast<memory::dim>(pad_bytes)},
                          memory::data_type::u8, memory::format_tag::a),
             engine, nullptr);
}

std::string DnnlConvolution::implementations() const {
  return absl::StrCat("forward ", forward_desc_.impl_info_str(),
                      ", input gradient ", input_desc_.impl_info_str(),
                      ", weight gradient ", weights_desc_.impl_info_str());
}

memory& DnnlConvolution::WeightsAs(const float* weight,
                                   dnnl::reorder& to_layout,
                                   memory& in_layout) {
  user_weight_.set_data_handle(const_cast<float*>(weight));
  if (!to_layout && !bf16_) return user_weight_;
  float* scratch = static_cast<float*>(context_.scratch(DnnlContext::kWeights));
  in_layout.set_data_handle(scratch);
  if (!to_layout) {
    // bf16 without a reorder: the layouts agree, so a rounded copy.
    RoundInto(scratch, weight, Floats(user_weight_.get_desc()));
    return in_layout;
  }
  to_layout.execute(context_.stream(), user_weight_, in_layout);
  if (bf16_) {
    context_.stream().wait();
    RoundInPlace(scratch, Floats(in_layout.get_desc()));
  }
  return in_layout;
}

const float* DnnlConvolution::OutputGradient(const float* dy) {
  if (!bf16_) return dy;
  float* scratch = static_cast<float*>(context_.scratch(DnnlContext::kOutput));
  RoundInto(scratch, dy, Floats(dst_.get_desc()));
  return scratch;
}

memory& DnnlConvolution::Source(const float* x) {
  if (!src_to_layout_) {
    if (bf16_) {
      float* scratch =
          static_cast<float*>(context_.scratch(DnnlContext::kInput));
      RoundInto(scratch, x, Floats(src_.get_desc()));
      src_.set_data_handle(scratch);
    } else {
      src_.set_data_handle(const_cast<float*>(x));
    }
    return src_;
  }
  user_src_.set_data_handle(const_cast<float*>(x));
  float* scratch = static_cast<float*>(context_.scratch(DnnlContext::kInput));
  src_.set_data_handle(scratch);
  src_to_layout_.execute(context_.stream(), user_src_, src_);
  if (bf16_) {
    context_.stream().wait();
    RoundInPlace(scratch, Floats(src_.get_desc()));
  }
  return src_;
}

void DnnlConvolution::Execute(dnnl::primitive& primitive,
                              std::unordered_map<int, memory> arguments) {
  scratchpad_.set_data_handle(context_.scratch(DnnlContext::kScratchpad));
  arguments.emplace(DNNL_ARG_SCRATCHPAD, scratchpad_);
  primitive.execute(context_.stream(), arguments);
  context_.stream().wait();
}

void DnnlConvolution::Forward(const float* x, const float* weight, float* y) {
  context_.UseThreads();
  RunForward(Source(x), weight, y);
}

void DnnlConvolution::ForwardFromBf16(const uint16_t* x, const float* weight,
                                      uint16_t* y) {
  GS_CHECK(AcceptsBf16Operands()) << "oneDNN convolution: bf16 operands";
  context_.UseThreads();
  // The float32 output (rounded to bf16 values) in the output scratch, which
  // the forward does not otherwise use; then its bits.
  float* output = static_cast<float*>(context_.scratch(DnnlContext::kOutput));
  RunForward(SourceFromBf16(x), weight, output);
  bfloat16::RoundToBits(output, Floats(dst_.get_desc()), y);
}

void DnnlConvolution::RunForward(memory& src, const float* weight, float* y) {
  memory& w = WeightsAs(weight, weight_to_forward_, forward_weight_);
  dst_.set_data_handle(y);
  Execute(forward_,
          {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst_}});
  if (bf16_) RoundInPlace(y, Floats(dst_.get_desc()));
}

void DnnlConvolution::BackwardWeights(const float* x, const float* dy,
                                      float* weight_grad) {
  context_.UseThreads();
  RunBackwardWeights(Source(x), OutputGradient(dy), weight_grad);
}

void DnnlConvolution::BackwardInput(const float* dy, const float* weight,
                                    float* dx) {
  context_.UseThreads();
  RunBackwardInput(OutputGradient(dy), weight, dx);
}

void DnnlConvolution::BackwardFromBf16(
    const uint16_t* x, const uint16_t* dy, const float* weight,
    float* weight_grad, uint16_t* dx,
    absl::FunctionRef<void()> weight_grad_ready) {
  GS_CHECK(AcceptsBf16Operands()) << "oneDNN convolution: bf16 operands";
  context_.UseThreads();
  // dy widened into the output scratch, which neither direction writes; x
  // into the input scratch, which an NHWC input's gradient does not use
  // until the weight gradient has read x there: then the input gradient
  // (rounded to bf16 values) goes there, and its bits to dx.
  float* output_grad =
      static_cast<float*>(context_.scratch(DnnlContext::kOutput));
  bfloat16::FromBits(dy, Floats(dst_.get_desc()), output_grad);
  RunBackwardWeights(SourceFromBf16(x), output_grad, weight_grad);
  weight_grad_ready();
  float* input_grad =
      static_cast<float*>(context_.scratch(DnnlContext::kInput));
  RunBackwardInput(output_grad, weight, input_grad);
  bfloat16::RoundToBits(input_grad, Floats(src_.get_desc()), dx);
}

memory& DnnlConvolution::SourceFromBf16(const uint16_t* x) {
  float* scratch = static_cast<float*>(context_.scratch(DnnlContext::kInput));
  bfloat16::FromBits(x, Floats(src_.get_desc()), scratch);
  src_.set_data_handle(scratch);
  return src_;
}

void DnnlConvolution::RunBackwardWeights(memory& src, const float* dy,
                                         float* weight_grad) {
  diff_dst_.set_data_handle(const_cast<float*>(dy));
  user_weight_.set_data_handle(weight_grad);
  memory& grad = weight_grad_to_user_ ? weight_grad_ : user_weight_;
  if (weight_grad_to_user_) {
    weight_grad_.set_data_handle(context_.scratch(DnnlContext::kWeightGrad));
  }
  Execute(backward_weights_, {{DNNL_ARG_SRC, src},
                              {DNNL_ARG_DIFF_DST, diff_dst_},
                              {DNNL_ARG_DIFF_WEIGHTS, grad}});
  if (weight_grad_to_user_) {
    weight_grad_to_user_.execute(context_.stream(), weight_grad_, user_weight_);
    context_.stream().wait();
  }
  if (bf16_) RoundInPlace(weight_grad, Floats(user_weight_.get_desc()));
}

void DnnlConvolution::RunBackwardInput(const float* dy, const float* weight,
                                       float* dx) {
  memory& w = WeightsAs(weight, weight_to_input_, input_weight_);
  diff_dst_.set_data_handle(const_cast<float*>(dy));
  diff_src_.set_data_handle(diff_src_to_user_
                                ? context_.scratch(DnnlContext::kInput)
                                : static_cast<void*>(dx));
  Execute(backward_input_, {{DNNL_ARG_DIFF_DST, diff_dst_},
                            {DNNL_ARG_WEIGHTS, w},
                            {DNNL_ARG_DIFF_SRC, diff_src_}});
  // Rounded in src's layout before any reorder back, which moves values
  // only.
  if (bf16_) {
    RoundInPlace(static_cast<float*>(diff_src_.get_data_handle()),
                 Floats(diff_src_.get_desc()));
  }
  if (diff_src_to_user_) {
    user_diff_src_.set_data_handle(dx);
    diff_src_to_user_.execute(context_.stream(), diff_src_, user_diff_src_);
    context_.stream().wait();
  }
}

}  // namespace gradsync
