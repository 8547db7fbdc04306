// A model: parameters described by ParamSpecs (forward order) and a
// forward/backward pass over device buffers. Models know nothing about
// communication; they report each parameter's gradient as final through a
// callback, and the trainer turns that into GradientSync::BucketReady.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"

namespace gradsync {

// Called with a parameter index (into ParamLayout::params()) once its gradient
// is final for this step.
using GradReadyCallback = std::function<void(int param)>;

// Called before forward first reads parameters [first, end) (indices into
// ParamLayout::params()); returns once they may be read, or why not.
using ParamsNeededCallback =
    std::function<absl::Status(int first_param, int end_param)>;

class Model {
 public:
  virtual ~Model() = default;

  virtual std::string name() const = 0;
  // The parameters in forward order.
  virtual std::vector<ParamSpec> ParamSpecs() const = 0;
  virtual int input_dim() const = 0;
  virtual int num_classes() const = 0;

  // Binds the model to its flat parameter and gradient buffers (device memory
  // laid out by `layout`) and allocates activations for up to `max_batch` rows.
  virtual absl::Status Bind(Device& device, const ParamLayout& layout,
                            float* params, float* grads, int max_batch) = 0;

  // Writes the initial parameters for `seed` into `host_params` (host memory,
  // layout.total_numel() floats). Identical on every rank for the same seed.
  virtual void InitParams(uint64_t seed, const ParamLayout& layout,
                          float* host_params) const = 0;

  // Forward and backward on `batch` rows: inputs [batch × input_dim] and labels
  // on the device. Overwrites the gradient buffer; writes the mean loss to
  // *device_loss (one device float). Calls `ready` for each parameter as soon
  // as its gradient is final, last layer first.
  virtual absl::Status ForwardBackward(const float* inputs,
                                       const int32_t* labels, int batch,
                                       float* device_loss,
                                       const GradReadyCallback& ready) = 0;

  // ForwardBackward that asks for its parameters layer by layer as forward
  // reaches them, so the trainer can let the first layers run while the
  // previous step's later buckets are still being synchronized. Every
  // parameter is asked for before backward writes any gradient. The default
  // asks for all of them at once, which is correct for every model; a model
  // overrides it to ask per layer.
  virtual absl::Status ForwardBackwardLayerwise(
      const float* inputs, const int32_t* labels, int batch, float* device_loss,
      const ParamsNeededCallback& needed, const GradReadyCallback& ready) {
    if (needed) {
      absl::Status status = needed(0, static_cast<int>(ParamSpecs().size()));
      if (!status.ok()) return status;
    }
    return ForwardBackward(inputs, labels, batch, device_loss, ready);
  }

  // Forward only, in evaluation mode (batch normalisation with its running
  // statistics); leaves logits [batch × num_classes] in *logits (device
  // memory owned by the model, valid until the next call).
  virtual absl::Status Forward(const float* inputs, int batch,
                               const float** logits) = 0;

  // Buffers: model state that is not a parameter and gets no gradient
  // (batch normalisation's running statistics), buffer_count() floats of
  // device memory from Bind on, which ForwardBackward updates and Forward
  // reads. Strategies never see them; the trainer gives every rank worker 0's
  // before it evaluates (as DDP broadcasts rank 0's buffers). Models without
  // any keep the defaults.
  virtual int64_t buffer_count() const { return 0; }
  virtual float* buffers() { return nullptr; }
};

// The shape of the images a convolutional model takes: CHW rows of the data
// set (core/data/dataset.h), and the number of classes.
struct ImageInput {
  int channels = 1;
  int height = 28;
  int width = 28;
  int num_classes = 10;
};

struct CnnOptions {
  ImageInput input;
  // Two 3×3 convolutions (padding 1, with bias, each followed by ReLU and a
  // 2×2 max-pool), then a hidden fully connected layer and the classifier.
  int conv1_channels = 32;
  int conv2_channels = 64;
  int hidden = 128;
  // Evaluation batches larger than this run in pieces, so that activation
  // memory stays bounded; a training batch must fit.
  int max_rows_in_memory = 1024;
};

// The small CNN for Fashion-MNIST (`--model=cnn`), core/model/cnn.cc.
absl::StatusOr<std::unique_ptr<Model>> CreateCnn(const CnnOptions& options);

struct ResNetOptions {
  ImageInput input{3, 32, 32, 10};
  // BasicBlocks per stage and the stages' widths: ResNet-18 is [2,2,2,2] over
  // [64,128,256,512]. Smaller values make test-sized networks of the same
  // structure.
  std::vector<int> blocks = {2, 2, 2, 2};
  std::vector<int> widths = {64, 128, 256, 512};
  int max_rows_in_memory = 256;
};

// ResNet-18 in its CIFAR form (`--model=resnet18`), core/model/resnet.cc.
absl::StatusOr<std::unique_ptr<Model>> CreateResNet(
    const ResNetOptions& options);

struct MlpOptions {
  std::vector<int> widths = {784, 512, 256, 10};  // input, hidden..., classes
};

// Fully connected layers with ReLU between them and softmax cross-entropy on
// the logits. Parameters: fc{i}.weight [out × in], fc{i}.bias [out].
absl::StatusOr<std::unique_ptr<Model>> CreateMlp(const MlpOptions& options);

struct EmbeddingModelOptions {
  // The table: `vocabulary` rows of `dim` floats (row-sparse gradient).
  int64_t vocabulary = 100000;
  int dim = 32;
  // Ids per sample: the model's input_dim().
  int bag_size = 16;
  // The MLP head: dim -> hidden -> num_classes.
  int hidden = 64;
  int num_classes = 2;
};

// A bag-of-embeddings classifier (`--model=embedding`),
// core/model/embedding_model.cc. Parameters: embedding.weight [vocabulary ×
// dim] (ParamSpec::sparse_row_width = dim), fc1.{weight,bias},
// fc2.{weight,bias}. CPU device only.
absl::StatusOr<std::unique_ptr<Model>> CreateEmbeddingModel(
    const EmbeddingModelOptions& options);

// Parses "784,512,256,10"; every width must be >= 1 and there must be at
// least two (input and classes).
absl::StatusOr<std::vector<int>> ParseLayerWidths(const std::string& text);

}  // namespace gradsync
