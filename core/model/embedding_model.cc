// The embedding model (--model=embedding): a bag-of-embeddings classifier, the
// smallest model whose gradient is row-sparse by nature. Each sample is a bag
// of `bag_size` ids (stored as float32 features); the bag's rows of a
// [vocabulary × dim] table are mean-pooled (PyTorch's EmbeddingBag, mode
// "mean") and a two-layer MLP head classifies the pooled vector:
//
//   pooled[b]  = 1/B · Σ_j table[id(b, j)]                  [batch × D]
//   z1 = relu(pooled · W1ᵀ + b1)                            [batch × H]
//   logits = z1 · W2ᵀ + b2                                  [batch × C]
//   backward: the head as the MLP's; dpooled = dz1 · W1; every id's row of
//   the table gradient gets dpooled[b] / B (twice for an id twice in a bag).
//
// Why this model rather than DLRM's: the question is what a row-sparse
// gradient costs each strategy, and one table with a small dense head isolates
// it (DLRM's many tables and its dot-product interactions add dense compute
// and more tables of the same kind, not a new kind of gradient).
//
// The table gradient is zero outside the rows this step touched: it is zeroed
// whole every step (one memset of the table, the only cost of the untouched
// rows here) and the touched rows are written. The lookup and the scatter run
// on the host, so the model runs on the CPU device only: Bind refuses CUDA
// (the Device has no gather/scatter kernels).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/model/model.h"
#include "core/model/param_binding.h"
#include "core/model/param_init.h"

namespace gradsync {
namespace {

// Parameter indices in ParamSpecs() order.
enum Param {
  kTable = 0,
  kHiddenWeight,
  kHiddenBias,
  kOutputWeight,
  kOutputBias,
  kParamCount
};

class EmbeddingModel : public Model {
 public:
  explicit EmbeddingModel(const EmbeddingModelOptions& options)
      : options_(options) {}

  std::string name() const override {
    return absl::StrCat("embedding-", options_.vocabulary, "x", options_.dim,
                        "-bag", options_.bag_size, "-", options_.hidden, "-",
                        options_.num_classes);
  }

  std::vector<ParamSpec> ParamSpecs() const override {
    const int64_t v = options_.vocabulary, d = options_.dim;
    const int64_t h = options_.hidden, c = options_.num_classes;
    return {
        {"embedding.weight", {v, d}, /*sparse_row_width=*/d},
        {"fc1.weight", {h, d}},
        {"fc1.bias", {h}},
        {"fc2.weight", {c, h}},
        {"fc2.bias", {c}},
    };
  }

  int input_dim() const override { return options_.bag_size; }
  int num_classes() const override { return options_.num_classes; }

  absl::Status Bind(Device& device, const ParamLayout& layout, float* params,
                    float* grads, int max_batch) override;
  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override;
  absl::Status ForwardBackward(const float* inputs, const int32_t* labels,
                               int batch, float* device_loss,
                               const GradReadyCallback& ready) override;
  absl::Status Forward(const float* inputs, int batch,
                       const float** logits) override;

 private:
  // Checks the batch and every id (an id outside the table, or not an
  // integer, names its sample and position), and writes the ids to ids_.
  absl::Status ReadIds(const float* inputs, int batch);
  void RunForward(int batch);

  const EmbeddingModelOptions options_;
  Device* device_ = nullptr;
  int max_batch_ = 0;
  std::vector<float*> params_, grads_;
  std::vector<int64_t> ids_;  // [max_batch × bag_size]
  float* pooled_ = nullptr;   // [max_batch × dim]
  float* hidden_ = nullptr;   // [max_batch × hidden], after ReLU
  float* logits_ = nullptr;   // [max_batch × classes]
  float* dlogits_ = nullptr;  // [max_batch × classes]
  float* dhidden_ = nullptr;  // [max_batch × hidden]
  float* dpooled_ = nullptr;  // [max_batch × dim]
};

absl::Status EmbeddingModel::Bind(Device& device, const ParamLayout& layout,
                                  float* params, float* grads, int max_batch) {
  if (device.type() != DeviceType::kCpu) {
    return absl::UnimplementedError(absl::StrCat(
        name(),
        " runs on the CPU only (its table lookup and gradient "
        "scatter run on the host; the Device has no gather kernel): use "
        "--device=cpu"));
  }
  ASSIGN_OR_RETURN(ParamPointers pointers,
                   BindParamPointers(name(), layout, ParamSpecs(), params,
                                     grads, max_batch));
  params_ = pointers.params;
  grads_ = pointers.grads;
  const int64_t rows = max_batch;
  ids_.assign(rows * options_.bag_size, 0);
  ASSIGN_OR_RETURN(pooled_, device.Allocate<float>(rows * options_.dim));
  ASSIGN_OR_RETURN(hidden_, device.Allocate<float>(rows * options_.hidden));
  ASSIGN_OR_RETURN(logits_,
                   device.Allocate<float>(rows * options_.num_classes));
  ASSIGN_OR_RETURN(dlogits_,
                   device.Allocate<float>(rows * options_.num_classes));
  ASSIGN_OR_RETURN(dhidden_, device.Allocate<float>(rows * options_.hidden));
  ASSIGN_OR_RETURN(dpooled_, device.Allocate<float>(rows * options_.dim));
  device_ = &device;
  max_batch_ = max_batch;
  return absl::OkStatus();
}

void EmbeddingModel::InitParams(uint64_t seed, const ParamLayout& layout,
                                float* host_params) const {
  GS_CHECK(layout.params().size() == static_cast<size_t>(kParamCount))
      << name() << ": InitParams with a layout of " << layout.params().size()
      << " parameters";
  // PyTorch's defaults: nn.Embedding N(0, 1); nn.Linear U(±1/sqrt(in)) for
  // weight and bias.
  const ParamInfo& table = layout.params()[kTable];
  std::mt19937_64 table_generator = ParamGenerator(seed, kTable);
  FillNormal(table_generator, 1.0f, host_params + table.offset, table.numel);
  const float hidden_bound = 1.0f / std::sqrt(static_cast<float>(options_.dim));
  const float output_bound =
      1.0f / std::sqrt(static_cast<float>(options_.hidden));
  for (int index = kHiddenWeight; index < kParamCount; ++index) {
    const ParamInfo& info = layout.params()[index];
    std::mt19937_64 generator = ParamGenerator(seed, index);
    FillUniform(generator, index <= kHiddenBias ? hidden_bound : output_bound,
                host_params + info.offset, info.numel);
  }
}

absl::Status EmbeddingModel::ReadIds(const float* inputs, int batch) {
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
  const int64_t count = int64_t{batch} * options_.bag_size;
  for (int64_t i = 0; i < count; ++i) {
    const float id = inputs[i];
    // A negated comparison so that NaN is refused too.
    if (!(id >= 0 && id < static_cast<float>(options_.vocabulary)) ||
        id != std::floor(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": sample ", i / options_.bag_size, " of the batch has id ",
          id, " at position ", i % options_.bag_size,
          "; ids must be integers in [0, ", options_.vocabulary,
          ") (the table's rows): is the data set's vocabulary "
          "(--embedding_rows) the model's?"));
    }
    ids_[i] = static_cast<int64_t>(id);
  }
  return absl::OkStatus();
}

void EmbeddingModel::RunForward(int batch) {
  const int d = options_.dim, bag = options_.bag_size;
  const float* table = params_[kTable];
  const float scale = 1.0f / static_cast<float>(bag);
  for (int b = 0; b < batch; ++b) {
    float* out = pooled_ + int64_t{b} * d;
    std::fill(out, out + d, 0.0f);
    for (int j = 0; j < bag; ++j) {
      const float* row = table + ids_[int64_t{b} * bag + j] * d;
      for (int k = 0; k < d; ++k) out[k] += row[k];
    }
    for (int k = 0; k < d; ++k) out[k] *= scale;
  }
  const int h = options_.hidden, c = options_.num_classes;
  device_->Gemm(false, true, batch, h, d, 1.0f, pooled_, params_[kHiddenWeight],
                0.0f, hidden_);
  device_->AddRowBias(hidden_, params_[kHiddenBias], batch, h);
  device_->ReluForward(hidden_, int64_t{batch} * h);
  device_->Gemm(false, true, batch, c, h, 1.0f, hidden_, params_[kOutputWeight],
                0.0f, logits_);
  device_->AddRowBias(logits_, params_[kOutputBias], batch, c);
}

absl::Status EmbeddingModel::ForwardBackward(const float* inputs,
                                             const int32_t* labels, int batch,
                                             float* device_loss,
                                             const GradReadyCallback& ready) {
  RETURN_IF_ERROR(ReadIds(inputs, batch));
  if (labels == nullptr || device_loss == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": ForwardBackward needs labels and a loss slot"));
  }
  RunForward(batch);
  const int d = options_.dim, h = options_.hidden, c = options_.num_classes;
  device_->SoftmaxCrossEntropy(logits_, labels, batch, c, dlogits_,
                               device_loss);
  // The head, last layer first, each tensor handed over as soon as it is
  // final (bias before weight, the order buckets list them in).
  device_->SumRows(dlogits_, grads_[kOutputBias], batch, c);
  if (ready) ready(kOutputBias);
  device_->Gemm(true, false, c, h, batch, 1.0f, dlogits_, hidden_, 0.0f,
                grads_[kOutputWeight]);
  if (ready) ready(kOutputWeight);
  device_->Gemm(false, false, batch, h, c, 1.0f, dlogits_,
                params_[kOutputWeight], 0.0f, dhidden_);
  device_->ReluBackward(hidden_, dhidden_, int64_t{batch} * h);
  device_->SumRows(dhidden_, grads_[kHiddenBias], batch, h);
  if (ready) ready(kHiddenBias);
  device_->Gemm(true, false, h, d, batch, 1.0f, dhidden_, pooled_, 0.0f,
                grads_[kHiddenWeight]);
  if (ready) ready(kHiddenWeight);
  device_->Gemm(false, false, batch, d, h, 1.0f, dhidden_,
                params_[kHiddenWeight], 0.0f, dpooled_);

  // The table: zero everywhere (a strategy may have left the other workers'
  // rows in the buffer last step), then each bag's share of dpooled added to
  // its rows.
  float* table_grad = grads_[kTable];
  device_->Fill(table_grad, options_.vocabulary * int64_t{d}, 0.0f);
  const int bag = options_.bag_size;
  const float scale = 1.0f / static_cast<float>(bag);
  for (int b = 0; b < batch; ++b) {
    const float* upstream = dpooled_ + int64_t{b} * d;
    for (int j = 0; j < bag; ++j) {
      float* row = table_grad + ids_[int64_t{b} * bag + j] * d;
      for (int k = 0; k < d; ++k) row[k] += scale * upstream[k];
    }
  }
  if (ready) ready(kTable);
  return absl::OkStatus();
}

absl::Status EmbeddingModel::Forward(const float* inputs, int batch,
                                     const float** logits) {
  RETURN_IF_ERROR(ReadIds(inputs, batch));
  if (logits == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": null logits slot"));
  }
  RunForward(batch);
  *logits = logits_;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateEmbeddingModel(
    const EmbeddingModelOptions& options) {
  const auto refuse = [](const std::string& what, int64_t value,
                         const std::string& flag) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding model: ", what, " of ", value,
                     " must be at least 1 (", flag, ")"));
  };
  if (options.vocabulary < 1) {
    return refuse("a table", options.vocabulary, "--embedding_rows");
  }
  // Ids arrive as float32 features, which hold integers exactly up to 2^24.
  constexpr int64_t kMaxRows = int64_t{1} << 24;
  if (options.vocabulary > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding model: a table of ", options.vocabulary,
        " rows is more than the ", kMaxRows,
        " ids a float32 feature holds exactly (--embedding_rows)"));
  }
  if (options.dim < 1) return refuse("rows", options.dim, "--embedding_dim");
  if (options.bag_size < 1) {
    return refuse("bags", options.bag_size, "--bag_size");
  }
  if (options.hidden < 1) {
    return refuse("a hidden layer", options.hidden, "--embedding_hidden");
  }
  if (options.num_classes < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding model: ", options.num_classes, " classes; need at least 2"));
  }
  return std::unique_ptr<Model>(std::make_unique<EmbeddingModel>(options));
}

}  // namespace gradsync
