// One direction of a convolution through cuDNN's graph API (the backend
// descriptors of cudnn_graph.h), beside the legacy API cudnn_convolution.h
// uses (CUDA builds only).
//
// Why: the legacy API offers a fixed list of algorithms per direction, and on
// an H200 the best of them left ResNet-18's float32 convolutions well behind
// PyTorch's (docs/results/gpu.md has the figures), while PyTorch's own
// channels_last step, on the same NHWC tensors, was as fast as its NCHW one.
// PyTorch reaches its convolutions through the graph API: an operation graph of
// one convolution, the engine configurations cuDNN's heuristics list for it,
// and an execution plan of the one chosen. This class builds that graph for the
// tensors CudnnConvolution already describes (NHWC input and output with a
// KRSC filter, or all NCHW under --cudnn_layout; float32 or bf16 data with
// float32 accumulation), times every
// configuration the precision allows (GraphEngineRefusal), and runs the one
// it is told to use. CudnnConvolution measures its legacy algorithms too and
// runs whichever is faster, so a GPU or a cuDNN where the graph API has
// nothing better loses nothing.
//
// Tensors are bound by unique id at each run: 'x' the input (or its
// gradient), 'w' the filter (or its gradient), 'y' the output (or its
// gradient), whatever the direction reads and writes.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/cudnn_algorithm_choice.h"
#include "core/device/cudnn_convolution_plan.h"

namespace gradsync {

enum class GraphDirection { kForward, kBackwardData, kBackwardFilter };

// Owns one backend descriptor.
class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  static absl::StatusOr<BackendDescriptor> Create(
      cudnnBackendDescriptorType_t type, absl::string_view where);
  cudnnBackendDescriptor_t get() const { return descriptor_; }

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

class CudnnGraphConvolution {
 public:
  // The operation graph of `direction` over the plan's tensors, and the
  // engine configurations cuDNN's heuristics list for it (mode A, then the
  // fallback list), on `handle`'s GPU. An error names the call and `where`.
  static absl::StatusOr<std::unique_ptr<CudnnGraphConvolution>> Create(
      cudnnHandle_t handle, const CudnnConvolutionPlan& plan,
      GraphDirection direction, const std::string& where);

  // How many configurations the heuristics listed.
  int configs() const { return static_cast<int>(configs_.size()); }
  // Makes the execution plans of the first configurations (at most ten,
  // in the heuristics' order) `policy` takes (GraphEngineRefusal) within
  // its workspace limit, the candidates Search times; returns the largest
  // workspace among them (0 when there are none), what Search needs.
  size_t Prepare(const ConvolutionAlgorithmPolicy& policy);
  // Times every candidate of Prepare whose workspace fits `workspace_bytes`
  // (a warm-up run, then the median of three, on `stream` with CUDA events)
  // on x, w and y (device buffers of the plan's sizes; what they hold is
  // overwritten) with `workspace`, and keeps the fastest's plan for Execute.
  // The result carries its time, workspace, position (graph_config) and
  // engine (graph_engine); NotFound when no candidate ran.
  absl::StatusOr<ConvolutionAlgorithmResult> Search(cudaStream_t stream,
                                                    void* x, void* w, void* y,
                                                    void* workspace,
                                                    size_t workspace_bytes);
  // Makes the plan of configuration `config` (a Search's graph_config, from
  // another device of the same GPU); an error when the heuristics no longer
  // list engine `engine` there, or when its plan asks for more workspace
  // than `workspace_bytes` (what the search measured it with, and what the
  // layer reserves).
  absl::Status Use(int config, int engine, size_t workspace_bytes);
  // What Prepare and Search made of the listed configurations.
  const GraphSearchSummary& summary() const { return summary_; }
  // Runs the chosen plan (Search or Use) on `handle`'s stream.
  absl::Status Execute(const void* x, const void* w, const void* y,
                       void* workspace);

 private:
  CudnnGraphConvolution(cudnnHandle_t handle, std::string where)
      : handle_(handle), where_(std::move(where)) {}
  absl::Status Build(const CudnnConvolutionPlan& plan,
                     GraphDirection direction);
  absl::Status ListConfigs(cudnnBackendHeurMode_t mode);
  // The notes of configuration i's engine, and its global index.
  absl::StatusOr<GraphEngineNotes> NotesOf(int i, int64_t* engine);
  // An execution plan of configuration i and its workspace; a status that
  // is not OK where cuDNN cannot make one (the configuration is skipped).
  absl::StatusOr<BackendDescriptor> PlanOf(int i, size_t* workspace);
  // A configuration Prepare took, with its plan.
  struct Candidate {
    int config = -1;
    int64_t engine = -1;
    GraphEngineNotes notes;
    BackendDescriptor plan;
    size_t workspace = 0;
  };
  // A variant pack binding x, w, y and the workspace.
  absl::StatusOr<BackendDescriptor> Pack(const void* x, const void* w,
                                         const void* y, void* workspace);

  const cudnnHandle_t handle_;
  const std::string where_;
  std::vector<BackendDescriptor> tensors_;  // x, w, y
  BackendDescriptor convolution_;
  BackendDescriptor operation_;
  BackendDescriptor graph_;
  std::vector<BackendDescriptor> configs_;
  std::vector<Candidate> candidates_;  // Prepare's
  GraphSearchSummary summary_;         // Prepare's and Search's counts
  BackendDescriptor chosen_;           // the execution plan Execute runs
  // Execute's last pack and what it binds: a layer's buffers are the same
  // every step, so the pack is made once, not at every call.
  BackendDescriptor pack_;
  std::array<const void*, 4> packed_{};
};

}  // namespace gradsync
