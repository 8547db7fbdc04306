#include "core/model/bounded_memory_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {

absl::Status BoundedMemoryModel::Bind(Device& device, const ParamLayout& layout,
                                      float* params, float* grads,
                                      int max_batch) {
  bound_ = false;
  ASSIGN_OR_RETURN(pointers_, BindParamPointers(name(), layout, ParamSpecs(),
                                                params, grads, max_batch));
  device_ = &device;
  max_batch_ = max_batch;
  rows_ = std::min(max_batch, max_rows_in_memory_);
  const int classes = num_classes();
  ASSIGN_OR_RETURN(logits_, device.Allocate<float>(int64_t{rows_} * classes));
  ASSIGN_OR_RETURN(all_logits_,
                   device.Allocate<float>(int64_t{max_batch} * classes));
  RETURN_IF_ERROR(BindLayers(device));
  bound_ = true;
  return absl::OkStatus();
}

absl::Status BoundedMemoryModel::ForwardBackward(
    const float* inputs, const int32_t* labels, int batch, float* device_loss,
    const GradReadyCallback& ready) {
  return ForwardBackwardLayerwise(inputs, labels, batch, device_loss, nullptr,
                                  ready);
}

bool BoundedMemoryModel::NeedParams(int first, int end) {
  if (needed_ == nullptr || !*needed_) return true;
  if (needed_status_.ok()) needed_status_ = (*needed_)(first, end);
  return needed_status_.ok();
}

absl::Status BoundedMemoryModel::ForwardBackwardLayerwise(
    const float* inputs, const int32_t* labels, int batch, float* device_loss,
    const ParamsNeededCallback& needed, const GradReadyCallback& ready) {
  if (!bound_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), ": Bind() must be called before running"));
  }
  if (batch < 1 || batch > rows_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": training batch of ", batch, " images; must be in [1, ",
        rows_, "] (the activation memory bound at Bind)"));
  }
  if (inputs == nullptr || labels == nullptr || device_loss == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": ForwardBackward needs inputs, labels and a loss slot"));
  }
  static const GradReadyCallback* const kIgnore =
      new GradReadyCallback([](int) {});
  // A model whose forward does not ask per layer gets every parameter
  // before it starts.
  if (needed && !AsksForParamsPerLayer()) {
    RETURN_IF_ERROR(needed(0, static_cast<int>(ParamSpecs().size())));
  }
  needed_ = AsksForParamsPerLayer() ? &needed : nullptr;
  needed_status_ = absl::OkStatus();
  RunForward(inputs, batch, /*training=*/true);
  needed_ = nullptr;
  if (!needed_status_.ok()) return needed_status_;
  RunBackward(inputs, labels, batch, device_loss, ready ? ready : *kIgnore);
  return absl::OkStatus();
}

absl::Status BoundedMemoryModel::Forward(const float* inputs, int batch,
                                         const float** logits) {
  if (!bound_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), ": Bind() must be called before running"));
  }
  if (batch < 1 || batch > max_batch_ || inputs == nullptr ||
      logits == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": Forward of ", batch, " images; must be in [1, ",
                     max_batch_, "] with inputs and a logits slot"));
  }
  // In pieces of at most rows_ images, each piece's logits copied out.
  const int classes = num_classes();
  for (int first = 0; first < batch; first += rows_) {
    const int images = std::min(rows_, batch - first);
    RunForward(inputs + int64_t{first} * input_dim(), images,
               /*training=*/false);
    device_->CopyOnDevice(all_logits_ + int64_t{first} * classes, logits_,
                          int64_t{images} * classes);
  }
  *logits = all_logits_;
  return absl::OkStatus();
}

}  // namespace gradsync
