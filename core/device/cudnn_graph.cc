// A convolution direction through cuDNN's graph API (see the header).
#include "core/device/cudnn_graph.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/device/cuda_device.h"
#include "core/device/cudnn_context.h"

namespace gradsync {
namespace {

constexpr int64_t kX = 'x', kW = 'w', kY = 'y';
// The most configurations one heuristics query returns, and is asked for.
constexpr int64_t kMostConfigs = 64;
// The most candidates Search times per direction: the first that qualify,
// in the heuristics' order. PyTorch's benchmark mode stops at as many
// (torch.backends.cudnn.benchmark_limit's default); each one costs an
// execution plan and four runs at set-up, per shape and direction.
constexpr size_t kMostCandidates = 10;

// Sets one attribute of `count` values of `type`.
template <typename T>
cudnnStatus_t Set(cudnnBackendDescriptor_t descriptor,
                  cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t count,
                  const T* values) {
  return cudnnBackendSetAttribute(descriptor, name, type, count, values);
}

// `alignment`: the bytes every pointer bound to the tensor is a multiple of.
absl::StatusOr<BackendDescriptor> Tensor(int64_t id, cudnnDataType_t type,
                                         const CudnnTensorShape& shape,
                                         int64_t alignment,
                                         const std::string& where) {
  ASSIGN_OR_RETURN(
      BackendDescriptor tensor,
      BackendDescriptor::Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, where));
  std::array<int64_t, 4> dims{}, strides{};
  for (int i = 0; i < 4; ++i) {
    dims[i] = shape.dims[i];
    strides[i] = shape.strides[i];
  }
  cudnnBackendDescriptor_t d = tensor.get();
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
      where);
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()),
      where);
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()),
      where);
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id), where);
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment),
      where);
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where);
  return tensor;
}

// One direction's operation descriptor and the names of its attributes:
// x, w and y are the tensors with unique ids 'x', 'w' and 'y' (the input or
// its gradient, the filter or its gradient, the output or its gradient).
struct OperationAttributes {
  cudnnBackendDescriptorType_t kind;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

const OperationAttributes& AttributesOf(GraphDirection direction) {
  static const OperationAttributes kForward{
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
  static const OperationAttributes kBackwardData{
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
  static const OperationAttributes kBackwardFilter{
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  switch (direction) {
    case GraphDirection::kForward:
      return kForward;
    case GraphDirection::kBackwardData:
      return kBackwardData;
    case GraphDirection::kBackwardFilter:
      break;
  }
  return kBackwardFilter;
}

bool Has(const std::vector<cudnnBackendNumericalNote_t>& notes,
         cudnnBackendNumericalNote_t note) {
  return std::find(notes.begin(), notes.end(), note) != notes.end();
}

}  // namespace

BackendDescriptor::~BackendDescriptor() {
  if (descriptor_ != nullptr) cudnnBackendDestroyDescriptor(descriptor_);
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(
    BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (descriptor_ != nullptr) cudnnBackendDestroyDescriptor(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, nullptr);
  }
  return *this;
}

absl::StatusOr<BackendDescriptor> BackendDescriptor::Create(
    cudnnBackendDescriptorType_t type, absl::string_view where) {
  BackendDescriptor made;
  CUDNN_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(type, &made.descriptor_),
                        where);
  return made;
}

absl::StatusOr<std::unique_ptr<CudnnGraphConvolution>>
CudnnGraphConvolution::Create(cudnnHandle_t handle,
                              const CudnnConvolutionPlan& plan,
                              GraphDirection direction,
                              const std::string& where) {
  std::unique_ptr<CudnnGraphConvolution> graph(
      new CudnnGraphConvolution(handle, where));
  RETURN_IF_ERROR(graph->Build(plan, direction));
  return graph;
}

absl::Status CudnnGraphConvolution::Build(const CudnnConvolutionPlan& plan,
                                          GraphDirection direction) {
  const cudnnDataType_t type =
      plan.bf16() ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  // The filter as cuDNN reads it (KRSC or KCRS): dims (k, c, r, s).
  CudnnTensorShape filter = plan.filter;
  for (int i = 0; i < 4; ++i) filter.dims[i] = plan.filter_dims[i];
  // Activations and scratch copies are the device's own allocations,
  // aligned far beyond the 16 bytes vectorized engines ask of their
  // operands. A weight read in place (and its gradient written in place:
  // the float NCHW plan's KCRS filter) lies in the flat parameter buffer,
  // where tensors follow one another with no padding: only the element's
  // size is promised there.
  constexpr int64_t kAllocationAlignment = 16;
  const int64_t weight_alignment =
      plan.weight_needs_copy() ? kAllocationAlignment : plan.element_bytes();
  ASSIGN_OR_RETURN(BackendDescriptor x,
                   Tensor(kX, type, plan.input, kAllocationAlignment, where_));
  ASSIGN_OR_RETURN(BackendDescriptor w,
                   Tensor(kW, type, filter, weight_alignment, where_));
  ASSIGN_OR_RETURN(BackendDescriptor y,
                   Tensor(kY, type, plan.output, kAllocationAlignment, where_));

  ASSIGN_OR_RETURN(
      convolution_,
      BackendDescriptor::Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, where_));
  {
    cudnnBackendDescriptor_t d = convolution_.get();
    // float32 accumulation whatever the data type, cross-correlation as
    // PyTorch's Conv2d: the legacy descriptor's settings.
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2;
    const std::array<int64_t, 2> padding{plan.padding[0], plan.padding[1]};
    const std::array<int64_t, 2> stride{plan.stride[0], plan.stride[1]};
    const std::array<int64_t, 2> dilation{plan.dilation[0], plan.dilation[1]};
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                              CUDNN_TYPE_DATA_TYPE, 1, &compute),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                              CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
                              CUDNN_TYPE_INT64, 1, &spatial),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                              CUDNN_TYPE_INT64, 2, padding.data()),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
                              CUDNN_TYPE_INT64, 2, padding.data()),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                              CUDNN_TYPE_INT64, 2, stride.data()),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_DILATIONS,
                              CUDNN_TYPE_INT64, 2, dilation.data()),
                          where_);
    CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where_);
  }

  // The operation: which tensor plays which part in this direction.
  const OperationAttributes& names = AttributesOf(direction);
  const cudnnBackendDescriptorType_t kind = names.kind;
  const cudnnBackendAttributeName_t x_name = names.x, w_name = names.w,
                                    y_name = names.y, conv_name = names.conv,
                                    alpha_name = names.alpha,
                                    beta_name = names.beta;
  ASSIGN_OR_RETURN(operation_, BackendDescriptor::Create(kind, where_));
  {
    cudnnBackendDescriptor_t d = operation_.get();
    const cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(),
                                   cd = convolution_.get();
    const float alpha = 1.0f, beta = 0.0f;  // overwrite the output
    CUDNN_RETURN_IF_ERROR(Set(d, x_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, w_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, y_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd),
                          where_);
    CUDNN_RETURN_IF_ERROR(
        Set(d, conv_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd), where_);
    CUDNN_RETURN_IF_ERROR(Set(d, alpha_name, CUDNN_TYPE_FLOAT, 1, &alpha),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, beta_name, CUDNN_TYPE_FLOAT, 1, &beta),
                          where_);
    CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where_);
  }
  tensors_.push_back(std::move(x));
  tensors_.push_back(std::move(w));
  tensors_.push_back(std::move(y));

  ASSIGN_OR_RETURN(
      graph_, BackendDescriptor::Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                                        where_));
  {
    cudnnBackendDescriptor_t d = graph_.get();
    const cudnnBackendDescriptor_t op = operation_.get();
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op),
                          where_);
    CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                              CUDNN_TYPE_HANDLE, 1, &handle_),
                          where_);
    CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where_);
  }
  // Mode A's ranking first, then the fallback engines it may leave out; a
  // mode that cannot rank this graph leaves the other's list.
  const absl::Status ranked = ListConfigs(CUDNN_HEUR_MODE_A);
  const absl::Status fallback = ListConfigs(CUDNN_HEUR_MODE_FALLBACK);
  if (configs_.empty()) return ranked.ok() ? fallback : ranked;
  if (!ranked.ok()) {
    GS_LOG(INFO) << ranked << "; the fallback list alone";
  }
  return absl::OkStatus();
}

absl::Status CudnnGraphConvolution::ListConfigs(cudnnBackendHeurMode_t mode) {
  ASSIGN_OR_RETURN(
      BackendDescriptor heuristics,
      BackendDescriptor::Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, where_));
  cudnnBackendDescriptor_t d = heuristics.get();
  const cudnnBackendDescriptor_t graph = graph_.get();
  CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
                        where_);
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode),
      where_);
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where_);
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
                            d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                        where_);
  count = std::min(count, kMostConfigs);
  std::vector<BackendDescriptor> made;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(
        BackendDescriptor config,
        BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, where_));
    raw.push_back(config.get());
    made.push_back(std::move(config));
  }
  int64_t returned = 0;
  if (count > 0) {
    CUDNN_RETURN_IF_ERROR(
        cudnnBackendGetAttribute(d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()),
        where_);
  }
  for (int64_t i = 0; i < std::min(returned, count); ++i) {
    configs_.push_back(std::move(made[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<GraphEngineNotes> CudnnGraphConvolution::NotesOf(
    int i, int64_t* engine_index) {
  ASSIGN_OR_RETURN(
      BackendDescriptor engine,
      BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, where_));
  cudnnBackendDescriptor_t e = engine.get();
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(configs_[i].get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &e),
      where_);
  CUDNN_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                               CUDNN_TYPE_INT64, 1, &count, engine_index),
      where_);
  std::vector<cudnnBackendNumericalNote_t> numerical(
      CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  CUDNN_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, numerical.size(),
                               &count, numerical.data()),
      where_);
  numerical.resize(std::max<int64_t>(0, count));
  // Behaviour notes are informational; an engine that does not report
  // them has none that matter here.
  std::vector<cudnnBackendBehaviorNote_t> behavior(
      CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
  if (cudnnBackendGetAttribute(
          e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
          behavior.size(), &count, behavior.data()) != CUDNN_STATUS_SUCCESS) {
    count = 0;
  }
  behavior.resize(std::max<int64_t>(0, count));
  GraphEngineNotes notes;
  notes.tensor_core = Has(numerical, CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
  notes.down_convert_inputs =
      Has(numerical, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
  notes.reduced_precision_reduction =
      Has(numerical, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION);
  notes.nondeterministic =
      Has(numerical, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
  notes.runtime_compilation =
      std::find(behavior.begin(), behavior.end(),
                CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != behavior.end();
  return notes;
}

absl::StatusOr<BackendDescriptor> CudnnGraphConvolution::PlanOf(
    int i, size_t* workspace) {
  ASSIGN_OR_RETURN(BackendDescriptor plan,
                   BackendDescriptor::Create(
                       CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, where_));
  cudnnBackendDescriptor_t d = plan.get();
  const cudnnBackendDescriptor_t config = configs_[i].get();
  CUDNN_RETURN_IF_ERROR(
      Set(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_),
      where_);
  CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config),
                        where_);
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where_);
  int64_t bytes = 0, count = 0;
  CUDNN_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                               CUDNN_TYPE_INT64, 1, &count, &bytes),
      where_);
  *workspace = static_cast<size_t>(std::max<int64_t>(0, bytes));
  return plan;
}

size_t CudnnGraphConvolution::Prepare(
    const ConvolutionAlgorithmPolicy& policy) {
  candidates_.clear();
  summary_ = GraphSearchSummary();
  summary_.listed = configs();
  size_t most = 0;
  for (int i = 0; i < configs(); ++i) {
    if (candidates_.size() >= kMostCandidates) {
      summary_.not_tried = configs() - i;
      break;
    }
    Candidate candidate;
    candidate.config = i;
    absl::StatusOr<GraphEngineNotes> notes = NotesOf(i, &candidate.engine);
    if (!notes.ok()) {
      ++summary_.unreadable;
      continue;
    }
    const std::string refusal = GraphEngineRefusal(*notes, policy);
    if (!refusal.empty()) {
      ++summary_.refused[refusal];
      continue;
    }
    candidate.notes = *notes;
    absl::StatusOr<BackendDescriptor> plan = PlanOf(i, &candidate.workspace);
    if (!plan.ok()) {
      ++summary_.no_plan;
      continue;
    }
    if (candidate.workspace > policy.workspace_limit) {
      ++summary_.over_workspace;
      continue;
    }
    candidate.plan = std::move(*plan);
    most = std::max(most, candidate.workspace);
    candidates_.push_back(std::move(candidate));
  }
  return most;
}

absl::StatusOr<BackendDescriptor> CudnnGraphConvolution::Pack(const void* x,
                                                              const void* w,
                                                              const void* y,
                                                              void* workspace) {
  ASSIGN_OR_RETURN(
      BackendDescriptor pack,
      BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, where_));
  cudnnBackendDescriptor_t d = pack.get();
  const std::array<int64_t, 3> ids{kX, kW, kY};
  // The pack takes non-const pointers; cuDNN writes only the direction's
  // output.
  const std::array<void*, 3> pointers{
      const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                            CUDNN_TYPE_INT64, 3, ids.data()),
                        where_);
  CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                            CUDNN_TYPE_VOID_PTR, 3, pointers.data()),
                        where_);
  CUDNN_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                            CUDNN_TYPE_VOID_PTR, 1, &workspace),
                        where_);
  CUDNN_RETURN_IF_ERROR(cudnnBackendFinalize(d), where_);
  return pack;
}

absl::StatusOr<ConvolutionAlgorithmResult> CudnnGraphConvolution::Search(
    cudaStream_t stream, void* x, void* w, void* y, void* workspace,
    size_t workspace_bytes) {
  // One pack for every candidate (it binds the buffers, not a plan), made
  // before the timing as Execute's is made once: the times are the plans'.
  ASSIGN_OR_RETURN(const BackendDescriptor pack, Pack(x, w, y, workspace));
  Candidate* fastest = nullptr;
  float fastest_ms = 0;
  for (Candidate& candidate : candidates_) {
    if (candidate.workspace > workspace_bytes) {
      ++summary_.over_workspace;
      continue;
    }
    // A configuration that fails to run is skipped like one that cannot
    // make a plan: the others, or the legacy algorithms, remain.
    const absl::StatusOr<float> ms = MedianDeviceMs(
        stream, 3,
        [&]() -> absl::Status {
          CUDNN_RETURN_IF_ERROR(
              cudnnBackendExecute(handle_, candidate.plan.get(), pack.get()),
              where_);
          return absl::OkStatus();
        },
        where_);
    if (!ms.ok()) {
      cudaGetLastError();  // a failed run is this configuration's, not ours
      ++summary_.failed;
      continue;
    }
    ++summary_.timed;
    if (fastest == nullptr || *ms < fastest_ms) {
      fastest = &candidate;
      fastest_ms = *ms;
    }
  }
  if (fastest == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        where_, ": of cuDNN's ", configs(), " graph-API configurations, ",
        candidates_.size(), " qualified and none ran within ", workspace_bytes,
        " bytes of workspace"));
  }
  summary_.fastest_ms = fastest_ms;
  summary_.fastest_engine = static_cast<int>(fastest->engine);
  ConvolutionAlgorithmResult result;
  result.supported = true;
  result.time_ms = fastest_ms;
  result.workspace_bytes = fastest->workspace;
  result.deterministic = !fastest->notes.nondeterministic;
  result.tensor_core_math = fastest->notes.tensor_core;
  result.graph_config = fastest->config;
  result.graph_engine = static_cast<int>(fastest->engine);
  chosen_ = std::move(fastest->plan);
  candidates_.clear();  // the other plans are not needed again
  return result;
}

absl::Status CudnnGraphConvolution::Use(int config, int engine,
                                        size_t workspace_bytes) {
  int64_t listed = -1;
  if (config < 0 || config >= configs() || !NotesOf(config, &listed).ok() ||
      listed != engine) {
    return absl::InternalError(absl::StrCat(
        where_, ": cuDNN's heuristics no longer list engine ", engine,
        " as configuration ", config, " (", configs(), " listed)"));
  }
  size_t bytes = 0;
  ASSIGN_OR_RETURN(BackendDescriptor plan, PlanOf(config, &bytes));
  if (bytes > workspace_bytes) {
    return absl::InternalError(
        absl::StrCat(where_, ": engine ", engine, "'s plan now asks for ",
                     bytes, " bytes of workspace, more than the ",
                     workspace_bytes, " it was measured with"));
  }
  chosen_ = std::move(plan);
  return absl::OkStatus();
}

absl::Status CudnnGraphConvolution::Execute(const void* x, const void* w,
                                            const void* y, void* workspace) {
  if (chosen_.get() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_,
                     ": graph-API convolution run before a plan was "
                     "chosen (Search or Use)"));
  }
  const std::array<const void*, 4> binding{x, w, y, workspace};
  if (pack_.get() == nullptr || binding != packed_) {
    ASSIGN_OR_RETURN(pack_, Pack(x, w, y, workspace));
    packed_ = binding;
  }
  CUDNN_RETURN_IF_ERROR(
      cudnnBackendExecute(handle_, chosen_.get(), pack_.get()), where_);
  return absl::OkStatus();
}

}  // namespace gradsync
