// The descriptor arithmetic of cuDNN convolutions (see the header).
#include "core/device/cudnn_convolution_plan.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradsync {
namespace {

constexpr int64_t kIntLimit = std::numeric_limits<int>::max();

// Whether no two elements of the tensor share an address: with the strides
// sorted, each must step past everything the smaller ones reach.
bool ElementsAreDistinct(const CudnnTensorShape& t) {
  std::array<std::pair<int64_t, int64_t>, 4> by_stride;  // (stride, dim)
  for (int i = 0; i < 4; ++i) by_stride[i] = {t.strides[i], t.dims[i]};
  std::sort(by_stride.begin(), by_stride.end());
  int64_t reach = 1;  // elements the smaller strides cover
  for (const auto& [stride, dim] : by_stride) {
    if (dim == 1) continue;
    if (stride < reach) return false;
    reach = stride * dim;
  }
  return true;
}

absl::Status CheckFits(const CudnnTensorShape& t, const char* what,
                       const ConvGeometry& g, int out_channels) {
  if (t.span() > kIntLimit || t.elements() > kIntLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN convolution of ", DescribeConvolution(g, out_channels), ": the ",
        what, " spans ", t.span(),
        " elements, more than cuDNN's 4-D descriptors address (2^31 - 1); "
        "use a smaller batch"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t CudnnTensorShape::elements() const {
  return int64_t{dims[0]} * dims[1] * dims[2] * dims[3];
}

int64_t CudnnTensorShape::span() const {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) last += int64_t{dims[i] - 1} * strides[i];
  return last + 1;
}

CudnnTensorShape NhwcTensorShape(int n, int c, int h, int w) {
  return CudnnTensorShape{{n, c, h, w}, {h * w * c, 1, w * c, c}};
}

CudnnTensorShape NchwTensorShape(int n, int c, int h, int w) {
  return CudnnTensorShape{{n, c, h, w}, {c * h * w, h * w, w, 1}};
}

std::string AlgorithmSearchKey(const CudnnConvolutionPlan& plan) {
  const auto shape = [](const CudnnTensorShape& t) {
    return absl::StrCat(absl::StrJoin(t.dims, "x"), "/",
                        absl::StrJoin(t.strides, ","));
  };
  return absl::StrCat(CudnnDataTypeName(plan.data_type), " input ",
                      shape(plan.input), " output ", shape(plan.output),
                      " filter ", shape(plan.filter), " padding ",
                      absl::StrJoin(plan.padding, ","), " stride ",
                      absl::StrJoin(plan.stride, ","), " dilation ",
                      absl::StrJoin(plan.dilation, ","));
}

std::string DescribeConvolution(const ConvGeometry& g, int out_channels) {
  const ImageLayout nchw = NchwLayout(g.channels, g.height, g.width);
  const ImageLayout nhwc = NhwcLayout(g.channels, g.height, g.width);
  auto same = [](const ImageLayout& a, const ImageLayout& b) {
    return a.batch == b.batch && a.channel == b.channel && a.row == b.row &&
           a.column == b.column;
  };
  const std::string layout =
      same(g.input, nhwc) ? "NHWC"
      : same(g.input, nchw)
          ? "NCHW"
          : absl::StrCat("strides ", g.input.batch, ",", g.input.channel, ",",
                         g.input.row, ",", g.input.column);
  return absl::StrCat(g.batch, "x", g.channels, "x", g.height, "x", g.width,
                      " (", layout, ") -> ", out_channels, " channels ",
                      g.out_height, "x", g.out_width,
                      g.nchw_output ? " (NCHW)" : "", ", kernel ", g.kernel,
                      " stride ", g.stride, " padding ", g.padding);
}

NhwcWalk WalkOf(const CudnnTensorShape& shape) {
  NhwcWalk walk;
  walk.n = shape.dims[0];
  walk.c = shape.dims[1];
  walk.h = shape.dims[2];
  walk.w = shape.dims[3];
  walk.layout = ImageLayout{shape.strides[0], shape.strides[1],
                            shape.strides[2], shape.strides[3]};
  return walk;
}

const char* CudnnDataTypeName(CudnnDataType type) {
  return type == CudnnDataType::kBfloat16 ? "bf16" : "float";
}

const char* CudnnLayoutName(CudnnLayout layout) {
  return layout == CudnnLayout::kNchw ? "NCHW" : "NHWC";
}

absl::StatusOr<CudnnConvolutionPlan> PlanCudnnConvolution(
    const ConvGeometry& g, int out_channels, CudnnDataType data_type,
    CudnnLayout layout) {
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN convolution of ",
                     DescribeConvolution(g, out_channels), ": ", why));
  };
  if (g.batch < 1 || g.channels < 1 || g.height < 1 || g.width < 1 ||
      out_channels < 1) {
    return invalid("batch, channels, height, width and outputs must be >= 1");
  }
  if (g.kernel < 1 || g.stride < 1 || g.padding < 0) {
    return invalid("kernel and stride must be >= 1 and padding >= 0");
  }
  const int out_height =
      ConvOutputSize(g.height, g.kernel, g.stride, g.padding);
  const int out_width = ConvOutputSize(g.width, g.kernel, g.stride, g.padding);
  if (out_height < 1 || out_width < 1) {
    return invalid("the kernel does not fit the padded input");
  }
  if (g.out_height != out_height || g.out_width != out_width) {
    return invalid(absl::StrCat("the geometry's output ", g.out_height, "x",
                                g.out_width, " is not ConvOutputSize's ",
                                out_height, "x", out_width));
  }
  if (layout == CudnnLayout::kNchw && data_type == CudnnDataType::kBfloat16) {
    return invalid(
        "bf16 convolutions compute on NHWC copies; NCHW is for float32 "
        "(--precision=fp32 or tf32)");
  }
  const ImageLayout& in = g.input;
  for (int64_t stride : {in.batch, in.channel, in.row, in.column}) {
    if (stride < 1 || stride > kIntLimit) {
      return invalid("input strides must be in [1, 2^31 - 1]");
    }
  }

  CudnnConvolutionPlan plan;
  plan.data_type = data_type;
  plan.layout = layout;
  plan.user_input = CudnnTensorShape{
      {g.batch, g.channels, g.height, g.width},
      {static_cast<int>(in.batch), static_cast<int>(in.channel),
       static_cast<int>(in.row), static_cast<int>(in.column)}};
  if (!ElementsAreDistinct(plan.user_input)) {
    return invalid("the input layout maps two elements to one address");
  }
  // int64 before the int conversion so that the size check below sees the
  // true counts; the shapes are only used once it has passed.
  const int64_t nhwc_batch = int64_t{g.height} * g.width * g.channels;
  const int64_t out_batch = int64_t{out_height} * out_width * out_channels;
  const int64_t filter_count =
      int64_t{out_channels} * g.channels * g.kernel * g.kernel;
  if (nhwc_batch * g.batch > kIntLimit || out_batch * g.batch > kIntLimit ||
      filter_count > kIntLimit) {
    return invalid(
        "a tensor has 2^31 elements or more, more than cuDNN's 4-D "
        "descriptors address; use a smaller batch");
  }
  const auto shape =
      layout == CudnnLayout::kNchw ? NchwTensorShape : NhwcTensorShape;
  plan.input = shape(g.batch, g.channels, g.height, g.width);
  plan.user_output =
      g.nchw_output
          ? NchwTensorShape(g.batch, out_channels, out_height, out_width)
          : NhwcTensorShape(g.batch, out_channels, out_height, out_width);
  plan.output = shape(g.batch, out_channels, out_height, out_width);
  const int k = out_channels, c = g.channels, r = g.kernel, s = g.kernel;
  plan.user_weight = CudnnTensorShape{{k, c, r, s}, {c * r * s, r * s, s, 1}};
  plan.filter = layout == CudnnLayout::kNchw
                    ? plan.user_weight
                    : CudnnTensorShape{{k, c, r, s}, {r * s * c, 1, s * c, c}};
  plan.filter_dims = {k, c, r, s};
  plan.padding = {g.padding, g.padding};
  plan.stride = {g.stride, g.stride};
  plan.dilation = {1, 1};
  // The user's input may be strided beyond its element count (a view).
  const absl::Status fits =
      CheckFits(plan.user_input, "input", g, out_channels);
  if (!fits.ok()) return fits;
  return plan;
}

std::array<int, 4> CudnnForwardOutputDims(const CudnnConvolutionPlan& plan) {
  std::array<int, 4> dims = {plan.input.dims[0], plan.filter_dims[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int in = plan.input.dims[2 + i];
    const int extent = (plan.filter_dims[2 + i] - 1) * plan.dilation[i] + 1;
    dims[2 + i] = 1 + (in + 2 * plan.padding[i] - extent) / plan.stride[i];
  }
  return dims;
}

}  // namespace gradsync
