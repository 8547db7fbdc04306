// The cuDNN convolution's descriptor arithmetic, on any machine: what
// cudnn_convolution.cc describes to cuDNN must be the layers' own layouts and
// ConvOutputSize's shapes.
#include "core/device/cudnn_convolution_plan.h"

#include <set>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ConvGeometry Geometry(int batch, int channels, int height, int width,
                      int kernel, int stride, int padding, bool nchw) {
  ConvGeometry g;
  g.batch = batch;
  g.channels = channels;
  g.height = height;
  g.width = width;
  g.kernel = kernel;
  g.stride = stride;
  g.padding = padding;
  g.out_height = ConvOutputSize(height, kernel, stride, padding);
  g.out_width = ConvOutputSize(width, kernel, stride, padding);
  g.input = nchw ? NchwLayout(channels, height, width)
                 : NhwcLayout(channels, height, width);
  return g;
}

TEST(CudnnConvolutionPlanTest, NhwcLayerIsDescribedAsItIsStored) {
  const auto plan =
      PlanCudnnConvolution(Geometry(3, 5, 9, 7, 3, 2, 1, false), 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->input_needs_copy());
  EXPECT_THAT(plan->input.dims, ElementsAre(3, 5, 9, 7));
  // Element (b, c, h, w) of an NHWC batch: b·H·W·C + h·W·C + w·C + c.
  EXPECT_THAT(plan->input.strides, ElementsAre(9 * 7 * 5, 1, 7 * 5, 5));
  EXPECT_THAT(plan->output.dims, ElementsAre(3, 4, 5, 4));
  EXPECT_THAT(plan->output.strides, ElementsAre(5 * 4 * 4, 1, 4 * 4, 4));
  // The output is the layer's [batch·oh·ow × out] matrix, densely.
  EXPECT_EQ(plan->output.span(), 3 * 5 * 4 * 4);
  EXPECT_THAT(plan->filter_dims, ElementsAre(4, 5, 3, 3));
  EXPECT_THAT(plan->user_weight.strides, ElementsAre(45, 9, 3, 1));
  EXPECT_THAT(plan->filter.strides, ElementsAre(45, 1, 15, 5));
  EXPECT_THAT(plan->padding, ElementsAre(1, 1));
  EXPECT_THAT(plan->stride, ElementsAre(2, 2));
  EXPECT_THAT(plan->dilation, ElementsAre(1, 1));
  EXPECT_EQ(plan->input_bytes(), 3 * 5 * 9 * 7 * 4);
  EXPECT_EQ(plan->weight_bytes(), 4 * 5 * 3 * 3 * 4);
}

TEST(CudnnConvolutionPlanTest, NchwInputIsCopiedToNhwc) {
  const auto plan =
      PlanCudnnConvolution(Geometry(2, 3, 32, 32, 3, 1, 1, true), 64);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->input_needs_copy());
  EXPECT_THAT(plan->user_input.strides,
              ElementsAre(3 * 32 * 32, 32 * 32, 32, 1));
  EXPECT_EQ(plan->user_input.dims, plan->input.dims);
  EXPECT_EQ(plan->user_input.span(), plan->input.span());
}

// Both weight descriptions are permutations of one dense block: every
// (k, c, r, s) has its own offset in [0, k·c·r·s).
TEST(CudnnConvolutionPlanTest, WeightLayoutsArePermutationsOfOneBlock) {
  const auto plan =
      PlanCudnnConvolution(Geometry(1, 3, 8, 8, 3, 1, 0, false), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const CudnnTensorShape* shape : {&plan->user_weight, &plan->filter}) {
    std::set<int64_t> offsets;
    for (int k = 0; k < 2; ++k)
      for (int c = 0; c < 3; ++c)
        for (int r = 0; r < 3; ++r)
          for (int s = 0; s < 3; ++s)
            offsets.insert(int64_t{k} * shape->strides[0] +
                           c * shape->strides[1] + r * shape->strides[2] +
                           s * shape->strides[3]);
    EXPECT_EQ(offsets.size(), 54u);
    EXPECT_EQ(*offsets.begin(), 0);
    EXPECT_EQ(*offsets.rbegin(), 53);
  }
  // KRSC: channel fastest, then the kernel column, row, output channel.
  EXPECT_EQ(plan->filter.strides[1], 1);
  EXPECT_LT(plan->filter.strides[3], plan->filter.strides[2]);
  EXPECT_LT(plan->filter.strides[2], plan->filter.strides[0]);
}

// cuDNN's documented output formula and PyTorch's (ConvOutputSize) agree on
// every shape a layer can have, odd sizes, strides and padding included.
TEST(CudnnConvolutionPlanTest, OutputDimsAgreeWithConvOutputSize) {
  int planned = 0;
  for (int size : {1, 2, 3, 5, 7, 8, 17, 32, 224})
    for (int kernel : {1, 2, 3, 5, 7})
      for (int stride : {1, 2, 3})
        for (int padding : {0, 1, 2, 3}) {
          const ConvGeometry g =
              Geometry(2, 3, size, size + 1, kernel, stride, padding, false);
          if (g.out_height < 1 || g.out_width < 1) {
            EXPECT_FALSE(PlanCudnnConvolution(g, 4).ok());
            continue;
          }
          const auto plan = PlanCudnnConvolution(g, 4);
          ASSERT_TRUE(plan.ok()) << plan.status();
          EXPECT_THAT(CudnnForwardOutputDims(*plan),
                      ElementsAre(2, 4, g.out_height, g.out_width))
              << "size " << size << " kernel " << kernel << " stride " << stride
              << " padding " << padding;
          EXPECT_EQ(CudnnForwardOutputDims(*plan), plan->output.dims);
          ++planned;
        }
  EXPECT_GT(planned, 300);
}

TEST(CudnnConvolutionPlanTest, RefusesWhatCudnnCouldNotTake) {
  ConvGeometry g = Geometry(3, 5, 9, 7, 3, 2, 1, false);
  g.out_height += 1;
  auto plan = PlanCudnnConvolution(g, 4);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("ConvOutputSize"));
  EXPECT_THAT(plan.status().message(), HasSubstr("3x5x9x7 (NHWC) -> 4"));

  EXPECT_FALSE(
      PlanCudnnConvolution(Geometry(0, 5, 9, 7, 3, 1, 1, false), 4).ok());
  EXPECT_FALSE(
      PlanCudnnConvolution(Geometry(1, 5, 9, 7, 3, 1, 1, false), 0).ok());
  EXPECT_FALSE(
      PlanCudnnConvolution(Geometry(1, 5, 2, 2, 5, 1, 0, false), 4).ok());

  // A zero stride, then columns stepping onto the next pixel's channels.
  g = Geometry(2, 3, 4, 4, 3, 1, 1, false);
  g.input.channel = 0;
  EXPECT_THAT(PlanCudnnConvolution(g, 4).status().message(),
              HasSubstr("strides"));
  g.input.channel = 1;
  g.input.column = 1;
  plan = PlanCudnnConvolution(g, 4);
  EXPECT_THAT(plan.status().message(), HasSubstr("two elements"));
  g.input = ImageLayout{48, 1, 3, 3};  // rows overlap columns
  EXPECT_FALSE(PlanCudnnConvolution(g, 4).ok());

  // 2^31 elements: beyond cuDNN's int descriptors.
  plan = PlanCudnnConvolution(Geometry(65536, 64, 32, 32, 3, 1, 1, false), 64);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("2^31"));
}

TEST(CudnnConvolutionPlanTest, DescribesOtherLayoutsByStrides) {
  ConvGeometry g = Geometry(1, 2, 3, 3, 1, 1, 0, false);
  g.input = ImageLayout{100, 1, 20, 2};
  EXPECT_THAT(DescribeConvolution(g, 1), HasSubstr("strides 100,1,20,2"));
  // A strided view (gaps between rows) is still a valid input.
  EXPECT_TRUE(PlanCudnnConvolution(g, 1).ok());
}

// The algorithm search's key: the user's input layout does not change it
// (cuDNN reads the NHWC copy), anything cuDNN sees does.
TEST(CudnnConvolutionPlanTest, AlgorithmSearchKeyIsWhatCudnnSees) {
  const auto key = [](const ConvGeometry& g, int out) {
    auto plan = PlanCudnnConvolution(g, out);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? AlgorithmSearchKey(*plan) : std::string();
  };
  const std::string base = key(Geometry(8, 64, 32, 32, 3, 1, 1, false), 64);
  EXPECT_EQ(base, key(Geometry(8, 64, 32, 32, 3, 1, 1, false), 64));
  EXPECT_EQ(base, key(Geometry(8, 64, 32, 32, 3, 1, 1, true), 64));
  std::set<std::string> others = {
      base,
      key(Geometry(16, 64, 32, 32, 3, 1, 1, false), 64),  // batch
      key(Geometry(8, 64, 32, 32, 3, 2, 1, false), 64),   // stride
      key(Geometry(8, 64, 32, 32, 3, 1, 0, false), 64),   // padding
      key(Geometry(8, 64, 32, 32, 1, 1, 0, false), 64),   // kernel
      key(Geometry(8, 64, 32, 32, 3, 1, 1, false), 128),  // outputs
      key(Geometry(8, 32, 32, 32, 3, 1, 1, false), 64),   // inputs
      key(Geometry(8, 64, 16, 32, 3, 1, 1, false), 64)};  // height
  EXPECT_EQ(others.size(), 8u);
}

// --precision=bf16: the same layouts (NHWC tensors, KRSC filter), every
// tensor cuDNN sees a bf16 copy in scratch (half the bytes), the float path's
// layout copy folded into the cast.
TEST(CudnnConvolutionPlanTest, Bf16PlanCopiesEveryTensorAtHalfTheBytes) {
  const ConvGeometry g = Geometry(3, 5, 9, 7, 3, 2, 1, false);
  const auto fp32 = PlanCudnnConvolution(g, 4);
  const auto bf16 = PlanCudnnConvolution(g, 4, CudnnDataType::kBfloat16);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  EXPECT_FALSE(fp32->bf16());
  EXPECT_TRUE(bf16->bf16());
  EXPECT_EQ(fp32->element_bytes(), 4);
  EXPECT_EQ(bf16->element_bytes(), 2);
  // Layouts do not change with the type.
  EXPECT_EQ(bf16->input, fp32->input);
  EXPECT_EQ(bf16->output, fp32->output);
  EXPECT_EQ(bf16->filter, fp32->filter);
  EXPECT_EQ(bf16->filter_dims, fp32->filter_dims);
  // An NHWC input needs no copy in float, and a rounded one in bf16; the
  // output (and its gradient) is a bf16 copy too.
  EXPECT_FALSE(fp32->input_needs_copy());
  EXPECT_FALSE(fp32->output_needs_copy());
  EXPECT_TRUE(bf16->input_needs_copy());
  EXPECT_TRUE(bf16->output_needs_copy());
  // The rounded copy aside, the input is NHWC as cuDNN reads it: a bf16 copy
  // the layer keeps can stand in for it (AcceptsBf16Operands). An NCHW one
  // cannot.
  EXPECT_TRUE(bf16->user_input_is_nhwc());
  const auto nchw_bf16 = PlanCudnnConvolution(
      Geometry(2, 3, 32, 32, 3, 1, 1, true), 64, CudnnDataType::kBfloat16);
  ASSERT_TRUE(nchw_bf16.ok());
  EXPECT_FALSE(nchw_bf16->user_input_is_nhwc());
  EXPECT_EQ(bf16->input_bytes(), 3 * 5 * 9 * 7 * 2);
  EXPECT_EQ(bf16->output_bytes(), 3 * 4 * 5 * 4 * 2);
  EXPECT_EQ(bf16->weight_bytes(), 4 * 5 * 3 * 3 * 2);
  EXPECT_EQ(fp32->output_bytes(), 3 * 4 * 5 * 4 * 4);
}

// The casts walk the user's tensors in NHWC order: the input's walk reads an
// NCHW stem input as NHWC, the user weight's walk reads [out][in][k][k] as
// KRSC (the filter cuDNN is described with), the output's is the identity.
TEST(CudnnConvolutionPlanTest, Bf16CastsWalkIntoCudnnLayouts) {
  const auto plan = PlanCudnnConvolution(Geometry(2, 3, 4, 5, 3, 1, 1, true), 6,
                                         CudnnDataType::kBfloat16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const NhwcWalk input = WalkOf(plan->user_input);
  EXPECT_EQ(input.count(), plan->input.elements());
  // NHWC element (b=1, h=2, w=3, c=1) lies at NCHW ((1·3 + 1)·4 + 2)·5 + 3.
  const int64_t nhwc_index = ((1 * 4 + 2) * 5 + 3) * 3 + 1;
  EXPECT_EQ(input.OffsetOf(nhwc_index), ((1 * 3 + 1) * 4 + 2) * 5 + 3);
  // Every KRSC position maps to the KCRS weight element of the same (k, c,
  // r, s): the order cuDNN's KRSC filter descriptor reads.
  const NhwcWalk weight = WalkOf(plan->user_weight);
  ASSERT_EQ(weight.count(), 6 * 3 * 3 * 3);
  for (int k = 0; k < 6; ++k) {
    for (int r = 0; r < 3; ++r) {
      for (int s = 0; s < 3; ++s) {
        for (int c = 0; c < 3; ++c) {
          const int64_t krsc = k * plan->filter.strides[0] +
                               r * plan->filter.strides[2] +
                               s * plan->filter.strides[3] + c;
          ASSERT_EQ(weight.OffsetOf(krsc), ((k * 3 + c) * 3 + r) * 3 + s);
        }
      }
    }
  }
  const NhwcWalk output = WalkOf(plan->output);
  for (int64_t i = 0; i < output.count(); ++i) {
    ASSERT_EQ(output.OffsetOf(i), i);
  }
}

// kNchw: cuDNN reads and writes NCHW tensors and the model's own KCRS
// weight; the layer's NHWC input and output are copied, an NCHW input (the
// stem's) and the weight are not.
TEST(CudnnConvolutionPlanTest, NchwPlanCopiesTheNhwcActivationsOnly) {
  const ConvGeometry g = Geometry(3, 5, 9, 7, 3, 2, 1, false);
  const auto plan =
      PlanCudnnConvolution(g, 4, CudnnDataType::kFloat, CudnnLayout::kNchw);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->layout, CudnnLayout::kNchw);
  EXPECT_THAT(plan->input.dims, ElementsAre(3, 5, 9, 7));
  EXPECT_THAT(plan->input.strides, ElementsAre(5 * 9 * 7, 9 * 7, 7, 1));
  EXPECT_THAT(plan->output.dims, ElementsAre(3, 4, 5, 4));
  EXPECT_THAT(plan->output.strides, ElementsAre(4 * 5 * 4, 5 * 4, 4, 1));
  // The layer's output stays its NHWC [batch·oh·ow × out] matrix.
  EXPECT_THAT(plan->user_output.strides, ElementsAre(5 * 4 * 4, 1, 4 * 4, 4));
  EXPECT_EQ(plan->user_output.dims, plan->output.dims);
  EXPECT_EQ(plan->filter, plan->user_weight);
  EXPECT_TRUE(plan->input_needs_copy());
  EXPECT_TRUE(plan->output_needs_copy());
  EXPECT_FALSE(plan->weight_needs_copy());
  EXPECT_FALSE(plan->user_input_is_nhwc());
  EXPECT_EQ(plan->input_bytes(), 3 * 5 * 9 * 7 * 4);
  EXPECT_EQ(plan->output_bytes(), 3 * 4 * 5 * 4 * 4);
  EXPECT_EQ(CudnnForwardOutputDims(*plan), plan->output.dims);

  // The stem's NCHW input is read where it lies.
  const auto stem =
      PlanCudnnConvolution(Geometry(2, 3, 32, 32, 3, 1, 1, true), 64,
                           CudnnDataType::kFloat, CudnnLayout::kNchw);
  ASSERT_TRUE(stem.ok()) << stem.status();
  EXPECT_FALSE(stem->input_needs_copy());
  EXPECT_TRUE(stem->output_needs_copy());

  // The NHWC plan of the same shape: the weight is the copied tensor.
  const auto nhwc = PlanCudnnConvolution(g, 4);
  ASSERT_TRUE(nhwc.ok());
  EXPECT_FALSE(nhwc->input_needs_copy());
  EXPECT_FALSE(nhwc->output_needs_copy());
  EXPECT_TRUE(nhwc->weight_needs_copy());
  EXPECT_EQ(nhwc->user_output, nhwc->output);
  // Same elements, other places: the copies are permutations.
  EXPECT_EQ(plan->input.span(), nhwc->input.span());
  EXPECT_EQ(plan->output.span(), nhwc->output.span());
  // Each layout measures its own algorithms.
  EXPECT_NE(AlgorithmSearchKey(*plan), AlgorithmSearchKey(*nhwc));
  EXPECT_STREQ(CudnnLayoutName(plan->layout), "NCHW");
  EXPECT_STREQ(CudnnLayoutName(nhwc->layout), "NHWC");
}

// A model that keeps NCHW activations (ConvGeometry::nchw_output, an NCHW
// input): the NCHW plan reads and writes the layers' own buffers, with no
// copies; an NHWC plan of the same shape copies both ways.
TEST(CudnnConvolutionPlanTest, NchwActivationsNeedNoCopiesOnNchwPlans) {
  ConvGeometry g = Geometry(3, 5, 9, 7, 3, 2, 1, true);
  g.nchw_output = true;
  const auto plan =
      PlanCudnnConvolution(g, 4, CudnnDataType::kFloat, CudnnLayout::kNchw);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->user_input, plan->input);
  EXPECT_EQ(plan->user_output, plan->output);
  EXPECT_THAT(plan->user_output.strides, ElementsAre(4 * 5 * 4, 5 * 4, 4, 1));
  EXPECT_FALSE(plan->input_needs_copy());
  EXPECT_FALSE(plan->output_needs_copy());
  EXPECT_FALSE(plan->weight_needs_copy());

  const auto nhwc = PlanCudnnConvolution(g, 4);
  ASSERT_TRUE(nhwc.ok()) << nhwc.status();
  EXPECT_TRUE(nhwc->input_needs_copy());
  EXPECT_TRUE(nhwc->output_needs_copy());
  EXPECT_EQ(nhwc->user_output, plan->output);
  // What cuDNN sees does not depend on the layers' layout.
  const auto nhwc_of_nhwc =
      PlanCudnnConvolution(Geometry(3, 5, 9, 7, 3, 2, 1, false), 4);
  ASSERT_TRUE(nhwc_of_nhwc.ok());
  EXPECT_EQ(AlgorithmSearchKey(*nhwc), AlgorithmSearchKey(*nhwc_of_nhwc));
}

// bf16 computes on NHWC copies only: an NCHW bf16 plan is refused, naming
// the shape and what to use.
TEST(CudnnConvolutionPlanTest, NchwPlanRefusesBf16) {
  const auto plan =
      PlanCudnnConvolution(Geometry(3, 5, 9, 7, 3, 2, 1, false), 4,
                           CudnnDataType::kBfloat16, CudnnLayout::kNchw);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("3x5x9x7 (NHWC) -> 4"));
  EXPECT_THAT(plan.status().message(), HasSubstr("NCHW is for float32"));
}

// One device measures each (type, shape) once: a bf16 convolution must not
// reuse the float one's algorithms.
TEST(CudnnConvolutionPlanTest, AlgorithmSearchKeyNamesTheDataType) {
  const ConvGeometry g = Geometry(8, 64, 32, 32, 3, 1, 1, false);
  const auto fp32 = PlanCudnnConvolution(g, 64);
  const auto bf16 = PlanCudnnConvolution(g, 64, CudnnDataType::kBfloat16);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  EXPECT_NE(AlgorithmSearchKey(*fp32), AlgorithmSearchKey(*bf16));
  EXPECT_THAT(AlgorithmSearchKey(*bf16), HasSubstr("bf16"));
  EXPECT_THAT(AlgorithmSearchKey(*fp32), HasSubstr("float"));
}

}  // namespace
}  // namespace gradsync
