// Synthetic models (see synthetic_model.h): architecture tables, emulated
// compute time and deterministic gradients.
#include "core/model/synthetic_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

// The gradient pattern's period: prime, so no power-of-two chunk or bucket
// size is a multiple of it and a misplaced chunk always changes values.
constexpr int64_t kPeriod = 4099;
// The staging buffer holds this many periods: large enough that most copies
// are long memcpy runs, small enough (4 MiB) to stay warm in cache.
constexpr int64_t kStagingPeriods = 256;
// Waits shorter than this are skipped (the sleep would overshoot them); the
// next tensor's deadline absorbs the difference, so the step still lasts
// --compute_ms.
constexpr auto kMinSleep = std::chrono::microseconds(100);

int Pattern(int64_t j) { return static_cast<int>((j * j + 3 * j) % 17) - 8; }

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

int64_t Phase(int64_t step, int param) {
  return static_cast<int64_t>(
      SplitMix64(static_cast<uint64_t>(step) * 1000003ULL +
                 static_cast<uint64_t>(param)) %
      kPeriod);
}

// --- Architectures -----------------------------------------------------------

void Add(std::vector<ParamSpec>& specs, std::string name,
         std::vector<int64_t> shape) {
  specs.push_back(ParamSpec{std::move(name), std::move(shape)});
}

// A convolution (no bias) followed by batch norm (scale and shift), as in
// torchvision's ResNets.
void AddConvBn(std::vector<ParamSpec>& specs, const std::string& conv,
               const std::string& bn, int64_t out, int64_t in, int64_t k) {
  Add(specs, conv + ".weight", {out, in, k, k});
  Add(specs, bn + ".weight", {out});
  Add(specs, bn + ".bias", {out});
}

// torchvision resnet50: bottleneck blocks [3, 4, 6, 3], expansion 4.
std::vector<ParamSpec> ResNet50() {
  std::vector<ParamSpec> specs;
  AddConvBn(specs, "conv1", "bn1", 64, 3, 7);
  const int64_t planes[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t p = planes[layer];
    for (int block = 0; block < blocks[layer]; ++block) {
      const std::string prefix =
          absl::StrCat("layer", layer + 1, ".", block, ".");
      AddConvBn(specs, prefix + "conv1", prefix + "bn1", p, in, 1);
      AddConvBn(specs, prefix + "conv2", prefix + "bn2", p, p, 3);
      AddConvBn(specs, prefix + "conv3", prefix + "bn3", 4 * p, p, 1);
      // The first block of every stage changes the width (and stride), so
      // its shortcut is a 1×1 convolution with batch norm.
      if (block == 0) {
        AddConvBn(specs, prefix + "downsample.0", prefix + "downsample.1",
                  4 * p, in, 1);
      }
      in = 4 * p;
    }
  }
  Add(specs, "fc.weight", {1000, 2048});
  Add(specs, "fc.bias", {1000});
  return specs;
}

// torchvision vgg16 (configuration D, no batch norm). The indices in the
// names are the module positions in torchvision's `features` Sequential
// (each convolution is followed by a ReLU, each 'M' is a max-pool).
std::vector<ParamSpec> Vgg16() {
  std::vector<ParamSpec> specs;
  const int config[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 0,
                        512, 512, 512, 0,   512, 512, 512, 0};  // 0 = max-pool
  int64_t in = 3;
  int module = 0;
  for (int width : config) {
    if (width == 0) {
      module += 1;
      continue;
    }
    Add(specs, absl::StrCat("features.", module, ".weight"), {width, in, 3, 3});
    Add(specs, absl::StrCat("features.", module, ".bias"), {width});
    in = width;
    module += 2;
  }
  // 512 channels × 7 × 7 after the adaptive pool: the 102.8 M-parameter layer.
  Add(specs, "classifier.0.weight", {4096, 512 * 7 * 7});
  Add(specs, "classifier.0.bias", {4096});
  Add(specs, "classifier.3.weight", {4096, 4096});
  Add(specs, "classifier.3.bias", {4096});
  Add(specs, "classifier.6.weight", {1000, 4096});
  Add(specs, "classifier.6.bias", {1000});
  return specs;
}

// Hugging Face bert-base-uncased (BertModel with its pooler): hidden 768,
// 12 layers, FFN 3072, vocabulary 30522, 512 positions, 2 token types.
std::vector<ParamSpec> BertBase() {
  constexpr int64_t kHidden = 768, kFfn = 3072;
  std::vector<ParamSpec> specs;
  Add(specs, "embeddings.word_embeddings.weight", {30522, kHidden});
  Add(specs, "embeddings.position_embeddings.weight", {512, kHidden});
  Add(specs, "embeddings.token_type_embeddings.weight", {2, kHidden});
  Add(specs, "embeddings.LayerNorm.weight", {kHidden});
  Add(specs, "embeddings.LayerNorm.bias", {kHidden});
  for (int layer = 0; layer < 12; ++layer) {
    const std::string p = absl::StrCat("encoder.layer.", layer, ".");
    for (const char* projection : {"query", "key", "value"}) {
      Add(specs, absl::StrCat(p, "attention.self.", projection, ".weight"),
          {kHidden, kHidden});
      Add(specs, absl::StrCat(p, "attention.self.", projection, ".bias"),
          {kHidden});
    }
    Add(specs, p + "attention.output.dense.weight", {kHidden, kHidden});
    Add(specs, p + "attention.output.dense.bias", {kHidden});
    Add(specs, p + "attention.output.LayerNorm.weight", {kHidden});
    Add(specs, p + "attention.output.LayerNorm.bias", {kHidden});
    Add(specs, p + "intermediate.dense.weight", {kFfn, kHidden});
    Add(specs, p + "intermediate.dense.bias", {kFfn});
    Add(specs, p + "output.dense.weight", {kHidden, kFfn});
    Add(specs, p + "output.dense.bias", {kHidden});
    Add(specs, p + "output.LayerNorm.weight", {kHidden});
    Add(specs, p + "output.LayerNorm.bias", {kHidden});
  }
  Add(specs, "pooler.dense.weight", {kHidden, kHidden});
  Add(specs, "pooler.dense.bias", {kHidden});
  return specs;
}

absl::StatusOr<std::vector<ParamSpec>> Custom(int64_t params, int tensors) {
  if (tensors < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--custom_tensors=", tensors, " must be at least 1"));
  }
  if (params < tensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--custom_params=", params, " must be at least --custom_tensors=",
        tensors, " (every tensor needs one element)"));
  }
  std::vector<ParamSpec> specs;
  for (int t = 0; t < tensors; ++t) {
    // The first (params mod tensors) tensors take one extra element.
    const int64_t numel = params / tensors + (t < params % tensors ? 1 : 0);
    Add(specs, absl::StrCat("tensor", t, ".weight"), {numel});
  }
  return specs;
}

// --- The model
// -----------------------------------------------------------------

class SyntheticModel : public Model {
 public:
  SyntheticModel(SyntheticModelOptions options, std::vector<ParamSpec> specs)
      : options_(std::move(options)), specs_(std::move(specs)) {}

  std::string name() const override {
    return options_.architecture == "custom"
               ? absl::StrCat("custom-", options_.custom_params, "x",
                              options_.custom_tensors)
               : options_.architecture;
  }
  std::vector<ParamSpec> ParamSpecs() const override { return specs_; }
  int input_dim() const override { return options_.input_dim; }
  int num_classes() const override { return options_.num_classes; }

  absl::Status Bind(Device& device, const ParamLayout& layout, float* params,
                    float* grads, int max_batch) override {
    if (layout.params().size() != specs_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": the layout has ", layout.params().size(),
                       " parameters, the model ", specs_.size()));
    }
    device_ = &device;
    grads_ = grads;
    (void)params;  // the synthetic model never reads its parameters
    offsets_.clear();
    numels_.clear();
    total_numel_ = 0;
    for (const ParamInfo& info : layout.params()) {
      offsets_.push_back(info.offset);
      numels_.push_back(info.numel);
      total_numel_ += info.numel;
    }
    ASSIGN_OR_RETURN(logits_, device.Allocate<float>(int64_t{max_batch} *
                                                     options_.num_classes));
    host_labels_.resize(max_batch);
    staging_.resize(kPeriod * kStagingPeriods);
    return absl::OkStatus();
  }

  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override {
    // Small multiples of 1/64: exact, identical on every rank, and different
    // per seed and per tensor.
    for (size_t p = 0; p < layout.params().size(); ++p) {
      const ParamInfo& info = layout.params()[p];
      int64_t j = static_cast<int64_t>(SplitMix64(seed * 7919 + p) % kPeriod);
      float* out = host_params + info.offset;
      for (int64_t i = 0; i < info.numel; ++i) {
        out[i] = static_cast<float>(Pattern(j)) / 64.0f;
        if (++j == kPeriod) j = 0;
      }
    }
  }

  absl::Status ForwardBackward(const float* inputs, const int32_t* labels,
                               int batch, float* device_loss,
                               const GradReadyCallback& ready) override {
    return ForwardBackwardLayerwise(inputs, labels, batch, device_loss,
                                    nullptr, ready);
  }

  // Forward in forward order: each tensor's parameters asked for, then its
  // share of forward's time; then backward as ForwardBackward describes.
  absl::Status ForwardBackwardLayerwise(
      const float* inputs, const int32_t* labels, int batch,
      float* device_loss, const ParamsNeededCallback& needed,
      const GradReadyCallback& ready) override {
    (void)inputs;
    const int num_params = static_cast<int>(numels_.size());
    const double forward_ms = options_.compute_ms * options_.forward_share;
    if (needed && forward_ms <= 0) {
      RETURN_IF_ERROR(needed(0, num_params));
    } else if (forward_ms > 0) {
      // Each tensor's share of forward starts once its parameters are
      // there: a wait for them delays the rest of forward, as a layer
      // cannot compute before its weights are final.
      Clock::time_point deadline = Clock::now();
      for (int p = 0; p < num_params; ++p) {
        if (needed) RETURN_IF_ERROR(needed(p, p + 1));
        deadline = std::max(deadline, Clock::now()) +
                   std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double, std::milli>(forward_ms) *
                       (static_cast<double>(numels_[p]) / total_numel_));
        if (deadline - Clock::now() > kMinSleep || p == num_params - 1) {
          std::this_thread::sleep_until(deadline);
        }
      }
    }
    const Clock::time_point start = Clock::now();
    if (batch < 1 || batch > static_cast<int>(host_labels_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": batch of ", batch,
                       " rows; Bind() allowed 1..", host_labels_.size()));
    }
    RETURN_IF_ERROR(device_->CopyToHost(host_labels_.data(), labels,
                                        sizeof(int32_t) * batch));
    double label_sum = 0;
    for (int i = 0; i < batch; ++i) label_sum += host_labels_[i];
    const float label_mean = static_cast<float>(label_sum / batch);
    // The staging buffer is the pattern repeated, plus this step's mean;
    // every tensor is a copy out of it starting at its phase.
    for (int64_t k = 0; k < kPeriod; ++k) {
      staging_[k] = static_cast<float>(Pattern(k)) + label_mean;
    }
    for (int64_t k = 1; k < kStagingPeriods; ++k) {
      std::copy_n(staging_.data(), kPeriod, staging_.data() + k * kPeriod);
    }
    RETURN_IF_ERROR(
        device_->CopyToDevice(device_loss, &label_mean, sizeof(float)));

    const double backward_ms = options_.compute_ms - forward_ms;
    int64_t done = 0;
    for (int p = num_params - 1; p >= 0; --p) {
      RETURN_IF_ERROR(FillGradient(p));
      done += numels_[p];
      SleepUntilShare(start, backward_ms, done, p == 0);
      ready(p);
    }
    ++step_;
    return absl::OkStatus();
  }

  absl::Status Forward(const float* inputs, int batch,
                       const float** logits) override {
    (void)inputs;
    // No predictions: every class scores 0 (evaluating a synthetic model
    // measures nothing, and the train command turns evaluation off).
    device_->Fill(logits_, int64_t{batch} * options_.num_classes, 0.0f);
    *logits = logits_;
    return absl::OkStatus();
  }

 private:
  // Sleeps until `done` of the model's floats have had their share of
  // `budget_ms` since `start`; a wait under kMinSleep is left to the next
  // tensor's deadline, except for the `last` one.
  void SleepUntilShare(Clock::time_point start, double budget_ms, int64_t done,
                       bool last) const {
    if (budget_ms <= 0) return;
    const Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::milli>(budget_ms) *
                    (static_cast<double>(done) / total_numel_));
    if (deadline - Clock::now() > kMinSleep || last) {
      std::this_thread::sleep_until(deadline);
    }
  }

  // Writes parameter p's gradient: copies of the staging buffer, each
  // starting where the pattern's phase says.
  absl::Status FillGradient(int p) {
    const int64_t run = static_cast<int64_t>(staging_.size()) - kPeriod;
    float* dst = grads_ + offsets_[p];
    int64_t remaining = numels_[p];
    int64_t phase = Phase(step_, p);
    while (remaining > 0) {
      const int64_t n = std::min(remaining, run);
      RETURN_IF_ERROR(device_->CopyToDevice(dst, staging_.data() + phase,
                                            sizeof(float) * n));
      dst += n;
      remaining -= n;
      phase = (phase + n) % kPeriod;
    }
    return absl::OkStatus();
  }

  const SyntheticModelOptions options_;
  const std::vector<ParamSpec> specs_;
  Device* device_ = nullptr;
  float* grads_ = nullptr;
  float* logits_ = nullptr;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> numels_;
  int64_t total_numel_ = 0;
  std::vector<int32_t> host_labels_;
  std::vector<float> staging_;
  int64_t step_ = 0;
};

}  // namespace

std::vector<std::string> SyntheticArchitectures() {
  return {"resnet50", "vgg16", "bert-base", "custom"};
}

absl::StatusOr<std::vector<ParamSpec>> SyntheticParamSpecs(
    const SyntheticModelOptions& options) {
  if (options.architecture == "resnet50") return ResNet50();
  if (options.architecture == "vgg16") return Vgg16();
  if (options.architecture == "bert-base") return BertBase();
  if (options.architecture == "custom") {
    return Custom(options.custom_params, options.custom_tensors);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown synthetic model '", options.architecture, "'; choose one of ",
      absl::StrJoin(SyntheticArchitectures(), ", ")));
}

absl::StatusOr<std::unique_ptr<Model>> CreateSyntheticModel(
    const SyntheticModelOptions& options) {
  if (!(options.compute_ms >= 0) || std::isinf(options.compute_ms)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compute_ms=", options.compute_ms, " must be >= 0 and finite"));
  }
  if (!(options.forward_share >= 0 && options.forward_share < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compute_forward_share=", options.forward_share,
                     " must be in [0, 1): the part of --compute_ms spent in "
                     "forward (a third is typical of real networks)"));
  }
  if (options.input_dim < 1 || options.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic model: input_dim ", options.input_dim, " and num_classes ",
        options.num_classes, " must be >= 1"));
  }
  ASSIGN_OR_RETURN(std::vector<ParamSpec> specs, SyntheticParamSpecs(options));
  return std::unique_ptr<Model>(new SyntheticModel(options, std::move(specs)));
}

float SyntheticGradient(int64_t step, int param, int64_t element,
                        float label_mean) {
  return static_cast<float>(Pattern((element + Phase(step, param)) % kPeriod)) +
         label_mean;
}

}  // namespace gradsync
