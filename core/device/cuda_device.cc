// The CUDA backend: cuBLAS for Gemm, cuDNN for convolutions, cuda_kernels.cu
// for the rest, one non-blocking compute stream, one arena of device memory
// (see cuda_device.h).
#include "core/device/cuda_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/device/cuda_kernels.h"
#include "core/device/cudnn_context.h"
#include "core/device/cudnn_convolution.h"
#include "core/device/gpu_selection.h"

namespace gradsync {
namespace {

// cudaMalloc's own granularity is 2 MiB pages, so 256-byte pieces waste
// nothing; 256 bytes also satisfies every alignment cuBLAS and vector loads
// ask for.
constexpr size_t kAlignment = 256;
// Arena blocks: the default MLP (2 MiB of parameters, gradients and optimizer
// state, plus activations for batch 4096, about 40 MiB in all) fits in the
// first block; a larger model takes more blocks, each at least this big.
constexpr size_t kBlockBytes = size_t{64} << 20;
// NVIDIA's recommended cuBLAS workspace for Hopper is 32 MiB; handing it over
// from the arena keeps cuBLAS from allocating one on first use.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// --precision=bf16: Gemm's bf16 copies of each operand, made at set-up with
// room for this many elements (8 MiB each): more than the fully connected
// layers of the MLP, the CNN and ResNet-18 read at a batch of 1024, so their
// steps never grow them. A larger product grows them from the arena at its
// first call (a cudaMalloc only if the arena's blocks are full).
constexpr int64_t kInitialBf16OperandElements = int64_t{4} << 20;

absl::StatusCode CodeFor(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaCallStatus(cudaError_t error, absl::string_view call,
                            absl::string_view device) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(call, " on ", device, ": ", cudaGetErrorString(error), " (",
                   cudaGetErrorName(error), ")");
  if (error == cudaErrorNoKernelImageForDevice) {
    absl::StrAppend(&message,
                    "; this build's kernels are for sm_80 (A100) and sm_90 "
                    "(H100/H200): add a -gencode for this GPU in "
                    "core/device/BUILD");
  } else if (error == cudaErrorInsufficientDriver) {
    absl::StrAppend(&message, "; CUDA ", CUDART_VERSION / 1000, ".",
                    CUDART_VERSION % 1000 / 10,
                    " needs a newer NVIDIA driver (see `gradsync doctor`)");
  }
  return absl::Status(CodeFor(error), message);
}

absl::Status CublasCallStatus(cublasStatus_t status, absl::string_view call,
                              absl::string_view device) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code = status == CUBLAS_STATUS_ALLOC_FAILED
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(call, " on ", device, ": ",
                                         cublasGetStatusString(status), " (",
                                         cublasGetStatusName(status), ")"));
}

// --- CudaEvent
// ----------------------------------------------------------------

absl::StatusOr<CudaEvent> CudaEvent::Create(const std::string& device_name,
                                            bool timing) {
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(
          &event, timing ? cudaEventDefault : cudaEventDisableTiming),
      device_name);
  return CudaEvent(event);
}

absl::StatusOr<float> MedianDeviceMs(cudaStream_t stream, int runs,
                                     absl::FunctionRef<absl::Status()> body,
                                     const std::string& where) {
  if (runs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MedianDeviceMs on ", where, ": runs=", runs, " must be at least 1"));
  }
  ASSIGN_OR_RETURN(const CudaEvent start, CudaEvent::Create(where, true));
  ASSIGN_OR_RETURN(const CudaEvent stop, CudaEvent::Create(where, true));
  RETURN_IF_ERROR(body());  // warm-up
  std::vector<float> times(runs);
  for (float& ms : times) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream), where);
    RETURN_IF_ERROR(body());
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream), where);
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()), where);
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()),
                         where);
  }
  std::nth_element(times.begin(), times.begin() + runs / 2, times.end());
  return times[runs / 2];
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

// --- CudaDevice
// ---------------------------------------------------------------

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(
    int gpu_index, bool reference_convolutions, Precision precision,
    bool convolutions_round_own_operands, bool cudnn_graph,
    ConvolutionLayout cudnn_layout) {
  const std::string name = absl::StrCat("cuda:", gpu_index);
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count), name);
  if (gpu_index < 0 || gpu_index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": no such GPU; ", count,
                     " visible (after CUDA_VISIBLE_DEVICES)"));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu_index), name);
  cudaDeviceProp properties;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, gpu_index), name);
  // The kernels are compiled for sm_90 with compute_90 PTX, which the driver
  // can JIT for newer GPUs but not for older ones: say so now rather than at
  // the first launch.
  if (properties.major < 9) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " (", properties.name, ") has compute capability ",
        properties.major, ".", properties.minor,
        "; this build's kernels need 9.0 or newer (H100/H200): add a "
        "-gencode for it in core/BUILD"));
  }
  std::unique_ptr<CudaDevice> device(new CudaDevice(
      gpu_index, properties, reference_convolutions, precision,
      convolutions_round_own_operands, cudnn_graph, cudnn_layout));
  RETURN_IF_ERROR(device->Initialize());
  return device;
}

CudaDevice::CudaDevice(int gpu_index, const cudaDeviceProp& properties,
                       bool reference_convolutions, Precision precision,
                       bool convolutions_round_own_operands, bool cudnn_graph,
                       ConvolutionLayout cudnn_layout)
    : gpu_index_(gpu_index),
      properties_(properties),
      name_(absl::StrCat("cuda:", gpu_index)),
      reference_convolutions_(reference_convolutions),
      precision_(precision),
      convolutions_round_own_operands_(convolutions_round_own_operands),
      cudnn_graph_(cudnn_graph),
      cudnn_layout_(cudnn_layout) {}

absl::Status CudaDevice::Initialize() {
  // Non-blocking: the stream never waits for the legacy default stream (which
  // other libraries may use), and strategies order against it with events.
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), name_);
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_), name_);
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_), name_);
  // fp32: plain FP32 products, as PyTorch's default for matmul (allow_tf32 =
  // False) and the CPU backend: TF32 would change results in the fourth
  // digit and break the parity checks. tf32: TF32 tensor cores allowed.
  // bf16: cublasGemmEx with bf16 inputs and CUBLAS_COMPUTE_32F uses tensor
  // cores under the default math mode.
  if (precision_ == Precision::kTf32) {
    CUBLAS_RETURN_IF_ERROR(
        cublasSetMathMode(cublas_, CUBLAS_TF32_TENSOR_OP_MATH), name_);
  } else {
    CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH),
                           name_);
  }
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(AddBlock(kBlockBytes));
  }
  // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
  ASSIGN_OR_RETURN(void* workspace, AllocateBytes(kCublasWorkspaceBytes));
  CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_, workspace, kCublasWorkspaceBytes), name_);
  ASSIGN_OR_RETURN(loss_partials_,
                   Allocate<double>(cuda_kernels::kMaxLossPartials));
  ASSIGN_OR_RETURN(channel_partials_,
                   Allocate<double>(2 * cuda_kernels::kMaxChannelSumPartials));
  if (precision_ == Precision::kBf16) {
    RETURN_IF_ERROR(ReserveBf16Operands(kInitialBf16OperandElements,
                                        kInitialBf16OperandElements));
  }
  GS_LOG(INFO) << name_ << ": " << properties_.name << ", "
               << absl::StrFormat("%.1f GiB",
                                  properties_.totalGlobalMem / 1073741824.0)
               << ", compute capability " << properties_.major << "."
               << properties_.minor << ", " << properties_.multiProcessorCount
               << " SMs, --precision=" << PrecisionName(precision_);
  return absl::OkStatus();
}

CudaDevice::~CudaDevice() {
  // Errors here have nowhere to go; the process is usually ending.
  cudaSetDevice(gpu_index_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  cudnn_.reset();  // its handle is bound to stream_
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  for (const Block& block : blocks_) cudaFree(block.base);
}

absl::Status CudaDevice::MakeCurrent() const {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == gpu_index_) {
    return absl::OkStatus();
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu_index_), name_);
  return absl::OkStatus();
}

absl::Status CudaDevice::AddBlock(size_t bytes) {
  RETURN_IF_ERROR(MakeCurrent());
  void* base = nullptr;
  const cudaError_t error = cudaMalloc(&base, bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky: keep it out of the next launch check
    size_t free_bytes = 0, total_bytes = 0;
    const bool have_info =
        cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
    absl::Status status =
        CudaCallStatus(error, absl::StrCat("cudaMalloc(", bytes, ")"), name_);
    return absl::Status(
        status.code(),
        absl::StrCat(status.message(), "; this device holds ", reserved_bytes_,
                     " bytes in ", blocks_.size(), " arena block(s)",
                     have_info
                         ? absl::StrCat(", the GPU has ", free_bytes, " of ",
                                        total_bytes, " bytes free")
                         : ""));
  }
  blocks_.push_back(Block{static_cast<char*>(base), bytes, 0});
  reserved_bytes_ += bytes;
  // Zero-filled on return, as the interface promises, whichever stream reads
  // the memory first. Set-up only, so the wait costs nothing that matters.
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(base, 0, bytes, stream_), name_);
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), name_);
  GS_LOG(DEBUG) << name_ << ": arena block " << blocks_.size() << " of "
                << bytes << " bytes";
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaDevice::AllocateBytes(size_t bytes) {
  // A zero-byte request still gets a distinct piece, as on the CPU.
  const size_t rounded =
      std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": allocation of ", bytes, " bytes overflows"));
  }
  absl::MutexLock lock(&mu_);
  // First fit: the tail of an earlier block serves small requests that
  // arrive after a large one opened a new block.
  Block* target = nullptr;
  for (Block& block : blocks_) {
    if (block.size - block.used >= rounded) {
      target = &block;
      break;
    }
  }
  if (target == nullptr) {
    RETURN_IF_ERROR(AddBlock(std::max(kBlockBytes, rounded)));
    target = &blocks_.back();
  }
  void* piece = target->base + target->used;
  target->used += rounded;
  allocated_bytes_ += rounded;
  return piece;
}

size_t CudaDevice::allocated_bytes() const {
  absl::MutexLock lock(&mu_);
  return allocated_bytes_;
}

size_t CudaDevice::reserved_bytes() const {
  absl::MutexLock lock(&mu_);
  return reserved_bytes_;
}

void CudaDevice::Record(const absl::Status& status) {
  if (status.ok()) return;
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = status;
}

void CudaDevice::CheckLaunch(cudaError_t error, const char* kernel) {
  if (error != cudaSuccess) Record(CudaCallStatus(error, kernel, name_));
}

absl::Status CudaDevice::TakeError() {
  absl::MutexLock lock(&mu_);
  return std::exchange(error_, absl::OkStatus());
}

absl::Status CudaDevice::CopyToDevice(void* dst, const void* src,
                                      size_t bytes) {
  RETURN_IF_ERROR(TakeError());
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": CopyToDevice of ", bytes, " bytes with a null pointer"));
  }
  RETURN_IF_ERROR(MakeCurrent());
  const cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_);
  return CudaCallStatus(
      error, absl::StrCat("cudaMemcpyAsync(host to device, ", bytes, " bytes)"),
      name_);
}

absl::Status CudaDevice::CopyToHost(void* dst, const void* src, size_t bytes) {
  RETURN_IF_ERROR(TakeError());
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": CopyToHost of ", bytes, " bytes with a null pointer"));
  }
  RETURN_IF_ERROR(MakeCurrent());
  RETURN_IF_ERROR(CudaCallStatus(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
      absl::StrCat("cudaMemcpyAsync(device to host, ", bytes, " bytes)"),
      name_));
  // Only this stream: other streams (a strategy's) keep running.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), name_);
  return TakeError();
}

void CudaDevice::CopyOnDevice(float* dst, const float* src, int64_t count) {
  if (count <= 0 || dst == src) return;
  Record(MakeCurrent());
  const int64_t distance = dst > src ? dst - src : src - dst;
  if (distance >= count) {
    CheckLaunch(cudaMemcpyAsync(dst, src, count * sizeof(float),
                                cudaMemcpyDeviceToDevice, stream_),
                "cudaMemcpyAsync(device to device)");
    return;
  }
  // Overlapping ranges (memmove, as the CPU backend allows): cudaMemcpy's
  // result is undefined there, so copy in pieces of `distance` floats, each
  // disjoint from its destination, in the order that reads every source
  // float before it is overwritten. Stream order serializes the pieces.
  const int64_t pieces = (count + distance - 1) / distance;
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t index = dst < src ? p : pieces - 1 - p;
    const int64_t start = index * distance;
    const int64_t n = std::min(distance, count - start);
    CheckLaunch(cudaMemcpyAsync(dst + start, src + start, n * sizeof(float),
                                cudaMemcpyDeviceToDevice, stream_),
                "cudaMemcpyAsync(device to device, overlapping)");
  }
}

absl::Status CudaDevice::Synchronize() {
  RETURN_IF_ERROR(MakeCurrent());
  const absl::Status stream_status =
      CudaCallStatus(cudaStreamSynchronize(stream_),
                     "cudaStreamSynchronize(compute stream)", name_);
  // The kept error is the earlier one, so the likelier cause.
  RETURN_IF_ERROR(TakeError());
  return stream_status;
}

absl::Status CudaDevice::RecordEvent(cudaEvent_t event) {
  RETURN_IF_ERROR(MakeCurrent());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream_), name_);
  return absl::OkStatus();
}

absl::Status CudaDevice::WaitEvent(cudaEvent_t event) {
  RETURN_IF_ERROR(MakeCurrent());
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, event, 0), name_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceClock>> CudaDevice::CreateClock(
    int marks) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDeviceClock> clock,
                   CudaDeviceClock::Create(*this, marks));
  return std::unique_ptr<DeviceClock>(std::move(clock));
}

// --- CudaDeviceClock --------------------------------------------------------

absl::StatusOr<std::unique_ptr<CudaDeviceClock>> CudaDeviceClock::Create(
    CudaDevice& device, int marks) {
  if (marks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        device.name(), ": a device clock needs marks >= 0, not ", marks));
  }
  RETURN_IF_ERROR(device.MakeCurrent());
  std::unique_ptr<CudaDeviceClock> clock(new CudaDeviceClock(device));
  clock->events_.reserve(marks);
  for (int i = 0; i < marks; ++i) {
    ASSIGN_OR_RETURN(CudaEvent event,
                     CudaEvent::Create(device.name(), /*timing=*/true));
    clock->events_.push_back(std::move(event));
  }
  clock->recorded_.assign(marks, false);
  return clock;
}

absl::Status CudaDeviceClock::Record(int index) {
  RETURN_IF_ERROR(CheckMarkIndex(index, marks()));
  RETURN_IF_ERROR(device_.MakeCurrent());
  RETURN_IF_ERROR(CudaCallStatus(
      cudaEventRecord(events_[index].get(), device_.stream()),
      absl::StrCat("cudaEventRecord(clock mark ", index, ", compute stream)"),
      device_.name()));
  recorded_[index] = true;
  return absl::OkStatus();
}

absl::StatusOr<double> CudaDeviceClock::ElapsedMs(int from, int to) {
  RETURN_IF_ERROR(device_.MakeCurrent());
  for (int index : {from, to}) {
    RETURN_IF_ERROR(CheckMarkIndex(index, marks()));
    if (!recorded_[index]) return MarkNotRecorded(index);
    RETURN_IF_ERROR(CudaCallStatus(
        cudaEventSynchronize(events_[index].get()),
        absl::StrCat("cudaEventSynchronize(clock mark ", index, ")"),
        device_.name()));
  }
  float ms = 0;
  RETURN_IF_ERROR(CudaCallStatus(
      cudaEventElapsedTime(&ms, events_[from].get(), events_[to].get()),
      absl::StrCat("cudaEventElapsedTime(clock marks ", from, " -> ", to, ")"),
      device_.name()));
  return static_cast<double>(ms);
}

// --- Math -------------------------------------------------------------------

absl::Status CudaDevice::ReserveBf16Operands(int64_t a_count, int64_t b_count) {
  const auto grow = [this](int64_t needed, uint16_t*& buffer,
                           int64_t& capacity) -> absl::Status {
    if (needed <= capacity) return absl::OkStatus();
    const int64_t grown = std::max(needed, 2 * capacity);
    ASSIGN_OR_RETURN(buffer, Allocate<uint16_t>(grown));
    capacity = grown;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(grow(a_count, bf16_a_, bf16_a_capacity_));
  return grow(b_count, bf16_b_, bf16_b_capacity_);
}

void CudaDevice::GemmBf16(bool transpose_a, bool transpose_b, int m, int n,
                          int k, float alpha, const float* a, const float* b,
                          float beta, float* c) {
  // bf16 autocast's matmul: a and b rounded to bf16 (copies: they are often
  // the float32 master weights), bf16 products summed in float32 by cuBLAS,
  // C (float32) rounded to bf16, as on the CPU (cpu_device.cc).
  const int64_t a_count = int64_t{m} * k;
  const int64_t b_count = int64_t{k} * n;
  const absl::Status reserved = ReserveBf16Operands(a_count, b_count);
  if (!reserved.ok()) {
    Record(reserved);
    return;
  }
  CheckLaunch(cuda_kernels::RoundToBfloat16(stream_, a, ContiguousWalk(a_count),
                                            bf16_a_),
              "RoundToBfloat16 (Gemm's a) kernel launch");
  CheckLaunch(cuda_kernels::RoundToBfloat16(stream_, b, ContiguousWalk(b_count),
                                            bf16_b_),
              "RoundToBfloat16 (Gemm's b) kernel launch");
  // Row-major as column-major, B first (see Gemm).
  const int lda = transpose_a ? m : k;
  const int ldb = transpose_b ? k : n;
  const cublasStatus_t status =
      cublasGemmEx(cublas_, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                   transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                   bf16_b_, CUDA_R_16BF, ldb, bf16_a_, CUDA_R_16BF, lda, &beta,
                   c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    Record(CublasCallStatus(
        status,
        absl::StrCat("cublasGemmEx(bf16, m=", m, ", n=", n, ", k=", k,
                     transpose_a ? ", aᵀ" : "", transpose_b ? ", bᵀ" : "", ")"),
        name_));
    return;
  }
  CheckLaunch(cuda_kernels::RoundToBfloat16InPlace(stream_, c, int64_t{m} * n),
              "RoundToBfloat16InPlace (Gemm's c) kernel launch");
}

void CudaDevice::Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
                      float alpha, const float* a, const float* b, float beta,
                      float* c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty sum is beta·c; cuBLAS would reject lda = 0 (see CpuDevice).
    if (beta == 0.0f) {
      Fill(c, static_cast<int64_t>(m) * n, 0.0f);
    } else {
      Scale(c, static_cast<int64_t>(m) * n, beta);
    }
    return;
  }
  Record(MakeCurrent());
  if (precision_ == Precision::kBf16) {
    GemmBf16(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
    return;
  }
  // cuBLAS is column-major, and a row-major matrix read column-major is its
  // transpose. So compute Cᵀ[n×m] = op(B)ᵀ·op(A)ᵀ: B first, A second, the
  // transpose flags unchanged, and the same leading dimensions as the
  // row-major call (a row of the stored matrix is a column to cuBLAS).
  const int lda = transpose_a ? m : k;
  const int ldb = transpose_b ? k : n;
  const cublasStatus_t status =
      cublasSgemm(cublas_, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                  ldb, a, lda, &beta, c, n);
  if (status != CUBLAS_STATUS_SUCCESS) {
    Record(CublasCallStatus(
        status,
        absl::StrCat("cublasSgemm(m=", m, ", n=", n, ", k=", k,
                     transpose_a ? ", aᵀ" : "", transpose_b ? ", bᵀ" : "", ")"),
        name_));
  }
}

void CudaDevice::AddRowBias(float* y, const float* bias, int rows, int cols) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::AddRowBias(stream_, y, bias, rows, cols),
              "AddRowBias kernel launch");
}

void CudaDevice::SumRows(const float* x, float* out, int rows, int cols) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::SumRows(stream_, x, out, rows, cols),
              "SumRows kernel launch");
}

void CudaDevice::ReluForward(float* x, int64_t count) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::ReluForward(stream_, x, count),
              "ReluForward kernel launch");
}

void CudaDevice::ReluBackward(const float* y, float* dy, int64_t count) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::ReluBackward(stream_, y, dy, count),
              "ReluBackward kernel launch");
}

void CudaDevice::ReluBackwardOfSum(const float* y, const InputTensor& x,
                                   const InputTensor& dy, float* out,
                                   int64_t count) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::ReluBackwardOfSum(stream_, y, x.values, x.bf16,
                                              dy.values, dy.bf16, out, count),
              "ReluBackwardOfSum kernel launch");
}

void CudaDevice::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                     int rows, int classes, float* dlogits,
                                     float* loss) {
  Record(MakeCurrent());
  CheckLaunch(
      cuda_kernels::SoftmaxCrossEntropy(stream_, logits, labels, rows, classes,
                                        dlogits, loss_partials_, loss),
      "SoftmaxCrossEntropy kernel launch");
}

void CudaDevice::Scale(float* x, int64_t count, float alpha) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::Scale(stream_, x, count, alpha),
              "Scale kernel launch");
}

void CudaDevice::Fill(float* x, int64_t count, float value) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::Fill(stream_, x, count, value),
              "Fill kernel launch");
}

void CudaDevice::Im2Col(const float* input, const ConvGeometry& g,
                        float* columns) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::Im2Col(stream_, input, g, columns),
              "Im2Col kernel launch");
}

void CudaDevice::Col2Im(const float* columns, const ConvGeometry& g,
                        float* input_grad) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::Col2Im(stream_, columns, g, input_grad),
              "Col2Im kernel launch");
}

absl::Status CudaDevice::CheckPlanes(int64_t rows, int64_t plane,
                                     const char* what) const {
  if (plane >= 1 && rows % plane == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " on ", name_, ": ", rows, " values a channel are not whole ",
      "planes of ", plane, " (NCHW: rows = images x height x width, plane = ",
      "height x width; NHWC: plane 1)"));
}

void CudaDevice::BatchNormForwardTraining(
    const InputTensor& x, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* beta, float momentum, float epsilon,
    float* y, float* saved_mean, float* saved_inv_std, float* running_mean,
    float* running_var, const BatchNormEpilogue& epilogue) {
  Record(MakeCurrent());
  const absl::Status planes =
      CheckPlanes(rows, plane, "BatchNormForwardTraining");
  if (!planes.ok()) {
    Record(planes);
    return;
  }
  CheckLaunch(cuda_kernels::BatchNormForwardTraining(
                  stream_, x.values, x.bf16, rows, channels, plane, gamma, beta,
                  momentum, epsilon, y, saved_mean, saved_inv_std, running_mean,
                  running_var, epilogue.residual, epilogue.relu,
                  epilogue.bf16_copy, channel_partials_),
              "BatchNormForwardTraining kernel launch");
}

void CudaDevice::BatchNormForwardInference(
    const InputTensor& x, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* beta, const float* running_mean,
    const float* running_var, float epsilon, float* y,
    const BatchNormEpilogue& epilogue) {
  Record(MakeCurrent());
  const absl::Status planes =
      CheckPlanes(rows, plane, "BatchNormForwardInference");
  if (!planes.ok()) {
    Record(planes);
    return;
  }
  CheckLaunch(cuda_kernels::BatchNormForwardInference(
                  stream_, x.values, x.bf16, rows, channels, plane, gamma, beta,
                  running_mean, running_var, epsilon, y, epilogue.residual,
                  epilogue.relu, epilogue.bf16_copy),
              "BatchNormForwardInference kernel launch");
}

void CudaDevice::BatchNormBackward(const InputTensor& x, const InputTensor& dy,
                                   int64_t rows, int channels, int64_t plane,
                                   const float* gamma, const float* saved_mean,
                                   const float* saved_inv_std, float* dx,
                                   float* dgamma, float* dbeta,
                                   const float* relu_output,
                                   uint16_t* dx_bf16) {
  Record(MakeCurrent());
  if (dx == nullptr && dx_bf16 == nullptr) {
    Record(absl::InvalidArgumentError(absl::StrCat(
        "BatchNormBackward on ", name_, " needs dx or dx_bf16; got neither")));
    return;
  }
  const absl::Status planes = CheckPlanes(rows, plane, "BatchNormBackward");
  if (!planes.ok()) {
    Record(planes);
    return;
  }
  CheckLaunch(cuda_kernels::BatchNormBackward(
                  stream_, x.values, x.bf16, dy.values, dy.bf16, rows, channels,
                  plane, gamma, saved_mean, saved_inv_std, dx, dgamma, dbeta,
                  relu_output, dx_bf16, channel_partials_),
              "BatchNormBackward kernel launch");
}

void CudaDevice::MaxPoolForward(const float* x, const PoolGeometry& g, float* y,
                                int32_t* where) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::MaxPoolForward(stream_, x, g, y, where),
              "MaxPoolForward kernel launch");
}

absl::StatusOr<std::unique_ptr<ConvolutionKernel>>
CudaDevice::CreateConvolution(const ConvGeometry& g, int out_channels) {
  if (reference_convolutions_) return std::unique_ptr<ConvolutionKernel>();
  if (cudnn_ == nullptr) {
    ASSIGN_OR_RETURN(cudnn_, CudnnContext::Create(*this));
  }
  return CudnnConvolution::Create(*cudnn_, g, out_channels,
                                  !convolutions_round_own_operands_);
}

void CudaDevice::MaxPoolBackward(const float* dy, const int32_t* where,
                                 const PoolGeometry& g, float* dx) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::MaxPoolBackward(stream_, dy, where, g, dx),
              "MaxPoolBackward kernel launch");
}

void CudaDevice::GlobalAvgPoolForward(const float* x, int batch, int spatial,
                                      int channels, ActivationLayout layout,
                                      float* y) {
  Record(MakeCurrent());
  CheckLaunch(
      cuda_kernels::GlobalAvgPoolForward(stream_, x, batch, spatial, channels,
                                         layout == ActivationLayout::kNchw, y),
      "GlobalAvgPoolForward kernel launch");
}

void CudaDevice::GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                                       int channels, ActivationLayout layout,
                                       float* dx) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::GlobalAvgPoolBackward(
                  stream_, dy, batch, spatial, channels,
                  layout == ActivationLayout::kNchw, dx),
              "GlobalAvgPoolBackward kernel launch");
}

void CudaDevice::Add(float* y, const float* x, int64_t count) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::Add(stream_, y, x, count), "Add kernel launch");
}

void CudaDevice::SgdUpdate(float* params, const float* grads, float* velocity,
                           int64_t count, float lr, float momentum,
                           float weight_decay) {
  Record(MakeCurrent());
  CheckLaunch(cuda_kernels::SgdUpdate(stream_, params, grads, velocity, count,
                                      lr, momentum, weight_decay),
              "SgdUpdate kernel launch");
}

void CudaDevice::AdamUpdate(float* params, const float* grads, float* m,
                            float* v, int64_t count, float lr,
                            const AdamState& state, float weight_decay) {
  Record(MakeCurrent());
  // The same host-side arithmetic as CpuDevice::AdamUpdate, in double.
  const double step = static_cast<double>(std::max<int64_t>(state.step, 1));
  const double bias_correction1 = 1.0 - std::pow(double{state.beta1}, step);
  const double bias_correction2 = 1.0 - std::pow(double{state.beta2}, step);
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float inv_sqrt_bc2 =
      static_cast<float>(1.0 / std::sqrt(bias_correction2));
  CheckLaunch(cuda_kernels::AdamUpdate(
                  stream_, params, grads, m, v, count, step_size, inv_sqrt_bc2,
                  state.beta1, state.beta2, state.epsilon, weight_decay),
              "AdamUpdate kernel launch");
}

CudaDevice* AsCudaDevice(Device& device) {
  if (device.type() != DeviceType::kCuda) return nullptr;
  return dynamic_cast<CudaDevice*>(&device);
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(
    const DeviceOptions& options) {
  const int local_rank = options.gpu_index;
  int visible = 0;
  const cudaError_t error = cudaGetDeviceCount(&visible);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky; keep it out of later checks
    const absl::Status status =
        CudaCallStatus(error, "cudaGetDeviceCount", "this machine");
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: no CUDA GPU visible (", status.message(),
                     "); run `gradsync doctor`"));
  }
  absl::StatusOr<int> gpu = SelectGpu(local_rank, visible, options.gpus);
  if (!gpu.ok()) {
    return Annotate(gpu.status(),
                    absl::StrCat("--device=cuda, local rank ", local_rank));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                   CudaDevice::Create(
                       *gpu, options.reference_convolutions, options.precision,
                       options.convolutions_round_own_operands,
                       CudnnGraphOf(options), options.cudnn_layout));
  GS_LOG(INFO) << "local rank " << local_rank << " computes on "
               << device->name() << " (" << visible << " GPU(s) visible)";
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace gradsync
