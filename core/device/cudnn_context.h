// What a CUDA device's cuDNN convolutions share (CUDA builds only): the cuDNN
// handle on the device's compute stream, the workspace limit, and one scratch
// buffer of each kind (algorithm workspace, copies of inputs and outputs in
// cuDNN's layout, KRSC copies of weights and their gradients), as large as
// the largest layer asked for,
// since one device's kernels run one after another on one stream. Made by the
// device at its first convolution, so that a model without convolutions never
// loads cuDNN; the scratch comes from the device's arena at set-up, never in
// the step loop.
//
// Errors: CudnnCallStatus names the cuDNN call, the device and the layer's
// shape, with cuDNN's own last-error text ("cudnnConvolutionForward on cuda:0,
// convolution 32x64x32x32 (NHWC) -> 64 channels ...: CUDNN_STATUS_...").
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/status_macros.h"
#include "core/device/cudnn_algorithm_choice.h"
#include "core/device/cudnn_convolution_plan.h"

namespace gradsync {

class CudaDevice;

// OK for CUDNN_STATUS_SUCCESS; else "<call> on <where>: <cuDNN's name>
// (<cuDNN's last error message>)" with a code that tells out-of-memory (
// ResourceExhausted) and unsupported configurations (FailedPrecondition) from
// bugs (Internal, InvalidArgument). `call` may be a whole call's text: only
// the function's name, up to the first '(', is kept.
absl::Status CudnnCallStatus(cudnnStatus_t status, absl::string_view call,
                             absl::string_view where);

// Returns from the enclosing function when a cuDNN call fails; `where` names
// the device and the layer's shape.
#define CUDNN_RETURN_IF_ERROR(call, where) \
  RETURN_IF_ERROR(::gradsync::CudnnCallStatus((call), #call, (where)))

class CudnnContext {
 public:
  enum Scratch {
    kWorkspace,  // the algorithms' workspace
    // An input not in cuDNN's layout (or bf16), copied into it; the input
    // gradient cuDNN writes before its copy back.
    kInput,
    kWeights,     // a weight in KRSC (or bf16)
    kWeightGrad,  // a weight gradient in KRSC (or bf16), before its copy back
    // bf16 or NCHW: the output cuDNN writes, the output gradient it reads.
    kOutput,
    // The algorithm search's own tensors (cudnnFind*Ex writes its outputs):
    // an input (and input gradient), an output (and its gradient), in
    // cuDNN's layout; the layout timing's (--cudnn_layout=fastest) in the
    // layer's.
    kSearchInput,
    kSearchOutput,
    // The layout timing's weight and weight gradient, in the model's order.
    kSearchWeights,
    kScratchKinds,
  };

  // Creates the handle on `device`'s stream and sets the workspace limit from
  // the GPU's free memory (cudnn_algorithm_choice.h).
  static absl::StatusOr<std::unique_ptr<CudnnContext>> Create(
      CudaDevice& device);
  ~CudnnContext();
  CudnnContext(const CudnnContext&) = delete;
  CudnnContext& operator=(const CudnnContext&) = delete;

  CudaDevice& device() const { return device_; }
  cudnnHandle_t handle() const { return handle_; }
  size_t workspace_limit() const { return workspace_limit_; }

  // Grows scratch `kind` to at least `bytes` (set-up only: it allocates from
  // the device's arena). The workspace doubles as it grows, up to the limit
  // (GrowConvolutionWorkspace); the copies grow to exactly the need.
  absl::Status Reserve(Scratch kind, size_t bytes);
  // The current buffer of `kind` and its size; a kernel asks at each call,
  // since a later layer's Reserve may have replaced it.
  void* scratch(Scratch kind) const { return scratch_[kind]; }
  size_t scratch_bytes(Scratch kind) const { return scratch_bytes_[kind]; }

  // The algorithms measured for a shape (AlgorithmSearchKey) on this GPU at
  // this precision and workspace limit, or nullopt when none were yet;
  // Remember keeps them for every later layer of that shape in the process,
  // on any device of the same GPU, as PyTorch's cudnn.benchmark cache does.
  // Process-wide so that two devices on one GPU (the workers of a job in one
  // process, a test comparing two paths) run the same algorithms: two
  // searches can pick different ones from timing noise, and different
  // algorithms round differently. Thread-safe.
  std::optional<ChosenConvolutionAlgorithms> Chosen(
      const std::string& key) const;
  void Remember(const std::string& key,
                const ChosenConvolutionAlgorithms& chosen);
  // The same for the layout --cudnn_layout=fastest timed for a shape (`key`:
  // the NHWC plan's AlgorithmSearchKey).
  std::optional<CudnnLayout> ChosenLayout(const std::string& key) const;
  void RememberLayout(const std::string& key, CudnnLayout layout);

 private:
  CudnnContext(CudaDevice& device, cudnnHandle_t handle, size_t limit)
      : device_(device), handle_(handle), workspace_limit_(limit) {}

  // The process-wide cache's key of a shape's key on this context.
  std::string CacheKey(const std::string& key) const;

  CudaDevice& device_;
  cudnnHandle_t handle_;
  const size_t workspace_limit_;
  std::array<void*, kScratchKinds> scratch_{};
  std::array<size_t, kScratchKinds> scratch_bytes_{};
};

}  // namespace gradsync
