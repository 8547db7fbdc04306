// Where a step's device time goes, operation by operation: a Device that
// forwards every call to another and, between BeginStep and EndStep, puts a
// mark of the inner device's clock (device_clock.h) after each operation it
// queues, so that each operation's time is the device time between its mark
// and the one before. On CUDA the marks are timing events on the compute
// stream, read once the step is done: the kernels' own time (and any time the
// GPU waited for the host to queue the next one), not the host's time to
// queue them. On the CPU, whose kernels run before they return, a mark is the
// host's clock.
//
// Each operation's host time is taken too: the host's clock from the end of
// the previous mark to this operation's, the time the caller and the device
// spent queueing it (launches, library calls, casts, the model's own code
// between operations), the marks' own cost left out. On CUDA it says where a
// step whose GPU waits for the host spends the host's time; on the CPU it is
// the operation's run and close to its device time.
//
// Convolutions made through CreateConvolution are wrapped too: each direction
// (forward, weight gradient, input gradient) is an operation of its own.
// Models need no change: bind one to the ProfilingDevice instead of the
// device (bench/layer_profile does, for --profile tables of a model's step).
//
// Marks cost a little on every operation (an event record on CUDA), so a
// profiled step is slower than an unmarked one; outside BeginStep..EndStep
// nothing is marked, and the caller can time unmarked steps to say by how
// much.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"

namespace gradsync {

// One timed operation of a step.
struct ProfiledOp {
  // What kind of work: "conv forward", "conv weight gradient", "conv input
  // gradient", "matrix product", "batch norm forward", "batch norm backward",
  // "element-wise", "pooling", "loss", "optimizer", "im2col", "copy".
  std::string category;
  // The category and the shape, e.g. "conv forward 3x3/1 64->64 at 32x32".
  std::string label;
  double ms = 0;  // device time from the previous mark to this operation's
  // The host's time from the end of the previous mark (or BeginStep) to the
  // start of this operation's mark: what queueing it cost the host.
  double host_ms = 0;
};

class ProfilingDevice : public Device {
 public:
  // Times at most `max_ops` operations a step, on a clock of max_ops + 1
  // marks made here. `inner` must outlive this device.
  static absl::StatusOr<std::unique_ptr<ProfilingDevice>> Create(Device& inner,
                                                                 int max_ops);

  // Starts timing: marks the device's queue here.
  absl::Status BeginStep();
  // Stops timing, waits for the device and reads every operation's time, in
  // the order they were queued. An error if the step queued more than
  // max_ops operations (naming the number to raise it to) or a mark failed.
  absl::StatusOr<std::vector<ProfiledOp>> EndStep();

  DeviceType type() const override { return inner_.type(); }
  std::string name() const override { return inner_.name(); }
  ActivationLayout activation_layout() const override {
    return inner_.activation_layout();
  }
  absl::StatusOr<void*> AllocateBytes(size_t bytes) override {
    return inner_.AllocateBytes(bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return inner_.CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return inner_.CopyToHost(dst, src, bytes);
  }
  void CopyOnDevice(float* dst, const float* src, int64_t count) override;
  absl::Status Synchronize() override { return inner_.Synchronize(); }
  absl::StatusOr<std::unique_ptr<DeviceClock>> CreateClock(int marks) override {
    return inner_.CreateClock(marks);
  }

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
  void GlobalAvgPoolForward(const float* x, int batch, int spatial,
                            int channels, ActivationLayout layout,
                            float* y) override;
  void GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                             int channels, ActivationLayout layout,
                             float* dx) override;
  void Add(float* y, const float* x, int64_t count) override;
  absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CreateConvolution(
      const ConvGeometry& g, int out_channels) override;
  void SgdUpdate(float* params, const float* grads, float* velocity,
                 int64_t count, float lr, float momentum,
                 float weight_decay) override;
  void AdamUpdate(float* params, const float* grads, float* m, float* v,
                  int64_t count, float lr, const AdamState& state,
                  float weight_decay) override;

  // Each convolution made through this device: its shape (as the labels
  // name it) and what the library chose for it
  // (ConvolutionKernel::Description), in the order they were made.
  struct Convolution {
    std::string shape;
    std::string library;
  };
  const std::vector<Convolution>& convolutions() const { return convolutions_; }

  // After an operation was queued: its mark, under `category` and the text
  // `label` returns, which is called only in a profiled step (an unmarked
  // step builds no text). Nothing outside BeginStep..EndStep. For
  // ProfilingConvolution too.
  void Mark(const char* category, absl::FunctionRef<std::string()> label);

 private:
  ProfilingDevice(Device& inner, int max_ops,
                  std::unique_ptr<DeviceClock> clock);

  Device& inner_;
  const int max_ops_;
  std::unique_ptr<DeviceClock> clock_;
  bool timing_ = false;
  int count_ = 0;  // operations marked this step
  // The host's clock at the end of the last mark (or of BeginStep).
  std::chrono::steady_clock::time_point host_mark_;
  std::vector<ProfiledOp> ops_;  // max_ops_ entries, reused every step
  absl::Status mark_status_;     // the step's first failed mark
  std::vector<Convolution> convolutions_;
};

}  // namespace gradsync
