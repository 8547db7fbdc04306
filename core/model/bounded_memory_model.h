// The base of the image models whose activation memory is bounded at Bind
// (the CNN and ResNet): activations are allocated for at most
// `max_rows_in_memory` images, a training batch must fit in them, and an
// evaluation batch larger than that runs in pieces whose logits are gathered
// into one buffer. This class owns those rules, the checks of every call and
// the parameter pointers; a model adds its layers: their activations, the
// forward pass and the backward pass.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"
#include "core/model/model.h"
#include "core/model/param_binding.h"

namespace gradsync {

class BoundedMemoryModel : public Model {
 public:
  // CHW rows of the image shape the model was made for.
  int input_dim() const final {
    return input_.channels * input_.height * input_.width;
  }
  int num_classes() const final { return input_.num_classes; }

  absl::Status Bind(Device& device, const ParamLayout& layout, float* params,
                    float* grads, int max_batch) final;
  absl::Status ForwardBackward(const float* inputs, const int32_t* labels,
                               int batch, float* device_loss,
                               const GradReadyCallback& ready) final;
  // RunForward asks for its layers' parameters through NeedParams.
  absl::Status ForwardBackwardLayerwise(const float* inputs,
                                        const int32_t* labels, int batch,
                                        float* device_loss,
                                        const ParamsNeededCallback& needed,
                                        const GradReadyCallback& ready) final;
  absl::Status Forward(const float* inputs, int batch,
                       const float** logits) final;

 protected:
  BoundedMemoryModel(const ImageInput& input, int max_rows_in_memory)
      : input_(input), max_rows_in_memory_(max_rows_in_memory) {}

  // Allocates the layers' activations for rows_in_memory() images and binds the
  // layers to param() and grad(); called once by Bind, after its checks.
  virtual absl::Status BindLayers(Device& device) = 0;
  // Forward on `images` rows (at most rows_in_memory()), leaving every
  // activation and the logits in logits(); batch norm in training mode or with
  // its running statistics.
  virtual void RunForward(const float* inputs, int images, bool training) = 0;
  // The loss and the backward pass after RunForward(inputs, batch, true):
  // writes the mean loss to *device_loss and every gradient, calling `ready`
  // (never empty) for each parameter as soon as its gradient is final.
  virtual void RunBackward(const float* inputs, const int32_t* labels,
                           int batch, float* device_loss,
                           const GradReadyCallback& ready) = 0;

  // Valid from BindLayers on.
  Device& device() { return *device_; }
  int rows_in_memory() const { return rows_; }
  float* param(int index) { return pointers_.params[index]; }
  float* grad(int index) { return pointers_.grads[index]; }
  // True when RunForward calls NeedParams before each layer, covering every
  // parameter; otherwise all of them are asked for before it runs.
  virtual bool AsksForParamsPerLayer() const { return false; }
  // RunForward, before a layer reads parameters [first, end): true once
  // they may be read; false when the wait failed (the pass then stops,
  // and ForwardBackwardLayerwise returns the error before backward). True
  // at once outside ForwardBackwardLayerwise.
  bool NeedParams(int first, int end);
  // [rows_in_memory() × num_classes()]: RunForward's logits.
  float* logits() { return logits_; }

 private:
  const ImageInput input_;
  const int max_rows_in_memory_;
  Device* device_ = nullptr;  // set as Bind begins allocating
  bool bound_ = false;        // Bind has succeeded
  int rows_ = 0;              // images the activation buffers hold
  int max_batch_ = 0;
  ParamPointers pointers_;
  float* logits_ = nullptr;
  float* all_logits_ = nullptr;  // [max_batch × classes], Forward's result
  // During ForwardBackwardLayerwise: its callback, and the first failure.
  const ParamsNeededCallback* needed_ = nullptr;
  absl::Status needed_status_;
};

}  // namespace gradsync
