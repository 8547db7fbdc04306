// The CUDA backend's own kernels (everything but the matrix products, which
// are cuBLAS's), as host functions that queue one kernel on `stream` and
// return the launch's error (cudaGetLastError); compiled by nvcc from
// cuda_kernels.cu, called by cuda_device.cc, which names the device and the
// operation in the Status it makes of an error.
//
// Semantics are those of the Device interface (core/device/device.h) and the
// CPU backend (core/device/cpu_device.cc), so that one model runs on both; the
// comments there are the specification, and the arithmetic itself is
// core/device/kernel_math.h, which both backends call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/device/launch_config.h"
#include "core/device/layer_geometry.h"

namespace gradsync {
namespace cuda_kernels {

// SoftmaxCrossEntropy reduces the loss in two deterministic passes: one partial
// sum (double) per thread block, then one block adds the partials in a fixed
// order. The partial buffer holds this many doubles (allocated once by the
// device at set-up, so the step loop never allocates); launch_config.h caps
// the softmax grid at it.
inline constexpr int kMaxLossPartials = launch_config::kMaxLossPartials;

cudaError_t AddRowBias(cudaStream_t stream, float* y, const float* bias,
                       int rows, int cols);
cudaError_t SumRows(cudaStream_t stream, const float* x, float* out, int rows,
                    int cols);
cudaError_t ReluForward(cudaStream_t stream, float* x, int64_t count);
cudaError_t ReluBackward(cudaStream_t stream, const float* y, float* dy,
                         int64_t count);
cudaError_t ReluBackwardOfSum(cudaStream_t stream, const float* y,
                              const float* x, const uint16_t* x_bf16,
                              const float* dy, const uint16_t* dy_bf16,
                              float* out, int64_t count);
// `partials` holds kMaxLossPartials doubles of device memory.
cudaError_t SoftmaxCrossEntropy(cudaStream_t stream, const float* logits,
                                const int32_t* labels, int rows, int classes,
                                float* dlogits, double* partials, float* loss);
cudaError_t Scale(cudaStream_t stream, float* x, int64_t count, float alpha);
cudaError_t Fill(cudaStream_t stream, float* x, int64_t count, float value);
// --precision=bf16 (bfloat16.h's rounding; bf16 values as their 16 bits, the
// layout of CUDA's __nv_bfloat16 and cuDNN's CUDNN_DATA_BFLOAT16):
// out[i] = bf16(in[walk.OffsetOf(i)]) for i in [0, walk.count()), a tensor of
// any layout rounded into a contiguous NHWC-ordered copy (layer_geometry.h);
cudaError_t RoundToBfloat16(cudaStream_t stream, const float* in,
                            const NhwcWalk& walk, uint16_t* out);
// out[walk.OffsetOf(i)] = in[i] widened to float32 (exact), the way back;
cudaError_t WidenFromBfloat16(cudaStream_t stream, const uint16_t* in,
                              const NhwcWalk& walk, float* out);
// x[i] = bf16(x[i]), kept as float32 (a matrix product's output).
cudaError_t RoundToBfloat16InPlace(cudaStream_t stream, float* x,
                                   int64_t count);
// The convolutional layers' kernels (Device's comments say what each does).
cudaError_t Im2Col(cudaStream_t stream, const float* input,
                   const ConvGeometry& g, float* columns);
cudaError_t Col2Im(cudaStream_t stream, const float* columns,
                   const ConvGeometry& g, float* input_grad);
// Batch norm's per-channel sums run over a grid of channel tiles × row
// slices (launch_config::PlanChannelSums), or for NCHW tensors (`plane` > 1:
// Device's batch-norm comment) of channels × image slices
// (launch_config::PlanPlaneSums); a sliced plan leaves each slice's
// sums in `channel_partials`, 2 · kMaxChannelSumPartials doubles of device
// memory allocated once by the device, and a second kernel adds them.
// `x` or `x_bf16` and `dy` or `dy_bf16` (the other null) are Device's
// InputTensors; `residual`, `relu` and `bf16_copy` are its BatchNormEpilogue,
// `relu_output` its fused backward's ReLU output (null: none), `dx_bf16` the
// backward's bf16 dx (null: none; with it, dx may be null).
inline constexpr int kMaxChannelSumPartials =
    launch_config::kMaxChannelSumPartials;
cudaError_t BatchNormForwardTraining(
    cudaStream_t stream, const float* x, const uint16_t* x_bf16, int64_t rows,
    int channels, int64_t plane, const float* gamma, const float* beta,
    float momentum, float epsilon, float* y, float* saved_mean,
    float* saved_inv_std, float* running_mean, float* running_var,
    const float* residual, bool relu, uint16_t* bf16_copy,
    double* channel_partials);
cudaError_t BatchNormForwardInference(
    cudaStream_t stream, const float* x, const uint16_t* x_bf16, int64_t rows,
    int channels, int64_t plane, const float* gamma, const float* beta,
    const float* running_mean, const float* running_var, float epsilon,
    float* y, const float* residual, bool relu, uint16_t* bf16_copy);
cudaError_t BatchNormBackward(
    cudaStream_t stream, const float* x, const uint16_t* x_bf16,
    const float* dy, const uint16_t* dy_bf16, int64_t rows, int channels,
    int64_t plane, const float* gamma, const float* saved_mean,
    const float* saved_inv_std, float* dx, float* dgamma, float* dbeta,
    const float* relu_output, uint16_t* dx_bf16, double* channel_partials);
cudaError_t MaxPoolForward(cudaStream_t stream, const float* x,
                           const PoolGeometry& g, float* y, int32_t* where);
cudaError_t MaxPoolBackward(cudaStream_t stream, const float* dy,
                            const int32_t* where, const PoolGeometry& g,
                            float* dx);
// `nchw`: x (dx) is [batch × channels × spatial] instead of NHWC.
cudaError_t GlobalAvgPoolForward(cudaStream_t stream, const float* x, int batch,
                                 int spatial, int channels, bool nchw,
                                 float* y);
cudaError_t GlobalAvgPoolBackward(cudaStream_t stream, const float* dy,
                                  int batch, int spatial, int channels,
                                  bool nchw, float* dx);
cudaError_t Add(cudaStream_t stream, float* y, const float* x, int64_t count);

cudaError_t SgdUpdate(cudaStream_t stream, float* params, const float* grads,
                      float* velocity, int64_t count, float lr, float momentum,
                      float weight_decay);
// step_size = lr / (1 - beta1^t) and inv_sqrt_bias_correction2 =
// 1 / sqrt(1 - beta2^t) are computed on the host in double, as on the CPU.
cudaError_t AdamUpdate(cudaStream_t stream, float* params, const float* grads,
                       float* m, float* v, int64_t count, float step_size,
                       float inv_sqrt_bias_correction2, float beta1,
                       float beta2, float epsilon, float weight_decay);

}  // namespace cuda_kernels
}  // namespace gradsync
