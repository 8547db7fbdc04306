// The CUDA backend of Device (built only with --config=cuda): cuBLAS for the
// matrix products, cuDNN for the convolutions (cudnn_convolution.h), the
// kernels of cuda_kernels.cu for the rest, everything queued on one
// non-blocking compute stream per device.
//
// Memory: one arena of large cudaMalloc blocks. AllocateBytes carves
// 256-byte-aligned, zero-filled pieces from it and asks CUDA for a new block
// only when the current ones are full; set-up allocates, the step loop does
// not, so no cudaMalloc (which synchronizes the device) ever lands between
// kernels. cuBLAS's and cuDNN's workspaces come from the arena too, so neither
// library allocates behind our back.
//
// Errors: fallible calls return absl::Status naming the CUDA/cuBLAS call and
// the device ("cudaMalloc(1048576) on cuda:0: out of memory"). The math
// functions of the interface return nothing, so the first error of a launch
// or a cuBLAS call is kept and returned by the next Synchronize, CopyToHost or
// CopyToDevice (the trainer copies the loss to the host every step, so an
// error surfaces in the step that caused it).
//
// Overlap: strategies order their own streams (NCCL's, pinned staging's copy
// streams) after the gradient computation with events recorded on stream(),
// and make the compute stream wait for their results with WaitEvent(), so that
// no one synchronizes the whole device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status_macros.h"
#include "core/device/device.h"

namespace gradsync {

// "<call> on <device>: <CUDA's message> (<error name>)", with a status code
// that tells out-of-memory and missing GPUs from bugs; OK for cudaSuccess.
absl::Status CudaCallStatus(cudaError_t error, absl::string_view call,
                            absl::string_view device);
absl::Status CublasCallStatus(cublasStatus_t status, absl::string_view call,
                              absl::string_view device);

// Returns from the enclosing function if a CUDA or cuBLAS call fails; `device`
// is the device's name for the message ("cuda:0").
#define CUDA_RETURN_IF_ERROR(call, device) \
  RETURN_IF_ERROR(::gradsync::CudaCallStatus((call), #call, (device)))
#define CUBLAS_RETURN_IF_ERROR(call, device) \
  RETURN_IF_ERROR(::gradsync::CublasCallStatus((call), #call, (device)))

// A CUDA event owned by its creator, created once at set-up and recorded every
// step (creating events is cheap but not free, and not for the step loop).
class CudaEvent {
 public:
  // Timing events cost more to record; strategies that only order streams
  // leave timing off.
  static absl::StatusOr<CudaEvent> Create(const std::string& device_name,
                                          bool timing = false);
  CudaEvent() = default;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  cudaEvent_t event_ = nullptr;
};

// The device time of the work `body` queues on `stream`: one untimed run,
// then `runs` runs between two timing events each, the median of their
// times. For set-up searches (cuDNN's graph-API engines, the convolution
// layouts), never the step: it waits for the stream after every run. The
// first error of `body` or of a CUDA call is returned, the calls' named with
// `where`.
absl::StatusOr<float> MedianDeviceMs(cudaStream_t stream, int runs,
                                     absl::FunctionRef<absl::Status()> body,
                                     const std::string& where);

class CudnnContext;
class CudaDevice;

// A DeviceClock (device_clock.h) of timing events on a CudaDevice's compute
// stream. Record is cudaEventRecord: it queues the mark behind all work
// queued so far and returns at once. ElapsedMs waits for both events
// (cudaEventSynchronize, which returns at once when the stream has passed
// them) and reads cudaEventElapsedTime (about half a microsecond of
// resolution). Every CUDA call is checked; its error names the call, the
// device and the mark.
class CudaDeviceClock : public DeviceClock {
 public:
  static absl::StatusOr<std::unique_ptr<CudaDeviceClock>> Create(
      CudaDevice& device, int marks);

  int marks() const override { return static_cast<int>(events_.size()); }
  absl::Status Record(int index) override;
  absl::StatusOr<double> ElapsedMs(int from, int to) override;

 private:
  explicit CudaDeviceClock(CudaDevice& device) : device_(device) {}

  CudaDevice& device_;
  std::vector<CudaEvent> events_;
  std::vector<bool> recorded_;
};

class CudaDevice : public Device {
 public:
  // Opens GPU `gpu_index` (an index among the visible GPUs): makes it current
  // on the calling thread, creates the compute stream, the cuBLAS handle and
  // the first arena block. `reference_convolutions` (test-only, as
  // DeviceOptions's): CreateConvolution returns none, so layers run im2col +
  // cuBLAS instead of cuDNN.
  // `precision`: kTf32 lets cuBLAS (CUBLAS_TF32_TENSOR_OP_MATH) and cuDNN
  // (CUDNN_DEFAULT_MATH, PyTorch's choice with TF32 allowed) use TF32 tensor
  // cores; kFp32 keeps plain FP32 products (CUBLAS_DEFAULT_MATH,
  // CUDNN_FMA_MATH), which the parity tests need. kBf16 (device.h): Gemm
  // rounds a and b into bf16 scratch (bfloat16.h), multiplies them with
  // cublasGemmEx (CUDA_R_16BF inputs, a float32 C, CUBLAS_COMPUTE_32F) and
  // rounds C to bf16; the convolutions compute on bf16 copies
  // (cudnn_convolution.h). Checked on one H200 (bf16_precision_test).
  // `convolutions_round_own_operands`: test-only, `cudnn_graph` and
  // `cudnn_layout`, as DeviceOptions's, the graph API's choice resolved
  // (CudnnGraphOf). Their defaults here are NHWC and the legacy algorithms,
  // not DeviceOptions's auto: the callers that create a device directly run
  // no convolutions or name the path they test.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(
      int gpu_index, bool reference_convolutions = false,
      Precision precision = Precision::kFp32,
      bool convolutions_round_own_operands = false, bool cudnn_graph = false,
      ConvolutionLayout cudnn_layout = ConvolutionLayout::kNhwc);
  ~CudaDevice() override;

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceType type() const override { return DeviceType::kCuda; }
  std::string name() const override { return name_; }
  // NCHW under --cudnn_layout=nchw for float32 convolutions (fp32, tf32)
  // and under auto for fp32: the layout whose NCHW-only algorithms those
  // are for, kept by the model end to end so that no copies run between
  // layers; NHWC otherwise (bf16 convolutions compute on NHWC, and the
  // reference convolutions of im2col write NHWC only).
  ActivationLayout activation_layout() const override {
    const bool nchw = (cudnn_layout_ == ConvolutionLayout::kNchw &&
                       precision_ != Precision::kBf16) ||
                      (cudnn_layout_ == ConvolutionLayout::kAuto &&
                       precision_ == Precision::kFp32);
    return nchw && !reference_convolutions_ ? ActivationLayout::kNchw
                                            : ActivationLayout::kNhwc;
  }

  absl::StatusOr<void*> AllocateBytes(size_t bytes) override;
  // Queued on the compute stream. A pageable `src` may be reused on return
  // (CUDA stages pageable memory before the call returns); a pinned `src`
  // (cudaHostAlloc) is read later and must stay unchanged until the stream
  // has passed the copy (record an event after it).
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  // Queued on the compute stream after all earlier work, then waits for that
  // stream only: complete on return.
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(float* dst, const float* src, int64_t count) override;
  // Waits for the compute stream; returns the first error kept since the last
  // call (see the file comment) or the stream's own.
  absl::Status Synchronize() override;
  // `marks` timing events (CudaEvent::Create with timing on), created here
  // at set-up; a mark is recorded on the compute stream, so it times the
  // GPU's work, not the host's queueing of it (CudaDeviceClock).
  absl::StatusOr<std::unique_ptr<DeviceClock>> CreateClock(int marks) override;

  void Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
            float alpha, const float* a, const float* b, float beta,
            float* c) override;
  void AddRowBias(float* y, const float* bias, int rows, int cols) override;
  void SumRows(const float* x, float* out, int rows, int cols) override;
  void ReluForward(float* x, int64_t count) override;
  void ReluBackward(const float* y, float* dy, int64_t count) override;
  void ReluBackwardOfSum(const float* y, const InputTensor& x,
                         const InputTensor& dy, float* out,
                         int64_t count) override;
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows,
                           int classes, float* dlogits, float* loss) override;
  void Scale(float* x, int64_t count, float alpha) override;
  void Fill(float* x, int64_t count, float value) override;
  void Im2Col(const float* input, const ConvGeometry& g,
              float* columns) override;
  void Col2Im(const float* columns, const ConvGeometry& g,
              float* input_grad) override;
  void BatchNormForwardTraining(const InputTensor& x, int64_t rows,
                                int channels, int64_t plane, const float* gamma,
                                const float* beta, float momentum,
                                float epsilon, float* y, float* saved_mean,
                                float* saved_inv_std, float* running_mean,
                                float* running_var,
                                const BatchNormEpilogue& epilogue) override;
  void BatchNormForwardInference(const InputTensor& x, int64_t rows,
                                 int channels, int64_t plane,
                                 const float* gamma, const float* beta,
                                 const float* running_mean,
                                 const float* running_var, float epsilon,
                                 float* y,
                                 const BatchNormEpilogue& epilogue) override;
  void BatchNormBackward(const InputTensor& x, const InputTensor& dy,
                         int64_t rows, int channels, int64_t plane,
                         const float* gamma, const float* saved_mean,
                         const float* saved_inv_std, float* dx, float* dgamma,
                         float* dbeta, const float* relu_output,
                         uint16_t* dx_bf16) override;
  void MaxPoolForward(const float* x, const PoolGeometry& g, float* y,
                      int32_t* where) override;
  void MaxPoolBackward(const float* dy, const int32_t* where,
                       const PoolGeometry& g, float* dx) override;
  // cuDNN's convolution for `g` (cudnn_convolution.h); the first call loads
  // cuDNN and creates its handle. Set-up only: it allocates scratch.
  absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CreateConvolution(
      const ConvGeometry& g, int out_channels) override;
  void GlobalAvgPoolForward(const float* x, int batch, int spatial,
                            int channels, ActivationLayout layout,
                            float* y) override;
  void GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                             int channels, ActivationLayout layout,
                             float* dx) override;
  void Add(float* y, const float* x, int64_t count) override;
  void SgdUpdate(float* params, const float* grads, float* velocity,
                 int64_t count, float lr, float momentum,
                 float weight_decay) override;
  void AdamUpdate(float* params, const float* grads, float* m, float* v,
                  int64_t count, float lr, const AdamState& state,
                  float weight_decay) override;

  // --- For strategies and benchmarks ----------------------------------------
  int gpu_index() const { return gpu_index_; }
  Precision precision() const { return precision_; }
  // Whether convolutions also try cuDNN's graph API (DeviceOptions).
  bool cudnn_graph() const { return cudnn_graph_; }
  ConvolutionLayout cudnn_layout() const { return cudnn_layout_; }
  // Every kernel, cuBLAS call and copy of this device runs on this stream, in
  // the order it was queued. Non-blocking: it never waits for the legacy
  // default stream, so work on it must be ordered with events, not by
  // cudaStreamLegacy.
  cudaStream_t stream() const { return stream_; }
  // Records `event` on the compute stream: it completes when all work queued
  // so far has (for example, a bucket's gradients).
  absl::Status RecordEvent(cudaEvent_t event);
  // Makes the compute stream wait (on the GPU, not the host) for `event`,
  // recorded on another stream (an all-reduce, a host-to-device copy); work
  // queued afterwards (the optimizer step) sees that stream's results.
  absl::Status WaitEvent(cudaEvent_t event);
  // Makes this device's GPU current on the calling thread (a strategy's
  // communication thread, before it touches events or streams of this GPU).
  absl::Status MakeCurrent() const;

  // Bytes handed out by AllocateBytes, and bytes reserved from CUDA.
  size_t allocated_bytes() const;
  // Keeps the first error of a void math call for Synchronize to return
  // (public for the kernels this device makes, such as cuDNN's convolutions).
  void Record(const absl::Status& status);
  size_t reserved_bytes() const;
  const cudaDeviceProp& properties() const { return properties_; }

 private:
  struct Block {
    char* base = nullptr;
    size_t size = 0;
    size_t used = 0;
  };

  CudaDevice(int gpu_index, const cudaDeviceProp& properties,
             bool reference_convolutions, Precision precision,
             bool convolutions_round_own_operands, bool cudnn_graph,
             ConvolutionLayout cudnn_layout);
  absl::Status Initialize();
  // A new arena block of at least `bytes`, zero-filled.
  absl::Status AddBlock(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --precision=bf16: Gemm's bf16 copies of a and b hold at least these many
  // elements (grown from the arena, doubling).
  absl::Status ReserveBf16Operands(int64_t a_count, int64_t b_count);
  void GemmBf16(bool transpose_a, bool transpose_b, int m, int n, int k,
                float alpha, const float* a, const float* b, float beta,
                float* c);
  void CheckLaunch(cudaError_t error, const char* kernel);
  absl::Status TakeError();

  const int gpu_index_;
  const cudaDeviceProp properties_;
  const std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  double* loss_partials_ = nullptr;  // cuda_kernels::kMaxLossPartials doubles
  // Batch norm's per-slice channel sums: 2 · kMaxChannelSumPartials doubles.
  double* channel_partials_ = nullptr;
  const bool reference_convolutions_;
  const Precision precision_;
  const bool convolutions_round_own_operands_;
  const bool cudnn_graph_;
  const ConvolutionLayout cudnn_layout_;
  // --precision=bf16: Gemm's operands rounded to bf16 (their 16 bits).
  uint16_t* bf16_a_ = nullptr;
  uint16_t* bf16_b_ = nullptr;
  int64_t bf16_a_capacity_ = 0;
  int64_t bf16_b_capacity_ = 0;
  // InvalidArgument naming `what` unless `rows` (one channel's values of a
  // batch norm) are whole planes of `plane` (Device's batch-norm comment).
  absl::Status CheckPlanes(int64_t rows, int64_t plane, const char* what) const;
  // Made at the first CreateConvolution (set-up, one thread).
  std::unique_ptr<CudnnContext> cudnn_;

  mutable absl::Mutex mu_;  // guards the arena and the kept error
  std::vector<Block> blocks_ ABSL_GUARDED_BY(mu_);
  size_t allocated_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// The device as a CudaDevice, or null when it is another backend; strategies
// use it to reach the compute stream.
CudaDevice* AsCudaDevice(Device& device);

// Opens the GPU for local rank `options.gpu_index`: `options.gpus` (--gpus)
// maps local ranks to GPUs, else local rank modulo the visible GPUs
// (gpu_selection.h).
// Called by CreateDevice (device.cc) in CUDA builds.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(
    const DeviceOptions& options);

}  // namespace gradsync
