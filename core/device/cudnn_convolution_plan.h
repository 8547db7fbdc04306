// The arithmetic of a cuDNN convolution's descriptors, as plain host code so
// that it is tested on machines without a GPU (or cuDNN): the dimensions and
// strides of every tensor and filter cudnn_convolution.cc describes to cuDNN,
// the padding, stride and dilation, the output shape cuDNN will compute (and
// its agreement with layer_geometry.h's ConvOutputSize), and the sizes of the
// copies the kernel makes.
//
// What cuDNN sees, in one of two layouts (CudnnLayout):
//  - kNhwc (the default): every tensor NHWC. The layers' activations are
//    NHWC already; an input of another layout (the data set's NCHW rows at
//    the stem) is first copied into NHWC scratch, and its gradient back. The
//    weight, stored in PyTorch's [out][in][k][k] (cuDNN's NCHW filter order,
//    "KCRS"), is copied to KRSC (cuDNN's NHWC filter format) for each call,
//    and the weight gradient back. All-NHWC with an NHWC filter is the
//    configuration PyTorch's channels_last tensors use (the legacy API's FFT
//    algorithms do not take it: see kNchw); mixing an NHWC tensor with an
//    NCHW filter is not a configuration cuDNN documents for FP32. The copies
//    touch each weight twice a step, as on the CPU (dnnl_convolution.h).
//  - kNchw (float32 only): every tensor NCHW, the configuration of
//    PyTorch's default tensors, where the legacy API also offers its FFT
//    algorithms, which cuDNN documents for NCHW tensors only. NCHW inputs
//    and outputs (a model that keeps NCHW activations, the stem's input) are
//    read and written in place; NHWC ones are copied into NCHW scratch
//    around each call (and their gradients). The weight is read and its
//    gradient written in place, being KCRS already.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/device/layer_geometry.h"

namespace gradsync {

// A 4-D tensor as cuDNN's descriptors take it: dims (n, c, h, w) and strides
// in elements, both int (cuDNN's 4-D descriptors have no 64-bit form).
struct CudnnTensorShape {
  std::array<int, 4> dims{};
  std::array<int, 4> strides{};

  // n·c·h·w.
  int64_t elements() const;
  // 1 + Σ (dim−1)·stride: how many elements from the first to the last
  // addressed, so that a buffer of this many floats holds the tensor.
  int64_t span() const;
  bool operator==(const CudnnTensorShape& other) const {
    return dims == other.dims && strides == other.strides;
  }
  bool operator!=(const CudnnTensorShape& other) const {
    return !(*this == other);
  }
};

// Row-major NHWC strides for dims (n, c, h, w).
CudnnTensorShape NhwcTensorShape(int n, int c, int h, int w);
// Row-major NCHW strides for dims (n, c, h, w).
CudnnTensorShape NchwTensorShape(int n, int c, int h, int w);

// The shape as an NhwcWalk (layer_geometry.h): dims (n, c, h, w) and its
// strides, for the bf16 casts that read or write it in NHWC order.
NhwcWalk WalkOf(const CudnnTensorShape& shape);

// The data type of the tensors and filter cuDNN computes on. kFloat for
// --precision=fp32 and tf32 (the layers' own float32 buffers); kBfloat16 for
// --precision=bf16: input, filter, output and their gradients are bf16
// copies (CUDNN_DATA_BFLOAT16) the kernel casts to and from (bfloat16.h),
// the convolution descriptor's compute type stays float32
// (CUDNN_DATA_FLOAT: cuDNN's PSEUDO_BFLOAT16_CONFIG, bf16 data with float32
// accumulation, which the legacy API supports only with bf16 outputs, as
// autocast's convolutions return).
enum class CudnnDataType { kFloat, kBfloat16 };
const char* CudnnDataTypeName(CudnnDataType type);  // "float" or "bf16"

// The layout cuDNN computes in (see the file comment).
enum class CudnnLayout { kNhwc, kNchw };
const char* CudnnLayoutName(CudnnLayout layout);  // "NHWC" or "NCHW"

struct CudnnConvolutionPlan {
  // What cuDNN computes on; the shapes below are in elements of this type
  // for the tensors cuDNN sees (input, output, nhwc_weight) and in floats
  // for the user's (user_input, user_weight).
  CudnnDataType data_type = CudnnDataType::kFloat;
  CudnnLayout layout = CudnnLayout::kNhwc;
  // The input as the layer lays it out (the geometry's ImageLayout).
  CudnnTensorShape user_input;
  // The input as cuDNN reads it, in the plan's layout.
  CudnnTensorShape input;
  // The output (and its gradient) as the layer holds it: NHWC, the layer's
  // [batch·oh·ow × out] matrix, or NCHW where the geometry says so
  // (ConvGeometry::nchw_output: the model keeps NCHW activations).
  CudnnTensorShape user_output;
  // The output (and its gradient) as cuDNN writes it, in the plan's layout.
  CudnnTensorShape output;
  // The weight as the model stores it, described as a tensor: dims
  // (k, c, r, s), KCRS strides.
  CudnnTensorShape user_weight;
  // The weight as cuDNN reads it, dims (k, c, r, s): in KRSC order (cuDNN's
  // CUDNN_TENSOR_NHWC filter format, strides (r·s·c, 1, s·c, c)) for kNhwc,
  // in the model's own KCRS order (CUDNN_TENSOR_NCHW) for kNchw.
  CudnnTensorShape filter;
  // cuDNN's filter descriptor: (k, c, r, s) whatever the format.
  std::array<int, 4> filter_dims{};
  std::array<int, 2> padding{};   // (h, w)
  std::array<int, 2> stride{};    // (h, w)
  std::array<int, 2> dilation{};  // (h, w): always 1, as the layers have none

  bool bf16() const { return data_type == CudnnDataType::kBfloat16; }
  // Bytes of one element of the tensors cuDNN sees: 4, or 2 for bf16.
  int64_t element_bytes() const { return bf16() ? 2 : 4; }
  // Whether the input cuDNN reads is a copy in scratch (and its gradient is
  // written there and copied back): an input not in the plan's layout, and
  // every input under bf16 (the rounded copy).
  bool input_needs_copy() const { return bf16() || user_input != input; }
  // Whether the layer's input is NHWC and cuDNN reads it so, so that a bf16
  // copy the layer keeps in the same order can be read in its place
  // (ConvolutionKernel::AcceptsBf16Operands).
  bool user_input_is_nhwc() const {
    return layout == CudnnLayout::kNhwc && user_input == input;
  }
  // Whether the output cuDNN writes (and the output gradient it reads) is a
  // copy in scratch: the bf16 output, widened into the layer's float32
  // buffer afterwards (and dy rounded into it before the backward), and an
  // NCHW output, copied into the layer's NHWC one (and dy into NCHW).
  bool output_needs_copy() const { return bf16() || user_output != output; }
  // Whether cuDNN reads a copy of the weight (and writes its gradient to a
  // copy): the KRSC copy of kNhwc, the bf16 copy.
  bool weight_needs_copy() const { return bf16() || user_weight != filter; }
  // Sizes of the scratch copies cuDNN reads and writes, in this plan's type.
  int64_t input_bytes() const { return input.elements() * element_bytes(); }
  int64_t output_bytes() const { return output.elements() * element_bytes(); }
  int64_t weight_bytes() const {
    return user_weight.elements() * element_bytes();
  }
};

// The plan for `g` with `out_channels` outputs computing on `data_type` in
// `layout`, or InvalidArgument naming the shape when cuDNN could not take it:
// a dimension below 1, negative padding, an output size that is not
// ConvOutputSize's, an input layout whose elements overlap, a tensor of 2³¹
// elements or more, or kNchw with bf16 (bf16 runs on NHWC copies only).
absl::StatusOr<CudnnConvolutionPlan> PlanCudnnConvolution(
    const ConvGeometry& g, int out_channels,
    CudnnDataType data_type = CudnnDataType::kFloat,
    CudnnLayout layout = CudnnLayout::kNhwc);

// The output dims (n, k, oh, ow) cuDNN's cudnnGetConvolution2dForwardOutputDim
// documents for the plan's input, filter and convolution: 1 + (in + 2·pad −
// ((kernel − 1)·dilation + 1)) / stride, rounded down. The kernel compares
// cuDNN's own answer with plan.output on the GPU; this is its twin for tests.
std::array<int, 4> CudnnForwardOutputDims(const CudnnConvolutionPlan& plan);

// What cuDNN's algorithm search sees of a plan, as a string: the data type,
// the input, the output, the filter in its format, padding, stride and
// dilation (not the user's input layout or weight order, which only the
// copies around cuDNN read). Layers with equal keys run the same algorithms, so
// a device measures each key once (ResNet-18 repeats most of its shapes); a
// bf16 and a float convolution of one shape have different algorithms and
// different keys.
std::string AlgorithmSearchKey(const CudnnConvolutionPlan& plan);

// "3x5x9x7 (NCHW) -> 4 channels, kernel 3 stride 2 padding 1": the shape named
// in every error of a convolution.
std::string DescribeConvolution(const ConvGeometry& g, int out_channels);

}  // namespace gradsync
