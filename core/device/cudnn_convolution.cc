// cuDNN convolutions of one geometry on a CUDA device (see the header).
#include "core/device/cudnn_convolution.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/device/cuda_device.h"
#include "core/device/cuda_kernels.h"
#include "core/device/cudnn_algorithm_choice.h"
#include "core/device/cudnn_graph.h"

namespace gradsync {
namespace {

// fp32: plain products, no TF32 (see the header). tf32: cuDNN may pick
// tensor-core kernels, PyTorch's math type for float32 with allow_tf32.
// bf16: tensor-core math, PyTorch's type for 16-bit data.
cudnnMathType_t MathType(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return CUDNN_FMA_MATH;
    case Precision::kTf32:
      return CUDNN_DEFAULT_MATH;
    case Precision::kBf16:
      return CUDNN_TENSOR_OP_MATH;
  }
  return CUDNN_FMA_MATH;
}

cudnnDataType_t DataType(CudnnDataType type) {
  return type == CudnnDataType::kBfloat16 ? CUDNN_DATA_BFLOAT16
                                          : CUDNN_DATA_FLOAT;
}

cudnnStatus_t SetTensor(cudnnTensorDescriptor_t descriptor,
                        const CudnnTensorShape& shape,
                        cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  return cudnnSetTensor4dDescriptorEx(
      descriptor, type, shape.dims[0], shape.dims[1], shape.dims[2],
      shape.dims[3], shape.strides[0], shape.strides[1], shape.strides[2],
      shape.strides[3]);
}

// cuDNN's heuristic results of any direction as the picker's plain structs.
// The workspace of each supported algorithm is asked of cuDNN by `workspace`
// (heuristics' results need not carry it); an algorithm whose query fails is
// refused with the query's error, which the picker's message names if no
// algorithm is left (one odd candidate should not cost the layer its others).
// Heuristics measure nothing, so no time is taken from them: the picker keeps
// cuDNN's order.
template <typename Perf, typename WorkspaceQuery>
std::vector<ConvolutionAlgorithmResult> ToResults(const Perf* perf, int count,
                                                  WorkspaceQuery workspace,
                                                  absl::string_view query_name,
                                                  absl::string_view where) {
  std::vector<ConvolutionAlgorithmResult> results;
  for (int i = 0; i < count; ++i) {
    ConvolutionAlgorithmResult result;
    result.algorithm = static_cast<int>(perf[i].algo);
    result.supported = perf[i].status == CUDNN_STATUS_SUCCESS;
    result.time_ms = -1.0f;
    result.deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
    result.tensor_core_math =
        perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
        perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    result.math_type = static_cast<int>(perf[i].mathType);
    if (result.supported) {
      size_t bytes = 0;
      const absl::Status status =
          CudnnCallStatus(workspace(perf[i].algo, &bytes), query_name, where);
      if (status.ok()) {
        result.workspace_bytes = bytes;
      } else {
        result.supported = false;
        result.unsupported_because = std::string(status.message());
      }
    }
    results.push_back(result);
  }
  return results;
}

// cuDNN's measured results (cudnnFind*Ex) of any direction as the picker's
// plain structs: each carries its time and workspace (the picker then takes
// the fastest that qualifies).
template <typename Perf>
std::vector<ConvolutionAlgorithmResult> ToMeasuredResults(const Perf* perf,
                                                          int count) {
  std::vector<ConvolutionAlgorithmResult> results;
  for (int i = 0; i < count; ++i) {
    ConvolutionAlgorithmResult result;
    result.algorithm = static_cast<int>(perf[i].algo);
    result.supported = perf[i].status == CUDNN_STATUS_SUCCESS;
    result.time_ms = result.supported ? perf[i].time : -1.0f;
    result.workspace_bytes = perf[i].memory;
    result.deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
    result.tensor_core_math =
        perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
        perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    result.math_type = static_cast<int>(perf[i].mathType);
    if (!result.supported) {
      result.unsupported_because = cudnnGetErrorString(perf[i].status);
    }
    results.push_back(result);
  }
  return results;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CudnnConvolution::Create(
    CudnnContext& context, const ConvGeometry& geometry, int out_channels,
    bool accept_bf16_operands) {
  const CudnnDataType data_type =
      context.device().precision() == Precision::kBf16
          ? CudnnDataType::kBfloat16
          : CudnnDataType::kFloat;
  // bf16 computes on NHWC copies whatever --cudnn_layout says; auto
  // computes in the layers' own layout, so that it never copies.
  ConvolutionLayout wanted = data_type == CudnnDataType::kBfloat16
                                 ? ConvolutionLayout::kNhwc
                                 : context.device().cudnn_layout();
  if (wanted == ConvolutionLayout::kAuto) {
    wanted = geometry.nchw_output ? ConvolutionLayout::kNchw
                                  : ConvolutionLayout::kNhwc;
  }
  absl::StatusOr<std::unique_ptr<CudnnConvolution>> kernel;
  switch (wanted) {
    case ConvolutionLayout::kAuto:  // resolved above
    case ConvolutionLayout::kNhwc:
    case ConvolutionLayout::kNchw:
      kernel =
          Make(context, geometry, out_channels, accept_bf16_operands, data_type,
               wanted == ConvolutionLayout::kNchw ? CudnnLayout::kNchw
                                                  : CudnnLayout::kNhwc);
      break;
    case ConvolutionLayout::kFastest:
      kernel =
          MakeFastest(context, geometry, out_channels, accept_bf16_operands);
      break;
  }
  if (!kernel.ok()) return kernel.status();
  GS_LOG(DEBUG) << (*kernel)->where_ << ": " << (*kernel)->algorithms();
  return std::unique_ptr<ConvolutionKernel>(*std::move(kernel));
}

absl::StatusOr<std::unique_ptr<CudnnConvolution>> CudnnConvolution::Make(
    CudnnContext& context, const ConvGeometry& geometry, int out_channels,
    bool accept_bf16_operands, CudnnDataType data_type, CudnnLayout layout) {
  ASSIGN_OR_RETURN(
      CudnnConvolutionPlan plan,
      PlanCudnnConvolution(geometry, out_channels, data_type, layout));
  std::unique_ptr<CudnnConvolution> kernel(new CudnnConvolution(
      context, geometry, out_channels, plan, accept_bf16_operands));
  RETURN_IF_ERROR(kernel->Build());
  return kernel;
}

absl::StatusOr<std::unique_ptr<CudnnConvolution>> CudnnConvolution::MakeFastest(
    CudnnContext& context, const ConvGeometry& geometry, int out_channels,
    bool accept_bf16_operands) {
  const auto make = [&](CudnnLayout layout) {
    return Make(context, geometry, out_channels, accept_bf16_operands,
                CudnnDataType::kFloat, layout);
  };
  ASSIGN_OR_RETURN(const CudnnConvolutionPlan nhwc_plan,
                   PlanCudnnConvolution(geometry, out_channels));
  // Which layout wins depends on the copies each needs, so on the layers'
  // own layouts too, not only on what cuDNN sees (an NCHW input is read in
  // place by the NCHW kernel and copied by the NHWC one, an NHWC input the
  // other way round).
  const std::string key = absl::StrCat(
      AlgorithmSearchKey(nhwc_plan), " from ",
      nhwc_plan.input_needs_copy() ? "other" : "NHWC", " input to ",
      nhwc_plan.output_needs_copy() ? "other" : "NHWC", " output");
  const std::optional<CudnnLayout> known = context.ChosenLayout(key);
  if (known == CudnnLayout::kNhwc) return make(CudnnLayout::kNhwc);
  if (known == CudnnLayout::kNchw) {
    absl::StatusOr<std::unique_ptr<CudnnConvolution>> nchw =
        make(CudnnLayout::kNchw);
    if (nchw.ok()) return nchw;
    // Another layer of the shape made it; this one falls back rather than
    // fail a layout the layers' own can stand in for.
    GS_LOG(WARNING) << nchw.status() << "; NHWC runs";
    return make(CudnnLayout::kNhwc);
  }

  // The layers' own layout first: its failure is the layer's, but a
  // failure of its timing alone (the timing's scratch, events) leaves the
  // kernel plain --cudnn_layout=nhwc would have run.
  ASSIGN_OR_RETURN(std::unique_ptr<CudnnConvolution> nhwc,
                   make(CudnnLayout::kNhwc));
  LayoutTiming timing;
  const absl::StatusOr<float> nhwc_ms = nhwc->TimeStep();
  if (!nhwc_ms.ok()) {
    GS_LOG(WARNING) << nhwc->where_ << ": " << nhwc_ms.status()
                    << " timing NHWC; NHWC runs untimed";
    RETURN_IF_ERROR(context.device().Synchronize());
    return nhwc;
  }
  timing.nhwc_ms = *nhwc_ms;
  absl::StatusOr<std::unique_ptr<CudnnConvolution>> nchw =
      make(CudnnLayout::kNchw);
  if (nchw.ok()) {
    const absl::StatusOr<float> ms = (*nchw)->TimeStep();
    if (ms.ok()) {
      timing.nchw_ms = *ms;
    } else {
      timing.nchw_unavailable = std::string(ms.status().message());
    }
  } else {
    timing.nchw_unavailable = std::string(nchw.status().message());
  }
  if (!timing.nchw_unavailable.empty()) {
    cudaGetLastError();  // NCHW's failure is not the NHWC kernel's
    // Whatever NCHW queued ends before its kernel (and any graph plan it
    // made) is destroyed; an error that outlives the launch (a fault) is
    // the device's, and ends the set-up here rather than at an unrelated
    // later call.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context.device().stream()),
                         absl::StrCat(nhwc->where_, ": after NCHW's failure"));
    GS_LOG(WARNING) << nhwc->where_ << ": NCHW not timed ("
                    << timing.nchw_unavailable << "); NHWC runs";
  }
  // The first device to time a shape decides it for every device of the
  // GPU (CudnnContext): another may have remembered it while this one
  // timed, and then its choice runs here too.
  context.RememberLayout(
      key, PrefersNchw(timing) ? CudnnLayout::kNchw : CudnnLayout::kNhwc);
  const bool use_nchw =
      context.ChosenLayout(key) == CudnnLayout::kNchw && nchw.ok();
  std::unique_ptr<CudnnConvolution> chosen =
      use_nchw ? *std::move(nchw) : std::move(nhwc);
  chosen->layout_choice_ = DescribeLayoutChoice(timing);
  GS_LOG(INFO) << chosen->where_ << ": " << chosen->layout_choice_;
  return chosen;
}

absl::StatusOr<float> CudnnConvolution::TimeStep() {
  RETURN_IF_ERROR(context_.device().MakeCurrent());
  // x and dx share a buffer (the input pass writes dx after the weight pass
  // has read x), y and dy another, the weight and its gradient a third.
  const size_t input_bytes =
      static_cast<size_t>(plan_.user_input.span()) * sizeof(float);
  const size_t output_bytes =
      static_cast<size_t>(plan_.user_output.span()) * sizeof(float);
  const int64_t weights = plan_.user_weight.elements();
  const size_t weight_bytes = static_cast<size_t>(weights) * sizeof(float);
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kSearchInput, input_bytes));
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kSearchOutput, output_bytes));
  RETURN_IF_ERROR(
      context_.Reserve(CudnnContext::kSearchWeights, 2 * weight_bytes));
  float* x = static_cast<float*>(context_.scratch(CudnnContext::kSearchInput));
  float* y = static_cast<float*>(context_.scratch(CudnnContext::kSearchOutput));
  float* w =
      static_cast<float*>(context_.scratch(CudnnContext::kSearchWeights));
  float* dw = w + weights;
  const cudaStream_t stream = context_.device().stream();
  const std::array<std::pair<void*, size_t>, 3> buffers{
      {{x, input_bytes}, {y, output_bytes}, {w, 2 * weight_bytes}}};
  for (const auto& [buffer, bytes] : buffers) {
    RETURN_IF_ERROR(CudaCallStatus(cudaMemsetAsync(buffer, 0, bytes, stream),
                                   "cudaMemsetAsync", where_));
  }
  return MedianDeviceMs(
      stream, 3,
      [&]() -> absl::Status {
        RETURN_IF_ERROR(RunForward(x, w, y));
        return RunBackward(x, y, w, dw, x, [] {});
      },
      where_);
}

CudnnConvolution::CudnnConvolution(CudnnContext& context,
                                   const ConvGeometry& geometry,
                                   int out_channels,
                                   const CudnnConvolutionPlan& plan,
                                   bool accept_bf16_operands)
    : ConvolutionKernel(geometry, out_channels),
      context_(context),
      plan_(plan),
      accept_bf16_operands_(accept_bf16_operands),
      where_(absl::StrCat(context.device().name(), ", convolution ",
                          DescribeConvolution(geometry, out_channels))) {}

CudnnConvolution::~CudnnConvolution() {
  // Destroying a null descriptor is not an error; nothing here can fail in a
  // way a destructor could report.
  for (cudnnTensorDescriptor_t tensor :
       {user_input_, input_, user_output_, output_, user_weight_,
        filter_tensor_}) {
    if (tensor != nullptr) cudnnDestroyTensorDescriptor(tensor);
  }
  if (filter_ != nullptr) cudnnDestroyFilterDescriptor(filter_);
  if (convolution_ != nullptr) cudnnDestroyConvolutionDescriptor(convolution_);
}

absl::Status CudnnConvolution::Build() {
  RETURN_IF_ERROR(context_.device().MakeCurrent());
  for (cudnnTensorDescriptor_t* tensor :
       {&user_input_, &input_, &user_output_, &output_, &user_weight_,
        &filter_tensor_}) {
    CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(tensor), where_);
  }
  CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&filter_), where_);
  CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&convolution_),
                        where_);
  CUDNN_RETURN_IF_ERROR(SetTensor(user_input_, plan_.user_input), where_);
  // What cuDNN computes on: float, or bf16 copies (the plan's data type).
  // The user's tensors and the float filter tensor are float32; they
  // describe the float path's cudnnTransformTensor copies only.
  const cudnnDataType_t data_type = DataType(plan_.data_type);
  CUDNN_RETURN_IF_ERROR(SetTensor(input_, plan_.input, data_type), where_);
  CUDNN_RETURN_IF_ERROR(SetTensor(user_output_, plan_.user_output), where_);
  CUDNN_RETURN_IF_ERROR(SetTensor(output_, plan_.output, data_type), where_);
  CUDNN_RETURN_IF_ERROR(SetTensor(user_weight_, plan_.user_weight), where_);
  CUDNN_RETURN_IF_ERROR(SetTensor(filter_tensor_, plan_.filter), where_);
  const std::array<int, 4>& f = plan_.filter_dims;
  const cudnnTensorFormat_t filter_format = plan_.layout == CudnnLayout::kNchw
                                                ? CUDNN_TENSOR_NCHW
                                                : CUDNN_TENSOR_NHWC;
  CUDNN_RETURN_IF_ERROR(
      cudnnSetFilter4dDescriptor(filter_, data_type, filter_format, f[0], f[1],
                                 f[2], f[3]),
      where_);
  // Cross-correlation, as PyTorch's Conv2d (and im2col) compute; the
  // compute type float32 whatever the data type (bf16: float accumulation).
  CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolution2dDescriptor(
          convolution_, plan_.padding[0], plan_.padding[1], plan_.stride[0],
          plan_.stride[1], plan_.dilation[0], plan_.dilation[1],
          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      where_);
  CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionMathType(convolution_,
                                  MathType(context_.device().precision())),
      where_);

  // cuDNN's idea of the output must be the layer's (the plan's test checks
  // the formulas agree; this checks cuDNN does).
  std::array<int, 4> dims{};
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
                            convolution_, input_, filter_, &dims[0], &dims[1],
                            &dims[2], &dims[3]),
                        where_);
  if (dims != plan_.output.dims) {
    return absl::InternalError(absl::StrCat(
        where_, ": cuDNN computes an output of ", dims[0], "x", dims[1], "x",
        dims[2], "x", dims[3], " where the layer expects ",
        plan_.output.dims[0], "x", plan_.output.dims[1], "x",
        plan_.output.dims[2], "x", plan_.output.dims[3]));
  }
  RETURN_IF_ERROR(ChooseAlgorithms());

  const size_t workspace =
      std::max({forward_workspace_, input_workspace_, weight_workspace_});
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kWorkspace, workspace));
  const size_t weight_bytes = static_cast<size_t>(plan_.weight_bytes());
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kWeights, weight_bytes));
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kWeightGrad, weight_bytes));
  if (plan_.input_needs_copy()) {
    RETURN_IF_ERROR(context_.Reserve(CudnnContext::kInput,
                                     static_cast<size_t>(plan_.input_bytes())));
  }
  if (plan_.output_needs_copy()) {
    RETURN_IF_ERROR(context_.Reserve(
        CudnnContext::kOutput, static_cast<size_t>(plan_.output_bytes())));
  }
  return absl::OkStatus();
}

absl::Status CudnnConvolution::ReserveSearchBuffers() {
  // The filter and its gradient go to the KRSC weight scratch, the input
  // gradient to the input's, the output's gradient is read from the output's.
  const size_t weight_bytes = static_cast<size_t>(plan_.weight_bytes());
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kWeights, weight_bytes));
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kWeightGrad, weight_bytes));
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kSearchInput,
                                   static_cast<size_t>(plan_.input_bytes())));
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kSearchOutput,
                                   static_cast<size_t>(plan_.output_bytes())));
  return absl::OkStatus();
}

absl::StatusOr<ConvolutionAlgorithmResult> CudnnConvolution::Search(
    Direction direction, const std::vector<ConvolutionAlgorithmResult>& ranked,
    const ConvolutionAlgorithmPolicy& policy, absl::string_view what) {
  // The heuristics' pick: what runs if the measured search cannot.
  ASSIGN_OR_RETURN(const ConvolutionAlgorithmResult heuristic,
                   PickConvolutionAlgorithm(ranked, policy, what));
  RETURN_IF_ERROR(context_.Reserve(CudnnContext::kWorkspace,
                                   SearchWorkspaceBytes(ranked, policy)));
  RETURN_IF_ERROR(ReserveSearchBuffers());
  const cudnnHandle_t handle = context_.handle();
  void* workspace = context_.scratch(CudnnContext::kWorkspace);
  const size_t workspace_bytes = std::min(
      context_.scratch_bytes(CudnnContext::kWorkspace), policy.workspace_limit);
  void* input = context_.scratch(CudnnContext::kSearchInput);
  void* output = context_.scratch(CudnnContext::kSearchOutput);
  void* weight = context_.scratch(CudnnContext::kWeights);
  void* weight_grad = context_.scratch(CudnnContext::kWeightGrad);
  std::vector<ConvolutionAlgorithmResult> measured;
  absl::Status searched;
  int count = 0;
  switch (direction) {
    case Direction::kForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      searched = CudnnCallStatus(
          cudnnFindConvolutionForwardAlgorithmEx(
              handle, input_, input, filter_, weight, convolution_, output_,
              output, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf, workspace,
              workspace_bytes),
          "cudnnFindConvolutionForwardAlgorithmEx", where_);
      if (searched.ok()) measured = ToMeasuredResults(perf, count);
      break;
    }
    case Direction::kInputGradient: {
      cudnnConvolutionBwdDataAlgoPerf_t
          perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      searched = CudnnCallStatus(
          cudnnFindConvolutionBackwardDataAlgorithmEx(
              handle, filter_, weight, output_, output, convolution_, input_,
              input, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf,
              workspace, workspace_bytes),
          "cudnnFindConvolutionBackwardDataAlgorithmEx", where_);
      if (searched.ok()) measured = ToMeasuredResults(perf, count);
      break;
    }
    case Direction::kWeightGradient: {
      cudnnConvolutionBwdFilterAlgoPerf_t
          perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      searched = CudnnCallStatus(
          cudnnFindConvolutionBackwardFilterAlgorithmEx(
              handle, input_, input, output_, output, convolution_, filter_,
              weight_grad, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
              perf, workspace, workspace_bytes),
          "cudnnFindConvolutionBackwardFilterAlgorithmEx", where_);
      if (searched.ok()) measured = ToMeasuredResults(perf, count);
      break;
    }
  }
  if (!searched.ok()) {
    GS_LOG(WARNING) << searched << "; " << what
                    << " runs the heuristics' choice, algorithm "
                    << heuristic.algorithm;
    return heuristic;
  }
  absl::StatusOr<ConvolutionAlgorithmResult> fastest =
      PickConvolutionAlgorithm(measured, policy, what);
  if (!fastest.ok()) {
    GS_LOG(WARNING) << fastest.status() << " (measured); " << what
                    << " runs the heuristics' choice, algorithm "
                    << heuristic.algorithm;
    return heuristic;
  }
  return *fastest;
}

absl::Status CudnnConvolution::ChooseAlgorithms() {
  const std::string key = AlgorithmSearchKey(plan_);
  if (const std::optional<ChosenConvolutionAlgorithms> known =
          context_.Chosen(key)) {
    const absl::Status made = MakeGraphs(*known);
    if (made.ok()) {
      Use(*known);
      return absl::OkStatus();
    }
    GS_LOG(WARNING) << made << "; " << where_ << " searches its own algorithms";
    // The directions MakeGraphs made before it failed are not the search's.
    for (std::unique_ptr<CudnnGraphConvolution>& graph : graph_) graph.reset();
  }
  const cudnnHandle_t handle = context_.handle();
  ConvolutionAlgorithmPolicy policy;
  policy.workspace_limit = context_.workspace_limit();
  policy.allow_tensor_core_math =
      context_.device().precision() != Precision::kFp32;
  // bf16: cuDNN's non-deterministic weight-gradient algorithms (0 and 3)
  // add partial sums into the bf16 output with atomics, rounding it to bf16
  // at each addition; the first GPU run measured weight gradients several
  // bf16 units off the float64 sum of the rounded operands
  // (bf16_precision_test), and different bits from run to run. The
  // deterministic ones sum in float32 and round once. Every direction of a
  // bf16 convolution writes a bf16 output, so the rule holds for all three
  // (the graph API's engines may split any of them).
  policy.require_deterministic = plan_.bf16();
  ChosenConvolutionAlgorithms chosen;

  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
                              handle, input_, filter_, convolution_, output_,
                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
                          where_);
    const std::vector<ConvolutionAlgorithmResult> ranked = ToResults(
        perf, count,
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(
              handle, input_, filter_, convolution_, output_, algo, bytes);
        },
        "cudnnGetConvolutionForwardWorkspaceSize", where_);
    ASSIGN_OR_RETURN(const ConvolutionAlgorithmResult legacy,
                     Search(Direction::kForward, ranked, policy,
                            absl::StrCat("forward, ", where_)));
    ASSIGN_OR_RETURN(chosen.forward,
                     SearchGraph(Direction::kForward, legacy, policy));
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(
            handle, filter_, output_, convolution_, input_,
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
        where_);
    const std::vector<ConvolutionAlgorithmResult> ranked = ToResults(
        perf, count,
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(
              handle, filter_, output_, convolution_, input_, algo, bytes);
        },
        "cudnnGetConvolutionBackwardDataWorkspaceSize", where_);
    ASSIGN_OR_RETURN(const ConvolutionAlgorithmResult legacy,
                     Search(Direction::kInputGradient, ranked, policy,
                            absl::StrCat("input gradient, ", where_)));
    ASSIGN_OR_RETURN(chosen.input_gradient,
                     SearchGraph(Direction::kInputGradient, legacy, policy));
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            handle, input_, output_, convolution_, filter_,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
        where_);
    const std::vector<ConvolutionAlgorithmResult> ranked = ToResults(
        perf, count,
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(
              handle, input_, output_, convolution_, filter_, algo, bytes);
        },
        "cudnnGetConvolutionBackwardFilterWorkspaceSize", where_);
    ASSIGN_OR_RETURN(const ConvolutionAlgorithmResult legacy,
                     Search(Direction::kWeightGradient, ranked, policy,
                            absl::StrCat("weight gradient, ", where_)));
    ASSIGN_OR_RETURN(chosen.weight_gradient,
                     SearchGraph(Direction::kWeightGradient, legacy, policy));
  }
  // The search ran with the precision's math type on the descriptor; each
  // direction now runs with its own (Use), so the descriptor goes back.
  CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionMathType(convolution_,
                                  MathType(context_.device().precision())),
      where_);
  context_.Remember(key, chosen);
  Use(chosen);
  return absl::OkStatus();
}

namespace {

GraphDirection GraphDirectionOf(int direction) {
  switch (direction) {
    case 0:
      return GraphDirection::kForward;
    case 1:
      return GraphDirection::kBackwardData;
    default:
      return GraphDirection::kBackwardFilter;
  }
}

}  // namespace

absl::StatusOr<ConvolutionAlgorithmResult> CudnnConvolution::SearchGraph(
    Direction direction, const ConvolutionAlgorithmResult& legacy,
    const ConvolutionAlgorithmPolicy& policy) {
  if (!context_.device().cudnn_graph()) return legacy;
  const int d = static_cast<int>(direction);
  // The legacy search's time where it measured one (its fallback to the
  // heuristics' pick has none, and the graph's measured pick wins).
  const std::string legacy_time =
      legacy.time_ms >= 0
          ? absl::StrCat("legacy ", absl::StrFormat("%.3f", legacy.time_ms),
                         " ms; ")
          : "legacy not timed; ";
  absl::StatusOr<std::unique_ptr<CudnnGraphConvolution>> graph =
      CudnnGraphConvolution::Create(context_.handle(), plan_,
                                    GraphDirectionOf(d), where_);
  if (!graph.ok()) {
    GS_LOG(WARNING) << graph.status() << "; the legacy algorithm runs";
    graph_search_[d] = absl::StrCat(legacy_time, "graph API: no graph (",
                                    graph.status().message(), ")");
    return legacy;
  }
  // From here a failure is the graph search's, not the layer's: the legacy
  // algorithm, measured already, runs instead.
  const auto legacy_after = [&](const absl::Status& status) {
    GS_LOG(WARNING) << status << "; the legacy algorithm runs";
    graph_search_[d] =
        absl::StrCat(legacy_time, "graph API: failed (", status.message(), ")");
    return legacy;
  };
  const size_t workspace = (*graph)->Prepare(policy);
  const absl::Status reserved =
      context_.Reserve(CudnnContext::kWorkspace, workspace);
  if (!reserved.ok()) return legacy_after(reserved);
  RETURN_IF_ERROR(ReserveSearchBuffers());
  // The search tensors in the direction's parts: x (or dx), w (or dw), y
  // (or dy).
  void* x = context_.scratch(CudnnContext::kSearchInput);
  void* y = context_.scratch(CudnnContext::kSearchOutput);
  void* w = context_.scratch(direction == Direction::kWeightGradient
                                 ? CudnnContext::kWeightGrad
                                 : CudnnContext::kWeights);
  absl::StatusOr<ConvolutionAlgorithmResult> fastest = (*graph)->Search(
      context_.device().stream(), x, w, y,
      context_.scratch(CudnnContext::kWorkspace),
      std::min(context_.scratch_bytes(CudnnContext::kWorkspace),
               policy.workspace_limit));
  graph_search_[d] =
      absl::StrCat(legacy_time, DescribeGraphSearch((*graph)->summary()));
  if (!fastest.ok()) {
    if (!absl::IsNotFound(fastest.status())) {
      return legacy_after(fastest.status());
    }
    GS_LOG(INFO) << fastest.status().message() << "; the legacy algorithm runs";
    return legacy;
  }
  if (legacy.time_ms >= 0 && legacy.time_ms <= fastest->time_ms) return legacy;
  graph_[d] = std::move(*graph);
  return *fastest;
}

absl::Status CudnnConvolution::MakeGraphs(
    const ChosenConvolutionAlgorithms& chosen) {
  const std::array<const ConvolutionAlgorithmResult*, 3> results{
      &chosen.forward, &chosen.input_gradient, &chosen.weight_gradient};
  for (int d = 0; d < 3; ++d) {
    graph_[d].reset();
    if (results[d]->graph_config < 0) continue;
    ASSIGN_OR_RETURN(
        std::unique_ptr<CudnnGraphConvolution> graph,
        CudnnGraphConvolution::Create(context_.handle(), plan_,
                                      GraphDirectionOf(d), where_));
    RETURN_IF_ERROR(graph->Use(results[d]->graph_config,
                               results[d]->graph_engine,
                               results[d]->workspace_bytes));
    graph_[d] = std::move(graph);
  }
  return absl::OkStatus();
}

absl::Status CudnnConvolution::ConvolveForward(const void* x, const void* w,
                                               void* y) {
  void* workspace = context_.scratch(CudnnContext::kWorkspace);
  if (graph_[0] != nullptr) return graph_[0]->Execute(x, w, y, workspace);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionMathType(convolution_, forward_math_), where_);
  CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionForward(context_.handle(), &one, input_, x, filter_, w,
                              convolution_, forward_algorithm_, workspace,
                              forward_workspace_, &zero, output_, y),
      where_);
  return absl::OkStatus();
}

absl::Status CudnnConvolution::ConvolveBackwardData(const void* w,
                                                    const void* dy, void* dx) {
  void* workspace = context_.scratch(CudnnContext::kWorkspace);
  if (graph_[1] != nullptr) return graph_[1]->Execute(dx, w, dy, workspace);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(convolution_, input_math_),
                        where_);
  CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionBackwardData(
          context_.handle(), &one, filter_, w, output_, dy, convolution_,
          input_algorithm_, workspace, input_workspace_, &zero, input_, dx),
      where_);
  return absl::OkStatus();
}

absl::Status CudnnConvolution::ConvolveBackwardFilter(const void* x,
                                                      const void* dy,
                                                      void* dw) {
  void* workspace = context_.scratch(CudnnContext::kWorkspace);
  if (graph_[2] != nullptr) return graph_[2]->Execute(x, dw, dy, workspace);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(convolution_, weight_math_),
                        where_);
  CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionBackwardFilter(
          context_.handle(), &one, input_, x, output_, dy, convolution_,
          weight_algorithm_, workspace, weight_workspace_, &zero, filter_, dw),
      where_);
  return absl::OkStatus();
}

void CudnnConvolution::Use(const ChosenConvolutionAlgorithms& chosen) {
  chosen_ = {chosen.forward, chosen.input_gradient, chosen.weight_gradient};
  // cuDNN decides tensor-core use from the algorithm and the descriptor's
  // math type together, so each direction runs with its result's type (as
  // PyTorch does); fp32 keeps CUDNN_FMA_MATH whatever the result says.
  const bool tensor_cores = context_.device().precision() != Precision::kFp32;
  const auto math_of =
      [tensor_cores](const ConvolutionAlgorithmResult& picked) {
        return tensor_cores ? static_cast<cudnnMathType_t>(picked.math_type)
                            : CUDNN_FMA_MATH;
      };
  forward_algorithm_ =
      static_cast<cudnnConvolutionFwdAlgo_t>(chosen.forward.algorithm);
  forward_workspace_ = chosen.forward.workspace_bytes;
  forward_math_ = math_of(chosen.forward);
  input_algorithm_ = static_cast<cudnnConvolutionBwdDataAlgo_t>(
      chosen.input_gradient.algorithm);
  input_workspace_ = chosen.input_gradient.workspace_bytes;
  input_math_ = math_of(chosen.input_gradient);
  weight_algorithm_ = static_cast<cudnnConvolutionBwdFilterAlgo_t>(
      chosen.weight_gradient.algorithm);
  weight_workspace_ = chosen.weight_gradient.workspace_bytes;
  weight_math_ = math_of(chosen.weight_gradient);
}

namespace {

// cuDNN's names of the algorithms, without the enums' common prefix.
std::string AlgorithmName(cudnnConvolutionFwdAlgo_t algorithm) {
  switch (algorithm) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    default:
      return absl::StrCat("algorithm ", static_cast<int>(algorithm));
  }
}

std::string AlgorithmName(cudnnConvolutionBwdDataAlgo_t algorithm) {
  switch (algorithm) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0:
      return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
      return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
      return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD:
      return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    default:
      return absl::StrCat("algorithm ", static_cast<int>(algorithm));
  }
}

std::string AlgorithmName(cudnnConvolutionBwdFilterAlgo_t algorithm) {
  switch (algorithm) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
      return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
      return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
      return "ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
      return "FFT_TILING";
    default:
      return absl::StrCat("algorithm ", static_cast<int>(algorithm));
  }
}

// Tensor cores or not: what the direction runs with.
const char* MathName(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      return "default math";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor ops";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor ops, conversion allowed";
    case CUDNN_FMA_MATH:
      return "FMA";
  }
  return "unknown math";
}

}  // namespace

std::string CudnnConvolution::algorithms() const {
  // A direction on the graph API: its engine, tensor cores or not; then,
  // where this layer searched the graph API, how that went.
  const auto describe = [this](int d, const std::string& legacy,
                               cudnnMathType_t math, size_t workspace) {
    const std::string search = graph_search_[d].empty()
                                   ? ""
                                   : absl::StrCat(" [", graph_search_[d], "]");
    if (graph_[d] == nullptr) {
      return absl::StrCat(legacy, " (", MathName(math), ", ", workspace,
                          " bytes)", search);
    }
    return absl::StrCat("graph engine ", chosen_[d].graph_engine, " (",
                        chosen_[d].tensor_core_math ? "tensor cores" : "FMA",
                        ", ", workspace, " bytes)", search);
  };
  const std::string choice =
      layout_choice_.empty() ? "" : absl::StrCat(" [", layout_choice_, "]");
  const bool copies = plan_.input_needs_copy() || plan_.output_needs_copy();
  const char* layout = plan_.layout == CudnnLayout::kNhwc ? ""
                       : copies                           ? "NCHW copies: "
                                                          : "NCHW: ";
  return absl::StrCat(layout, "forward ",
                      describe(0, AlgorithmName(forward_algorithm_),
                               forward_math_, forward_workspace_),
                      ", input gradient ",
                      describe(1, AlgorithmName(input_algorithm_), input_math_,
                               input_workspace_),
                      ", weight gradient ",
                      describe(2, AlgorithmName(weight_algorithm_),
                               weight_math_, weight_workspace_),
                      choice);
}

void CudnnConvolution::Keep(const absl::Status& status) {
  context_.device().Record(status);
}

absl::Status CudnnConvolution::Launched(cudaError_t error,
                                        absl::string_view kernel) {
  return CudaCallStatus(error, absl::StrCat(kernel, " kernel launch"), where_);
}

absl::StatusOr<const void*> CudnnConvolution::InputAsBf16(const float* x) {
  uint16_t* copy =
      static_cast<uint16_t*>(context_.scratch(CudnnContext::kInput));
  RETURN_IF_ERROR(
      Launched(cuda_kernels::RoundToBfloat16(context_.device().stream(), x,
                                             WalkOf(plan_.user_input), copy),
               "RoundToBfloat16 (input to NHWC)"));
  return copy;
}

absl::StatusOr<const void*> CudnnConvolution::WeightAsBf16(
    const float* weight) {
  uint16_t* copy =
      static_cast<uint16_t*>(context_.scratch(CudnnContext::kWeights));
  RETURN_IF_ERROR(
      Launched(cuda_kernels::RoundToBfloat16(context_.device().stream(), weight,
                                             WalkOf(plan_.user_weight), copy),
               "RoundToBfloat16 (weight to KRSC)"));
  return copy;
}

absl::StatusOr<const void*> CudnnConvolution::OutputGradientAsBf16(
    const float* dy) {
  uint16_t* copy =
      static_cast<uint16_t*>(context_.scratch(CudnnContext::kOutput));
  RETURN_IF_ERROR(
      Launched(cuda_kernels::RoundToBfloat16(context_.device().stream(), dy,
                                             WalkOf(plan_.user_output), copy),
               "RoundToBfloat16 (output gradient)"));
  return copy;
}

absl::Status CudnnConvolution::RunForwardBf16(const void* input,
                                              const float* weight, float* y,
                                              uint16_t* y_bf16) {
  ASSIGN_OR_RETURN(const void* filter, WeightAsBf16(weight));
  void* output = y_bf16 != nullptr ? static_cast<void*>(y_bf16)
                                   : context_.scratch(CudnnContext::kOutput);
  RETURN_IF_ERROR(ConvolveForward(input, filter, output));
  if (y_bf16 != nullptr) return absl::OkStatus();
  return Launched(
      cuda_kernels::WidenFromBfloat16(context_.device().stream(),
                                      static_cast<const uint16_t*>(output),
                                      WalkOf(plan_.user_output), y),
      "WidenFromBfloat16 (output)");
}

absl::Status CudnnConvolution::RunBackwardWeightsBf16(const void* input,
                                                      const void* output_grad,
                                                      float* weight_grad) {
  void* krsc_grad = context_.scratch(CudnnContext::kWeightGrad);
  RETURN_IF_ERROR(ConvolveBackwardFilter(input, output_grad, krsc_grad));
  // KRSC bf16 back to PyTorch's order in float32: the walk of the user's
  // weight visits it in KRSC order.
  return Launched(
      cuda_kernels::WidenFromBfloat16(context_.device().stream(),
                                      static_cast<const uint16_t*>(krsc_grad),
                                      WalkOf(plan_.user_weight), weight_grad),
      "WidenFromBfloat16 (weight gradient to KCRS)");
}

absl::Status CudnnConvolution::RunBackwardInputBf16(const void* output_grad,
                                                    const float* weight,
                                                    float* dx,
                                                    uint16_t* dx_bf16) {
  ASSIGN_OR_RETURN(const void* filter, WeightAsBf16(weight));
  void* input_grad = dx_bf16 != nullptr
                         ? static_cast<void*>(dx_bf16)
                         : context_.scratch(CudnnContext::kInput);
  RETURN_IF_ERROR(ConvolveBackwardData(filter, output_grad, input_grad));
  if (dx_bf16 != nullptr) return absl::OkStatus();
  return Launched(
      cuda_kernels::WidenFromBfloat16(context_.device().stream(),
                                      static_cast<const uint16_t*>(input_grad),
                                      WalkOf(plan_.user_input), dx),
      "WidenFromBfloat16 (input gradient)");
}

absl::Status CudnnConvolution::Transform(cudnnTensorDescriptor_t from_desc,
                                         const float* from,
                                         cudnnTensorDescriptor_t to_desc,
                                         float* to) {
  const float one = 1.0f, zero = 0.0f;
  CUDNN_RETURN_IF_ERROR(cudnnTransformTensor(context_.handle(), &one, from_desc,
                                             from, &zero, to_desc, to),
                        where_);
  return absl::OkStatus();
}

absl::StatusOr<const float*> CudnnConvolution::InputForCudnn(const float* x) {
  if (!plan_.input_needs_copy()) return x;
  float* copy = static_cast<float*>(context_.scratch(CudnnContext::kInput));
  RETURN_IF_ERROR(Transform(user_input_, x, input_, copy));
  return copy;
}

absl::StatusOr<const float*> CudnnConvolution::WeightForCudnn(
    const float* weight) {
  if (!plan_.weight_needs_copy()) return weight;
  float* copy = static_cast<float*>(context_.scratch(CudnnContext::kWeights));
  RETURN_IF_ERROR(Transform(user_weight_, weight, filter_tensor_, copy));
  return copy;
}

absl::StatusOr<const float*> CudnnConvolution::OutputGradientForCudnn(
    const float* dy) {
  if (!plan_.output_needs_copy()) return dy;
  float* copy = static_cast<float*>(context_.scratch(CudnnContext::kOutput));
  RETURN_IF_ERROR(Transform(user_output_, dy, output_, copy));
  return copy;
}

absl::Status CudnnConvolution::RunForward(const float* x, const float* weight,
                                          float* y) {
  RETURN_IF_ERROR(context_.device().MakeCurrent());
  if (plan_.bf16()) {
    ASSIGN_OR_RETURN(const void* input, InputAsBf16(x));
    return RunForwardBf16(input, weight, y, nullptr);
  }
  ASSIGN_OR_RETURN(const float* input, InputForCudnn(x));
  ASSIGN_OR_RETURN(const float* filter, WeightForCudnn(weight));
  if (!plan_.output_needs_copy()) return ConvolveForward(input, filter, y);
  float* output = static_cast<float*>(context_.scratch(CudnnContext::kOutput));
  RETURN_IF_ERROR(ConvolveForward(input, filter, output));
  return Transform(output_, output, user_output_, y);
}

absl::Status CudnnConvolution::RunBackwardWeightsFloat(const float* x,
                                                       const float* output_grad,
                                                       float* weight_grad) {
  ASSIGN_OR_RETURN(const float* input, InputForCudnn(x));
  if (!plan_.weight_needs_copy()) {
    return ConvolveBackwardFilter(input, output_grad, weight_grad);
  }
  float* filter_grad =
      static_cast<float*>(context_.scratch(CudnnContext::kWeightGrad));
  RETURN_IF_ERROR(ConvolveBackwardFilter(input, output_grad, filter_grad));
  return Transform(filter_tensor_, filter_grad, user_weight_, weight_grad);
}

absl::Status CudnnConvolution::RunBackwardInputFloat(const float* output_grad,
                                                     const float* weight,
                                                     float* dx) {
  ASSIGN_OR_RETURN(const float* filter, WeightForCudnn(weight));
  if (!plan_.input_needs_copy()) {
    return ConvolveBackwardData(filter, output_grad, dx);
  }
  float* input_grad =
      static_cast<float*>(context_.scratch(CudnnContext::kInput));
  RETURN_IF_ERROR(ConvolveBackwardData(filter, output_grad, input_grad));
  return Transform(input_, input_grad, user_input_, dx);
}

absl::Status CudnnConvolution::RunBackwardWeights(const float* x,
                                                  const float* dy,
                                                  float* weight_grad) {
  RETURN_IF_ERROR(context_.device().MakeCurrent());
  if (plan_.bf16()) {
    ASSIGN_OR_RETURN(const void* output_grad, OutputGradientAsBf16(dy));
    ASSIGN_OR_RETURN(const void* input, InputAsBf16(x));
    return RunBackwardWeightsBf16(input, output_grad, weight_grad);
  }
  ASSIGN_OR_RETURN(const float* output_grad, OutputGradientForCudnn(dy));
  return RunBackwardWeightsFloat(x, output_grad, weight_grad);
}

absl::Status CudnnConvolution::RunBackwardInput(const float* dy,
                                                const float* weight,
                                                float* dx) {
  RETURN_IF_ERROR(context_.device().MakeCurrent());
  if (plan_.bf16()) {
    ASSIGN_OR_RETURN(const void* output_grad, OutputGradientAsBf16(dy));
    return RunBackwardInputBf16(output_grad, weight, dx, nullptr);
  }
  ASSIGN_OR_RETURN(const float* output_grad, OutputGradientForCudnn(dy));
  return RunBackwardInputFloat(output_grad, weight, dx);
}

absl::Status CudnnConvolution::RunBackward(
    const float* x, const float* dy, const float* weight, float* weight_grad,
    float* dx, absl::FunctionRef<void()> weight_grad_ready) {
  RETURN_IF_ERROR(context_.device().MakeCurrent());
  if (!plan_.bf16()) {
    // dy's copy (NCHW) stays in the output scratch through both directions,
    // as the bf16 one below: neither writes it.
    ASSIGN_OR_RETURN(const float* output_grad, OutputGradientForCudnn(dy));
    RETURN_IF_ERROR(RunBackwardWeightsFloat(x, output_grad, weight_grad));
    weight_grad_ready();
    return RunBackwardInputFloat(output_grad, weight, dx);
  }
  // dy's bf16 copy stays in the output scratch through both directions:
  // neither writes it (the weight pass writes the weight-gradient scratch,
  // the input pass the input scratch, after the weight pass has read x's
  // copy there).
  ASSIGN_OR_RETURN(const void* output_grad, OutputGradientAsBf16(dy));
  ASSIGN_OR_RETURN(const void* input, InputAsBf16(x));
  RETURN_IF_ERROR(RunBackwardWeightsBf16(input, output_grad, weight_grad));
  weight_grad_ready();
  return RunBackwardInputBf16(output_grad, weight, dx, nullptr);
}

bool CudnnConvolution::AcceptsBf16Operands() const {
  return plan_.bf16() && accept_bf16_operands_ && plan_.user_input_is_nhwc();
}

void CudnnConvolution::ForwardFromBf16(const uint16_t* x, const float* weight,
                                       uint16_t* y) {
  Keep([&]() -> absl::Status {
    RETURN_IF_ERROR(RefuseBf16Operands());
    RETURN_IF_ERROR(context_.device().MakeCurrent());
    return RunForwardBf16(x, weight, nullptr, y);
  }());
}

void CudnnConvolution::BackwardFromBf16(
    const uint16_t* x, const uint16_t* dy, const float* weight,
    float* weight_grad, uint16_t* dx,
    absl::FunctionRef<void()> weight_grad_ready) {
  Keep([&]() -> absl::Status {
    RETURN_IF_ERROR(RefuseBf16Operands());
    RETURN_IF_ERROR(context_.device().MakeCurrent());
    // Neither direction writes x's or dy's bf16 buffers (the layers' own);
    // cuDNN writes the input gradient to dx directly.
    RETURN_IF_ERROR(RunBackwardWeightsBf16(x, dy, weight_grad));
    weight_grad_ready();
    return RunBackwardInputBf16(dy, weight, nullptr, dx);
  }());
}

absl::Status CudnnConvolution::RefuseBf16Operands() const {
  if (AcceptsBf16Operands()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      where_, ": given bf16 operands, which it does not accept (precision ",
      plan_.bf16() ? "bf16" : "not bf16", ", input ",
      plan_.user_input_is_nhwc() ? "NHWC" : "not NHWC", ")"));
}

void CudnnConvolution::Forward(const float* x, const float* weight, float* y) {
  Keep(RunForward(x, weight, y));
}

void CudnnConvolution::BackwardWeights(const float* x, const float* dy,
                                       float* weight_grad) {
  Keep(RunBackwardWeights(x, dy, weight_grad));
}

void CudnnConvolution::BackwardInput(const float* dy, const float* weight,
                                     float* dx) {
  Keep(RunBackwardInput(dy, weight, dx));
}

void CudnnConvolution::Backward(const float* x, const float* dy,
                                const float* weight, float* weight_grad,
                                float* dx,
                                absl::FunctionRef<void()> weight_grad_ready) {
  Keep(RunBackward(x, dy, weight, weight_grad, dx, weight_grad_ready));
}

}  // namespace gradsync
