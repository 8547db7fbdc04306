// The CUDA device's convolutions through cuDNN 9's convolution API (CUDA
// builds only): forward, input gradient and weight gradient of one geometry,
// with descriptors made and algorithms chosen once (at a model's Bind) and run
// every step on the device's stream.
//
// Layouts (cudnn_convolution_plan.h, --cudnn_layout): by default cuDNN sees
// NHWC tensors and a KRSC (NHWC-format) filter. The layers' activations are
// NHWC already; an input of another layout is copied to NHWC scratch with
// cudnnTransformTensor, the weight to KRSC before the forward and input
// gradient, and the weight gradient back to PyTorch's [out][in][k][k] after
// it. With --cudnn_layout=nchw (float32 only) cuDNN sees NCHW tensors and the
// weight as stored: the NHWC input, output and their gradients are copied
// into NCHW scratch and back with cudnnTransformTensor around each call.
// --cudnn_layout=fastest makes both kernels of a shape at set-up, times each
// one's forward and backward on the device's stream (TimeStep: the copies
// are part of what runs), keeps the faster, and remembers the choice for the
// shape's other layers (CudnnContext::ChosenLayout).
//
// Algorithms (cudnn_algorithm_choice.h): measured at set-up with
// cudnnFind*AlgorithmEx, once per shape per device (the context keeps the
// choice by AlgorithmSearchKey), the heuristics (cudnnGetConvolution*
// Algorithm_v7, each candidate's workspace asked of cuDNN) ranking the
// candidates, sizing the search's workspace and standing in where the search
// fails; with --precision=fp32 FP32 math only (CUDNN_FMA_MATH: no TF32, as
// cuBLAS here and PyTorch with allow_tf32 off), with tf32 CUDNN_DEFAULT_MATH
// and tensor-core algorithms allowed, each direction run with its
// algorithm's math type; the workspace bounded by the context's limit and
// shared between layers.
//
// --precision=bf16 (the plan's CudnnDataType::kBfloat16): cuDNN computes on
// bf16 copies with float32 accumulation (PSEUDO_BFLOAT16_CONFIG, tensor-core
// math allowed). Before each call the kernel rounds its float32 inputs into
// scratch with cuda_kernels.cu's casts (bfloat16.h, the CPU's rounding): the
// input to NHWC bf16 (any layout, in one pass), the weight to KRSC bf16, the
// output gradient to bf16; cuDNN writes a bf16 output, input gradient or KRSC
// weight gradient to scratch, widened (exactly) into the layer's float32
// buffer in its layout. The master weights are never written. Algorithms
// are measured for the bf16 descriptors and kept under the bf16 key. Where
// the layers around it made the bf16 input and output gradient already (an
// NHWC input; ConvolutionKernel::AcceptsBf16Operands), cuDNN reads those
// and the casts are not run; ForwardFromBf16 leaves cuDNN's bf16 output where
// the caller says, not widened.
//
// Errors: making the kernel returns a status naming the shape; a failed call
// while running is kept by the device (CudaDevice::Record) and returned by its
// next Synchronize or copy, as for every other kernel.
//
// Ran on one H200 (docs/results/gpu.md): tools/gpu_check.sh's parity checks
// against float64 are its test on a GPU; the graph-API path (cudnn_graph.h)
// and the NCHW layout have not run on one.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/convolution_kernel.h"
#include "core/device/cudnn_algorithm_choice.h"
#include "core/device/cudnn_context.h"
#include "core/device/cudnn_convolution_plan.h"
#include "core/device/cudnn_graph.h"
#include "core/device/layer_geometry.h"

namespace gradsync {

class CudnnConvolution : public ConvolutionKernel {
 public:
  // Descriptors, algorithms and scratch for `geometry` with `out_channels`
  // outputs, in the layout the device's --cudnn_layout asks for (bf16:
  // NHWC); an error names the shape and the cuDNN call.
  static absl::StatusOr<std::unique_ptr<ConvolutionKernel>> Create(
      CudnnContext& context, const ConvGeometry& geometry, int out_channels,
      bool accept_bf16_operands = true);
  ~CudnnConvolution() override;

  void Forward(const float* x, const float* weight, float* y) override;
  void BackwardWeights(const float* x, const float* dy,
                       float* weight_grad) override;
  void BackwardInput(const float* dy, const float* weight, float* dx) override;
  // Under bf16, rounds dy once for both directions.
  void Backward(const float* x, const float* dy, const float* weight,
                float* weight_grad, float* dx,
                absl::FunctionRef<void()> weight_grad_ready) override;
  // bf16 with an NHWC input (unless Create was told not to).
  bool AcceptsBf16Operands() const override;
  void ForwardFromBf16(const uint16_t* x, const float* weight,
                       uint16_t* y) override;
  void BackwardFromBf16(const uint16_t* x, const uint16_t* dy,
                        const float* weight, float* weight_grad, uint16_t* dx,
                        absl::FunctionRef<void()> weight_grad_ready) override;

  // The chosen algorithms and their workspaces, for logs and gpu_check,
  // after "NCHW copies: " where cuDNN computes in NCHW; with --cudnn_graph,
  // for the layer that searched, also the legacy algorithm's measured time
  // and how the graph API's search went (DescribeGraphSearch) in each
  // direction; with --cudnn_layout=fastest, for the layer that timed both
  // layouts, DescribeLayoutChoice.
  std::string algorithms() const;
  std::string Description() const override { return algorithms(); }

 private:
  CudnnConvolution(CudnnContext& context, const ConvGeometry& geometry,
                   int out_channels, const CudnnConvolutionPlan& plan,
                   bool accept_bf16_operands);
  enum class Direction { kForward, kInputGradient, kWeightGradient };

  // A kernel computing in `layout`, built (algorithms chosen or reused).
  static absl::StatusOr<std::unique_ptr<CudnnConvolution>> Make(
      CudnnContext& context, const ConvGeometry& geometry, int out_channels,
      bool accept_bf16_operands, CudnnDataType data_type, CudnnLayout layout);
  // --cudnn_layout=fastest: the kernel of the layout the context remembers
  // for the shape, else both timed (TimeStep) and the faster; NHWC wherever
  // NCHW cannot be made or timed.
  static absl::StatusOr<std::unique_ptr<CudnnConvolution>> MakeFastest(
      CudnnContext& context, const ConvGeometry& geometry, int out_channels,
      bool accept_bf16_operands);
  // The device time of one forward and one Backward (both gradients), in
  // buffers of the layer's own layouts from the context's search scratch
  // (zeroed first, so that both layouts read the same values): the median
  // of three runs after a warm-up, on the device's stream with CUDA events.
  absl::StatusOr<float> TimeStep();

  absl::Status Build();
  // The three directions' algorithms: measured once per shape per device
  // (Search), then reused from the context.
  absl::Status ChooseAlgorithms();
  // cudnnFind*Ex over `direction`'s algorithms, in buffers and a workspace
  // (the largest the heuristics' qualifying `ranked` candidates need) from
  // the context's scratch; the fastest result the policy takes. Where the
  // search fails, or nothing it measured qualifies, a warning names why and
  // the heuristics' pick runs instead.
  absl::StatusOr<ConvolutionAlgorithmResult> Search(
      Direction direction,
      const std::vector<ConvolutionAlgorithmResult>& ranked,
      const ConvolutionAlgorithmPolicy& policy, absl::string_view what);
  absl::Status ReserveSearchBuffers();
  // The graph API's fastest configuration for `direction` (cudnn_graph.h),
  // timed in the search buffers, where it beats `legacy`'s measured time;
  // else `legacy`. Keeps the graph for the runs. A graph the API cannot
  // build or run costs a warning, not the layer.
  absl::StatusOr<ConvolutionAlgorithmResult> SearchGraph(
      Direction direction, const ConvolutionAlgorithmResult& legacy,
      const ConvolutionAlgorithmPolicy& policy);
  // The graphs of the directions `chosen` runs through the graph API, made
  // for this device (another device of the GPU chose them).
  absl::Status MakeGraphs(const ChosenConvolutionAlgorithms& chosen);
  // Sets the directions' algorithms, workspaces and math types.
  void Use(const ChosenConvolutionAlgorithms& chosen);
  // One direction's convolution, through the graph API where it was chosen,
  // else the legacy call with the direction's algorithm and math type.
  absl::Status ConvolveForward(const void* x, const void* w, void* y);
  absl::Status ConvolveBackwardData(const void* w, const void* dy, void* dx);
  absl::Status ConvolveBackwardFilter(const void* x, const void* dy, void* dw);
  absl::Status RunForward(const float* x, const float* weight, float* y);
  absl::Status RunBackwardWeights(const float* x, const float* dy,
                                  float* weight_grad);
  absl::Status RunBackwardInput(const float* dy, const float* weight,
                                float* dx);
  absl::Status RunBackward(const float* x, const float* dy, const float* weight,
                           float* weight_grad, float* dx,
                           absl::FunctionRef<void()> weight_grad_ready);
  // The bf16 directions (see the file comment), on x and dy already rounded
  // (InputAsBf16, OutputGradientAsBf16, or the layers before), which both
  // backward directions may share.
  // The output goes to `y_bf16` where it is not null (ForwardFromBf16), else
  // to scratch and widened into y.
  absl::Status RunForwardBf16(const void* input, const float* weight, float* y,
                              uint16_t* y_bf16);
  absl::Status RunBackwardWeightsBf16(const void* input,
                                      const void* output_grad,
                                      float* weight_grad);
  // The input gradient goes to `dx_bf16` where it is not null
  // (BackwardFromBf16), else to scratch and widened into dx.
  absl::Status RunBackwardInputBf16(const void* output_grad,
                                    const float* weight, float* dx,
                                    uint16_t* dx_bf16);
  // The float32 directions on an output gradient already in cuDNN's layout
  // (OutputGradientForCudnn), which both may share.
  absl::Status RunBackwardWeightsFloat(const float* x, const float* output_grad,
                                       float* weight_grad);
  absl::Status RunBackwardInputFloat(const float* output_grad,
                                     const float* weight, float* dx);
  // x rounded to NHWC bf16, the weight to KRSC bf16, dy to bf16, each in its
  // scratch.
  absl::StatusOr<const void*> InputAsBf16(const float* x);
  absl::StatusOr<const void*> WeightAsBf16(const float* weight);
  absl::StatusOr<const void*> OutputGradientAsBf16(const float* dy);
  // A cast kernel's launch error, naming it and the layer.
  absl::Status Launched(cudaError_t error, absl::string_view kernel);
  // The float32 operands as cuDNN reads them: the layer's own buffer where
  // the plan needs no copy, else its copy in the input, weight (KRSC) or
  // output scratch.
  absl::StatusOr<const float*> InputForCudnn(const float* x);
  absl::StatusOr<const float*> WeightForCudnn(const float* weight);
  absl::StatusOr<const float*> OutputGradientForCudnn(const float* dy);
  // cudnnTransformTensor of `from` (described by `from_desc`) into `to`.
  absl::Status Transform(cudnnTensorDescriptor_t from_desc, const float* from,
                         cudnnTensorDescriptor_t to_desc, float* to);
  // OK where AcceptsBf16Operands; else the error a caller that did not ask
  // gets.
  absl::Status RefuseBf16Operands() const;
  // Keeps a failure for the device's next Synchronize.
  void Keep(const absl::Status& status);

  CudnnContext& context_;
  const CudnnConvolutionPlan plan_;
  const bool accept_bf16_operands_;
  const std::string where_;  // "cuda:0, convolution <shape>"
  cudnnTensorDescriptor_t user_input_ = nullptr;
  cudnnTensorDescriptor_t input_ = nullptr;
  cudnnTensorDescriptor_t user_output_ = nullptr;
  cudnnTensorDescriptor_t output_ = nullptr;
  cudnnTensorDescriptor_t user_weight_ = nullptr;
  // The filter as cuDNN reads it, described as a float tensor for the
  // weight's copies (KRSC under NHWC).
  cudnnTensorDescriptor_t filter_tensor_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t convolution_ = nullptr;
  cudnnConvolutionFwdAlgo_t forward_algorithm_{};
  cudnnConvolutionBwdDataAlgo_t input_algorithm_{};
  cudnnConvolutionBwdFilterAlgo_t weight_algorithm_{};
  // The math type each direction runs with (set on convolution_ before it).
  cudnnMathType_t forward_math_ = CUDNN_FMA_MATH;
  cudnnMathType_t input_math_ = CUDNN_FMA_MATH;
  cudnnMathType_t weight_math_ = CUDNN_FMA_MATH;
  size_t forward_workspace_ = 0;
  size_t input_workspace_ = 0;
  size_t weight_workspace_ = 0;
  // What runs, per direction (Direction's order), for algorithms().
  std::array<ConvolutionAlgorithmResult, 3> chosen_{};
  // The directions that run through the graph API; null where the legacy
  // algorithm runs.
  std::array<std::unique_ptr<CudnnGraphConvolution>, 3> graph_{};
  // Per direction, what SearchGraph found ("" where it did not search: no
  // --cudnn_graph, or another layer of the shape searched).
  std::array<std::string, 3> graph_search_{};
  // DescribeLayoutChoice, for the layer that timed both layouts; else "".
  std::string layout_choice_;
};

}  // namespace gradsync
