// The CPU backend of Device: matrix products through oneDNN's sgemm
// (row-major), convolutions through oneDNN's primitives (dnnl_convolution.h),
// every other kernel a plain loop over contiguous memory that the compiler
// vectorizes. Work runs synchronously on the calling thread (and oneDNN's
// OpenMP threads inside Gemm and the convolutions), so Synchronize() has
// nothing to wait for.
//
// The buffers given to one kernel call must not overlap (other than the
// documented in-place arguments): the loops are compiled on that promise.
//
// Device memory is host memory: 64-byte aligned (a cache line, and a full
// AVX-512 vector) zero-filled blocks owned by the device and freed with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"

namespace gradsync {

class DnnlBatchNorm;
class DnnlContext;

class CpuDevice : public Device {
 public:
  // `cpu_threads` > 0 sets oneDNN's thread count (OpenMP's, set on whichever
  // thread runs the kernels); 0 keeps the library default (OMP_NUM_THREADS
  // or every core). Several workers on one machine each want a share of the
  // cores, not all of them.
  // `reference_convolutions` (tests only): CreateConvolution returns none,
  // so layers run im2col + GEMM instead of oneDNN. `reference_batch_norm`
  // (tests only): batch normalisation runs the loops over kernel_math.h (the
  // CUDA kernels' arithmetic) instead of oneDNN's primitives.
  // `precision`: kFp32 or kBf16 (device.h): with kBf16 Gemm and the
  // convolutions (oneDNN's and the im2col reference's, which runs Gemm) round
  // their inputs and outputs to bf16 around float32 arithmetic; the other
  // kernels do not change. kTf32 is CreateDevice's to refuse.
  // `nchw_activations` (tests only): activation_layout() asks models for
  // NCHW activations, which the batch norms, the global average pooling and
  // the convolutions (ConvGeometry::nchw_output) take, so that the models'
  // NCHW path runs on machines without a GPU.
  explicit CpuDevice(int cpu_threads = 0, bool reference_convolutions = false,
                     bool reference_batch_norm = false,
                     Precision precision = Precision::kFp32,
                     bool convolutions_round_own_operands = false,
                     bool nchw_activations = false);
  ~CpuDevice() override;

  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  DeviceType type() const override { return DeviceType::kCpu; }
  Precision precision() const { return precision_; }
  std::string name() const override { return "cpu"; }
  ActivationLayout activation_layout() const override {
    return nchw_activations_ ? ActivationLayout::kNchw
                             : ActivationLayout::kNhwc;
  }

  absl::StatusOr<void*> AllocateBytes(size_t bytes) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(float* dst, const float* src, int64_t count) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

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
  // Labels must lie in [0, classes); the trainer validates the data set when it
  // loads it. A label outside that range does not read out of bounds: its row
  // gets the softmax as gradient (no target term) and the loss becomes NaN, so
  // the mistake shows in the logged loss instead of training on garbage.
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows,
                           int classes, float* dlogits, float* loss) override;
  void Scale(float* x, int64_t count, float alpha) override;
  void Fill(float* x, int64_t count, float value) override;

  void Im2Col(const float* input, const ConvGeometry& g,
              float* columns) override;
  void Col2Im(const float* columns, const ConvGeometry& g,
              float* input_grad) override;
  // Batch norm: rows must be a multiple of plane (checked).
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
  void GlobalAvgPoolForward(const float* x, int batch, int spatial,
                            int channels, ActivationLayout layout,
                            float* y) override;
  void GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                             int channels, ActivationLayout layout,
                             float* dx) override;
  void Add(float* y, const float* x, int64_t count) override;
  // oneDNN's primitives (dnnl_convolution.h).
  absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CreateConvolution(
      const ConvGeometry& g, int out_channels) override;

  void SgdUpdate(float* params, const float* grads, float* velocity,
                 int64_t count, float lr, float momentum,
                 float weight_decay) override;
  void AdamUpdate(float* params, const float* grads, float* m, float* v,
                  int64_t count, float lr, const AdamState& state,
                  float weight_decay) override;

  // Bytes handed out by AllocateBytes so far (after rounding up to the
  // alignment), for memory reports.
  size_t allocated_bytes() const;
  // oneDNN batch normalisations made so far (one per shape), for tests that
  // check the library, not the reference loops, ran.
  size_t onednn_batch_norms() const { return batch_norms_.size(); }

 private:
  static constexpr size_t kAlignment = 64;

  // oneDNN's batch normalisation for this shape and layout (`plane`, as
  // Device's batch norms take it; made at its first call; `epsilon` < 0: any,
  // for the backward, which does not depend on it), or null where oneDNN
  // could not make one and the loops run instead.
  DnnlBatchNorm* BatchNormFor(int64_t rows, int channels, int64_t plane,
                              float epsilon);
  // oneDNN's batch norm has no epilogue of ours: after it, y goes through the
  // epilogue in one more pass (the same values; the CPU is not where the
  // fusion's passes matter).
  // The epilogue's bf16 copy is written in that pass too.
  void ApplyEpilogue(float* y, int64_t count,
                     const BatchNormEpilogue& epilogue);
  // x's float32 values: x itself, or its bf16 bits widened into `scratch`
  // (grown once, to the largest tensor).
  const float* Widened(const InputTensor& x, int64_t count,
                       std::vector<float>& scratch);
  // copy = y rounded to bf16 (bfloat16.h's bits); nothing where copy is null.
  void WriteBf16Copy(const float* y, int64_t count, uint16_t* copy);
  // BatchNormBackward into a float32 dx.
  void BatchNormBackwardFloat(const float* x, const float* dy, int64_t rows,
                              int channels, int64_t plane, const float* gamma,
                              const float* saved_mean,
                              const float* saved_inv_std, float* dx,
                              float* dgamma, float* dbeta,
                              const float* relu_output);

  std::unique_ptr<DnnlContext> dnnl_;  // Gemm's threads; the convolutions
  const bool reference_convolutions_;
  const bool reference_batch_norm_;
  const Precision precision_;
  const bool convolutions_round_own_operands_;
  const bool nchw_activations_;
  // --precision=bf16: Gemm's inputs rounded to bf16, grown to the largest
  // product seen (a model's products are the same every step, so only its
  // first step grows them).
  std::vector<float> rounded_a_, rounded_b_;
  // A fused batch-norm backward's dy through its ReLU, for oneDNN's
  // primitive (grown once, to the largest layer).
  std::vector<float> relu_masked_dy_;
  // A batch-norm backward's float32 dx where only its bf16 copy is asked for
  // (grown once, to the largest layer).
  std::vector<float> bf16_dx_;
  // bf16 inputs widened: a batch norm's x (or an addend), a gradient dy.
  std::vector<float> bf16_x_, bf16_dy_;
  // Kernels run on one thread at a time (the step loop's), so no lock.
  std::vector<std::unique_ptr<DnnlBatchNorm>> batch_norms_;
  // The shapes (rows, channels, plane) oneDNN could not make.
  using BatchNormKey = std::tuple<int64_t, int, int64_t>;
  std::vector<BatchNormKey> batch_norm_failures_;

  // Allocation happens at set-up, possibly from threads.
  mutable absl::Mutex mu_;
  std::vector<void*> blocks_ ABSL_GUARDED_BY(mu_);
  size_t allocated_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gradsync
