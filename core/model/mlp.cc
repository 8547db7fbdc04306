// The multi-layer perceptron: fully connected layers, ReLU between them,
// softmax cross-entropy on the logits, written against the Device kernels so it
// runs unchanged on every backend.
//
// Shapes for layer i (1-based, in = widths[i-1], out = widths[i]), batch B:
//   forward   z_i = a_{i-1} · W_iᵀ + b_i       [B×out]; a_i = relu(z_i) except
//             on the last layer, whose z_L are the logits
//   backward  dW_i = dz_iᵀ · a_{i-1}            [out×in]
//             db_i = Σ_rows dz_i                [out]
//             da_{i-1} = dz_i · W_i             [B×in]; dz_{i-1} = da_{i-1}
//             where a_{i-1} > 0
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/model/model.h"
#include "core/model/param_binding.h"
#include "core/model/param_init.h"

namespace gradsync {
namespace {

absl::Status ValidateWidths(const std::vector<int>& widths) {
  if (widths.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLP layer widths [", absl::StrJoin(widths, ","), "] have ",
        widths.size(), " entries; need at least two (input and classes)"));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer width ", widths[i], " at position ", i + 1, " in [",
          absl::StrJoin(widths, ","), "]; every width must be >= 1"));
    }
  }
  return absl::OkStatus();
}

class Mlp : public Model {
 public:
  explicit Mlp(std::vector<int> widths)
      : widths_(std::move(widths)),
        num_layers_(static_cast<int>(widths_.size()) - 1) {}

  std::string name() const override {
    return absl::StrCat("mlp-", absl::StrJoin(widths_, "-"));
  }

  std::vector<ParamSpec> ParamSpecs() const override {
    std::vector<ParamSpec> specs;
    for (int layer = 1; layer <= num_layers_; ++layer) {
      const int64_t in = widths_[layer - 1];
      const int64_t out = widths_[layer];
      specs.push_back({absl::StrCat("fc", layer, ".weight"), {out, in}});
      specs.push_back({absl::StrCat("fc", layer, ".bias"), {out}});
    }
    return specs;
  }

  int input_dim() const override { return widths_.front(); }
  int num_classes() const override { return widths_.back(); }

  absl::Status Bind(Device& device, const ParamLayout& layout, float* params,
                    float* grads, int max_batch) override;
  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override;
  absl::Status ForwardBackward(const float* inputs, const int32_t* labels,
                               int batch, float* device_loss,
                               const GradReadyCallback& ready) override;
  absl::Status ForwardBackwardLayerwise(
      const float* inputs, const int32_t* labels, int batch, float* device_loss,
      const ParamsNeededCallback& needed,
      const GradReadyCallback& ready) override;
  absl::Status Forward(const float* inputs, int batch,
                       const float** logits) override;

 private:
  // Parameter indices in ParamSpecs() order (layer is 1-based).
  static int WeightIndex(int layer) { return 2 * (layer - 1); }
  static int BiasIndex(int layer) { return 2 * (layer - 1) + 1; }

  absl::Status CheckBatch(const float* inputs, int batch) const;
  // Runs the forward pass, leaving every layer's output in outputs_; asks
  // `needed` (when set) for each layer's weight and bias before using them.
  absl::Status RunForward(const float* inputs, int batch,
                          const ParamsNeededCallback& needed);

  const std::vector<int> widths_;
  const int num_layers_;

  Device* device_ = nullptr;  // set by Bind; the device outlives the model
  int max_batch_ = 0;
  // Indexed by layer (1-based; entry 0 unused).
  std::vector<float*> weights_, biases_, weight_grads_, bias_grads_;
  // outputs_[i] = a_i [max_batch × widths[i]] (post-ReLU for hidden layers,
  // logits for the last).
  std::vector<float*> outputs_;
  // Two [max_batch × max width] buffers the backward pass alternates between:
  // dz_i is read from one while da_{i-1} is written to the other.
  float* delta_[2] = {nullptr, nullptr};
};

absl::Status Mlp::Bind(Device& device, const ParamLayout& layout, float* params,
                       float* grads, int max_batch) {
  ASSIGN_OR_RETURN(ParamPointers pointers,
                   BindParamPointers(name(), layout, ParamSpecs(), params,
                                     grads, max_batch));
  weights_.assign(num_layers_ + 1, nullptr);
  biases_.assign(num_layers_ + 1, nullptr);
  weight_grads_.assign(num_layers_ + 1, nullptr);
  bias_grads_.assign(num_layers_ + 1, nullptr);
  outputs_.assign(num_layers_ + 1, nullptr);
  int max_width = 0;
  for (int layer = 1; layer <= num_layers_; ++layer) {
    weights_[layer] = pointers.params[WeightIndex(layer)];
    biases_[layer] = pointers.params[BiasIndex(layer)];
    weight_grads_[layer] = pointers.grads[WeightIndex(layer)];
    bias_grads_[layer] = pointers.grads[BiasIndex(layer)];
    ASSIGN_OR_RETURN(outputs_[layer], device.Allocate<float>(
                                          int64_t{max_batch} * widths_[layer]));
    max_width = std::max(max_width, widths_[layer]);
  }
  for (float*& delta : delta_) {
    ASSIGN_OR_RETURN(delta,
                     device.Allocate<float>(int64_t{max_batch} * max_width));
  }
  device_ = &device;
  max_batch_ = max_batch;
  return absl::OkStatus();
}

void Mlp::InitParams(uint64_t seed, const ParamLayout& layout,
                     float* host_params) const {
  GS_CHECK(layout.params().size() == static_cast<size_t>(2 * num_layers_))
      << name() << ": InitParams with a layout of " << layout.params().size()
      << " parameters";
  for (int layer = 1; layer <= num_layers_; ++layer) {
    // PyTorch's nn.Linear default: kaiming_uniform_(a=sqrt(5)) on the weight
    // reduces to U(-1/sqrt(in), 1/sqrt(in)), and the bias uses the same bound.
    const float bound =
        1.0f / std::sqrt(static_cast<float>(widths_[layer - 1]));
    for (int index : {WeightIndex(layer), BiasIndex(layer)}) {
      const ParamInfo& info = layout.params()[index];
      std::mt19937_64 generator = ParamGenerator(seed, index);
      FillUniform(generator, bound, host_params + info.offset, info.numel);
    }
  }
}

absl::Status Mlp::CheckBatch(const float* inputs, int batch) const {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), ": Bind() must be called before running"));
  }
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": batch of ", batch, " rows; must be in [1, ",
                     max_batch_, "] (the max batch given to Bind)"));
  }
  if (inputs == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": null inputs"));
  }
  return absl::OkStatus();
}

absl::Status Mlp::RunForward(const float* inputs, int batch,
                             const ParamsNeededCallback& needed) {
  const float* previous = inputs;
  for (int layer = 1; layer <= num_layers_; ++layer) {
    if (needed)
      RETURN_IF_ERROR(needed(WeightIndex(layer), BiasIndex(layer) + 1));
    const int in = widths_[layer - 1];
    const int out = widths_[layer];
    float* z = outputs_[layer];
    device_->Gemm(/*transpose_a=*/false, /*transpose_b=*/true, batch, out, in,
                  1.0f, previous, weights_[layer], 0.0f, z);
    device_->AddRowBias(z, biases_[layer], batch, out);
    if (layer < num_layers_) device_->ReluForward(z, int64_t{batch} * out);
    previous = z;
  }
  return absl::OkStatus();
}

absl::Status Mlp::ForwardBackward(const float* inputs, const int32_t* labels,
                                  int batch, float* device_loss,
                                  const GradReadyCallback& ready) {
  return ForwardBackwardLayerwise(inputs, labels, batch, device_loss, nullptr,
                                  ready);
}

absl::Status Mlp::ForwardBackwardLayerwise(const float* inputs,
                                           const int32_t* labels, int batch,
                                           float* device_loss,
                                           const ParamsNeededCallback& needed,
                                           const GradReadyCallback& ready) {
  RETURN_IF_ERROR(CheckBatch(inputs, batch));
  if (labels == nullptr || device_loss == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": ForwardBackward needs labels and a loss slot"));
  }
  RETURN_IF_ERROR(RunForward(inputs, batch, needed));

  int current = 0;  // delta_[current] holds dz of the layer being processed
  device_->SoftmaxCrossEntropy(outputs_[num_layers_], labels, batch,
                               num_classes(), delta_[current], device_loss);
  for (int layer = num_layers_; layer >= 1; --layer) {
    const int in = widths_[layer - 1];
    const int out = widths_[layer];
    const float* dz = delta_[current];
    const float* input = layer > 1 ? outputs_[layer - 1] : inputs;

    // This layer's gradients first, and hand them over at once: the trainer
    // starts communicating them while the earlier layers are still computed.
    // Bias before weight, the reverse of their storage order, which is the
    // order buckets list them in.
    device_->SumRows(dz, bias_grads_[layer], batch, out);
    if (ready) ready(BiasIndex(layer));
    device_->Gemm(/*transpose_a=*/true, /*transpose_b=*/false, out, in, batch,
                  1.0f, dz, input, 0.0f, weight_grads_[layer]);
    if (ready) ready(WeightIndex(layer));

    // The first layer's input gradient is never used: skip its Gemm.
    if (layer == 1) break;
    float* da = delta_[1 - current];
    device_->Gemm(/*transpose_a=*/false, /*transpose_b=*/false, batch, in, out,
                  1.0f, dz, weights_[layer], 0.0f, da);
    device_->ReluBackward(outputs_[layer - 1], da, int64_t{batch} * in);
    current = 1 - current;
  }
  return absl::OkStatus();
}

absl::Status Mlp::Forward(const float* inputs, int batch,
                          const float** logits) {
  RETURN_IF_ERROR(CheckBatch(inputs, batch));
  if (logits == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": null logits slot"));
  }
  RETURN_IF_ERROR(RunForward(inputs, batch, nullptr));
  *logits = outputs_[num_layers_];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateMlp(const MlpOptions& options) {
  RETURN_IF_ERROR(ValidateWidths(options.widths));
  return std::unique_ptr<Model>(std::make_unique<Mlp>(options.widths));
}

absl::StatusOr<std::vector<int>> ParseLayerWidths(const std::string& text) {
  const std::string flag = absl::StrCat("--layers=", text);
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " is empty; give comma-separated widths such as 784,512,256,10"));
  }
  std::vector<int> widths;
  int position = 0;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    ++position;
    piece = absl::StripAsciiWhitespace(piece);
    int width = 0;
    if (!absl::SimpleAtoi(piece, &width)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer width '", piece, "' at position ", position,
                       " in ", flag, " is not an integer"));
    }
    if (width < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer width ", width, " at position ", position, " in ",
                       flag, "; every width must be >= 1"));
    }
    widths.push_back(width);
  }
  if (widths.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " has ", widths.size(),
                     " width; need at least two (input and classes)"));
  }
  return widths;
}

}  // namespace gradsync
