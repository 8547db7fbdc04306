// The cuDNN handle and scratch shared by one CUDA device's convolutions (see
// the header).
#include "core/device/cudnn_context.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"
#include "core/device/cuda_device.h"
#include "core/device/cudnn_algorithm_choice.h"

namespace gradsync {
namespace {

// cuDNN 9's status values are grouped by thousands: 1xxx not initialised or
// mismatched libraries, 2xxx bad parameters, 3xxx not supported, 4xxx
// internal errors (4003/4004: allocation failed), 5xxx execution failed.
absl::StatusCode CodeFor(cudnnStatus_t status) {
  const int value = static_cast<int>(status);
  if (value == 4003 || value == 4004) {
    return absl::StatusCode::kResourceExhausted;
  }
  switch (value / 1000) {
    case 1:
    case 3:
      return absl::StatusCode::kFailedPrecondition;
    case 2:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudnnCallStatus(cudnnStatus_t status, absl::string_view call,
                             absl::string_view where) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const absl::string_view name = call.substr(0, call.find('('));
  // cuDNN 9 keeps a message about the last failure of this thread.
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return absl::Status(
      CodeFor(status),
      absl::StrCat(name, " on ", where, ": ", cudnnGetErrorString(status),
                   detail[0] != '\0' ? absl::StrCat(" (", detail, ")") : ""));
}

absl::StatusOr<std::unique_ptr<CudnnContext>> CudnnContext::Create(
    CudaDevice& device) {
  RETURN_IF_ERROR(device.MakeCurrent());
  const std::string where = device.name();
  cudnnHandle_t handle = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle), where);
  std::unique_ptr<CudnnContext> context;
  size_t free_bytes = 0, total_bytes = 0;
  const absl::Status memory_status = CudaCallStatus(
      cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo", where);
  // Owned from here on, so that an error below destroys the handle.
  context.reset(
      new CudnnContext(device, handle, ConvolutionWorkspaceLimit(free_bytes)));
  RETURN_IF_ERROR(memory_status);
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle, device.stream()), where);
  GS_LOG(INFO) << where << ": cuDNN " << cudnnGetVersion()
               << " for convolutions (--cudnn_layout="
               << ConvolutionLayoutName(device.cudnn_layout())
               << "), workspace limit " << context->workspace_limit_
               << " bytes (" << free_bytes << " of " << total_bytes
               << " bytes free)";
  return context;
}

CudnnContext::~CudnnContext() {
  // Errors here have nowhere to go; the device is being torn down.
  if (handle_ != nullptr) cudnnDestroy(handle_);
}

absl::Status CudnnContext::Reserve(Scratch kind, size_t bytes) {
  const size_t current = scratch_bytes_[kind];
  const size_t grown =
      kind == kWorkspace
          ? GrowConvolutionWorkspace(current, bytes, workspace_limit_)
          : std::max(current, bytes);
  if (grown == current) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* buffer, device_.AllocateBytes(grown));
  scratch_[kind] = buffer;
  scratch_bytes_[kind] = grown;
  return absl::OkStatus();
}

namespace {

// Every device's chosen algorithms, by CudnnContext::CacheKey.
struct ChosenCache {
  absl::Mutex mutex;
  std::map<std::string, ChosenConvolutionAlgorithms> chosen
      ABSL_GUARDED_BY(mutex);
  std::map<std::string, CudnnLayout> layouts ABSL_GUARDED_BY(mutex);
};

ChosenCache& Cache() {
  static ChosenCache* const cache = new ChosenCache;
  return *cache;
}

}  // namespace

std::string CudnnContext::CacheKey(const std::string& key) const {
  // The GPU, and what decides which algorithms qualify: the precision (tensor
  // cores or not) and the workspace limit.
  return absl::StrCat("gpu ", device_.gpu_index(), " ",
                      PrecisionName(device_.precision()),
                      device_.cudnn_graph() ? " graph" : " legacy", " limit ",
                      workspace_limit_, " ", key);
}

std::optional<ChosenConvolutionAlgorithms> CudnnContext::Chosen(
    const std::string& key) const {
  ChosenCache& cache = Cache();
  absl::MutexLock lock(&cache.mutex);
  const auto found = cache.chosen.find(CacheKey(key));
  if (found == cache.chosen.end()) return std::nullopt;
  return found->second;
}

void CudnnContext::Remember(const std::string& key,
                            const ChosenConvolutionAlgorithms& chosen) {
  ChosenCache& cache = Cache();
  absl::MutexLock lock(&cache.mutex);
  cache.chosen.emplace(CacheKey(key), chosen);
}

std::optional<CudnnLayout> CudnnContext::ChosenLayout(
    const std::string& key) const {
  ChosenCache& cache = Cache();
  absl::MutexLock lock(&cache.mutex);
  const auto found = cache.layouts.find(CacheKey(key));
  if (found == cache.layouts.end()) return std::nullopt;
  return found->second;
}

void CudnnContext::RememberLayout(const std::string& key, CudnnLayout layout) {
  ChosenCache& cache = Cache();
  absl::MutexLock lock(&cache.mutex);
  cache.layouts.emplace(CacheKey(key), layout);
}

}  // namespace gradsync
