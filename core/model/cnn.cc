// The small CNN for Fashion-MNIST (--model=cnn), on the Device interface:
//
//   conv1 3×3/1 pad 1 (+bias) → ReLU → max-pool 2×2
//   conv2 3×3/1 pad 1 (+bias) → ReLU → max-pool 2×2
//   flatten → fc1 (+bias) → ReLU → fc2 (+bias) = logits
//
// Parameters, named as PyTorch's named_parameters would list such a module:
// conv1.weight [c1,C,3,3], conv1.bias, conv2.weight [c2,c1,3,3], conv2.bias,
// fc1.weight [hidden × c2·H/4·W/4], fc1.bias, fc2.weight, fc2.bias. The
// activations are NHWC (core/device/layer_geometry.h), so fc1 reads each
// image's pooled features in (h, w, c) order, where a PyTorch module with
// NCHW tensors would flatten them (c, h, w): the shapes and the function
// class are the same, a weight copied from PyTorch would need its columns
// permuted.
//
// Backward hands every gradient to the `ready` callback as soon as it is
// final, classifier first, so buckets of the late layers are synchronized
// while the convolutions' backward still runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/model/bounded_memory_model.h"
#include "core/model/conv2d.h"
#include "core/model/model.h"
#include "core/model/param_init.h"
#include "core/model/pooling.h"

namespace gradsync {
namespace {

// The column scratch's cap: 64 MiB, past which a batch's GEMM rows no longer
// gain anything and several workers on one machine would each hold it.
constexpr int64_t kMaxColumnFloats = int64_t{1} << 24;

// Parameter indices in ParamSpecs() order.
enum CnnParam {
  kConv1Weight,
  kConv1Bias,
  kConv2Weight,
  kConv2Bias,
  kFc1Weight,
  kFc1Bias,
  kFc2Weight,
  kFc2Bias,
  kCnnParams
};

class Cnn : public BoundedMemoryModel {
 public:
  explicit Cnn(const CnnOptions& options)
      : BoundedMemoryModel(options.input, options.max_rows_in_memory),
        options_(options),
        conv1_("conv1", Conv2dShape{options.input.channels,
                                    options.conv1_channels, 3, 1, 1, true}),
        conv2_("conv2", Conv2dShape{options.conv1_channels,
                                    options.conv2_channels, 3, 1, 1, true}),
        pool_(2, 2) {
    const ImageInput& in = options.input;
    pool1_ = pool_.Geometry(1, options.conv1_channels, in.height, in.width);
    pool2_ = pool_.Geometry(1, options.conv2_channels, pool1_.out_height,
                            pool1_.out_width);
    features_ = pool2_.out_height * pool2_.out_width * options.conv2_channels;
  }

  std::string name() const override {
    const ImageInput& in = options_.input;
    return absl::StrCat("cnn-", in.channels, "x", in.height, "x", in.width, "-",
                        options_.conv1_channels, "-", options_.conv2_channels,
                        "-", options_.hidden, "-", in.num_classes);
  }

  std::vector<ParamSpec> ParamSpecs() const override {
    std::vector<ParamSpec> specs = conv1_.ParamSpecs();
    for (const ParamSpec& spec : conv2_.ParamSpecs()) specs.push_back(spec);
    specs.push_back({"fc1.weight", {options_.hidden, features_}});
    specs.push_back({"fc1.bias", {options_.hidden}});
    specs.push_back(
        {"fc2.weight", {options_.input.num_classes, options_.hidden}});
    specs.push_back({"fc2.bias", {options_.input.num_classes}});
    return specs;
  }

  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override;

 private:
  absl::Status BindLayers(Device& device) override;
  // No batch norm: training and evaluation run the same forward pass.
  void RunForward(const float* inputs, int images, bool training) override;
  bool AsksForParamsPerLayer() const override { return true; }
  void RunBackward(const float* inputs, const int32_t* labels, int batch,
                   float* device_loss, const GradReadyCallback& ready) override;
  ConvGeometry Conv1Geometry(int images) const {
    const ImageInput& in = options_.input;
    return conv1_.Geometry(images, in.height, in.width,
                           NchwLayout(in.channels, in.height, in.width));
  }
  ConvGeometry Conv2Geometry(int images) const {
    return conv2_.Geometry(images, pool1_.out_height, pool1_.out_width,
                           NhwcLayout(options_.conv1_channels,
                                      pool1_.out_height, pool1_.out_width));
  }
  PoolGeometry Pool(const PoolGeometry& one, int images) const {
    PoolGeometry g = one;
    g.batch = images;
    return g;
  }

  const CnnOptions options_;
  Conv2d conv1_, conv2_;
  MaxPool2d pool_;
  PoolGeometry pool1_, pool2_;  // for one image
  int features_ = 0;            // fc1's inputs

  // Activations (NHWC).
  float* conv1_out_ = nullptr;  // [rows·H·W × c1], after ReLU
  float* pool1_out_ = nullptr;
  int32_t* pool1_where_ = nullptr;
  float* conv2_out_ = nullptr;  // after ReLU
  float* pool2_out_ = nullptr;  // = the flattened features [rows × features]
  int32_t* pool2_where_ = nullptr;
  float* hidden_ = nullptr;  // [rows × hidden], after ReLU
  // Gradients flowing backward, each as large as the largest activation.
  float* delta_[2] = {nullptr, nullptr};
  float* columns_ = nullptr;
  int64_t columns_capacity_ = 0;
};

absl::Status Cnn::BindLayers(Device& device) {
  const ImageInput& in = options_.input;
  const int64_t rows = rows_in_memory();
  const int64_t conv1_size =
      rows * in.height * in.width * options_.conv1_channels;
  const int64_t conv2_size =
      rows * pool1_.out_height * pool1_.out_width * options_.conv2_channels;
  const int64_t pool1_size = rows * pool1_.output_count();
  const int64_t pool2_size = rows * pool2_.output_count();
  ASSIGN_OR_RETURN(conv1_out_, device.Allocate<float>(conv1_size));
  ASSIGN_OR_RETURN(pool1_out_, device.Allocate<float>(pool1_size));
  ASSIGN_OR_RETURN(pool1_where_, device.Allocate<int32_t>(pool1_size));
  ASSIGN_OR_RETURN(conv2_out_, device.Allocate<float>(conv2_size));
  ASSIGN_OR_RETURN(pool2_out_, device.Allocate<float>(pool2_size));
  ASSIGN_OR_RETURN(pool2_where_, device.Allocate<int32_t>(pool2_size));
  ASSIGN_OR_RETURN(hidden_, device.Allocate<float>(rows * options_.hidden));
  const int64_t largest = std::max(
      {conv1_size, conv2_size, rows * options_.hidden, rows * in.num_classes});
  for (float*& delta : delta_) {
    ASSIGN_OR_RETURN(delta, device.Allocate<float>(largest));
  }
  conv1_.Bind(device, param(kConv1Weight), grad(kConv1Weight),
              param(kConv1Bias), grad(kConv1Bias));
  conv2_.Bind(device, param(kConv2Weight), grad(kConv2Weight),
              param(kConv2Bias), grad(kConv2Bias));
  RETURN_IF_ERROR(conv1_.Prepare(Conv1Geometry(static_cast<int>(rows))));
  RETURN_IF_ERROR(conv2_.Prepare(Conv2Geometry(static_cast<int>(rows))));
  // On the im2col path: the whole batch's column matrix of the larger
  // convolution, up to kMaxColumnFloats (larger batches are convolved in
  // pieces, conv2d.h).
  int64_t per_image = 0;
  if (conv1_.uses_columns()) {
    per_image = conv1_.ColumnsPerImage(in.height, in.width);
  }
  if (conv2_.uses_columns()) {
    per_image = std::max(
        per_image, conv2_.ColumnsPerImage(pool1_.out_height, pool1_.out_width));
  }
  if (per_image > 0) {
    columns_capacity_ =
        std::max(per_image, std::min(rows * per_image, kMaxColumnFloats));
    ASSIGN_OR_RETURN(columns_, device.Allocate<float>(columns_capacity_));
    conv1_.BindColumns(columns_, columns_capacity_);
    conv2_.BindColumns(columns_, columns_capacity_);
  }
  return absl::OkStatus();
}

void Cnn::InitParams(uint64_t seed, const ParamLayout& layout,
                     float* host_params) const {
  GS_CHECK(layout.params().size() == kCnnParams)
      << name() << ": InitParams with a layout of " << layout.params().size()
      << " parameters";
  // PyTorch's defaults for Conv2d and Linear: U(-1/sqrt(fan_in),
  // 1/sqrt(fan_in)) for weight and bias alike.
  const ImageInput& in = options_.input;
  const int fan_in[kCnnParams] = {in.channels * 9,
                                  in.channels * 9,
                                  options_.conv1_channels * 9,
                                  options_.conv1_channels * 9,
                                  features_,
                                  features_,
                                  options_.hidden,
                                  options_.hidden};
  for (int i = 0; i < kCnnParams; ++i) {
    const ParamInfo& info = layout.params()[i];
    std::mt19937_64 generator = ParamGenerator(seed, i);
    FillUniform(generator, 1.0f / std::sqrt(static_cast<float>(fan_in[i])),
                host_params + info.offset, info.numel);
  }
}

void Cnn::RunForward(const float* inputs, int images, bool /*training*/) {
  Device& d = device();
  const ConvGeometry g1 = Conv1Geometry(images);
  if (!NeedParams(kConv1Weight, kConv1Bias + 1)) return;
  conv1_.Forward(inputs, g1, conv1_out_);
  d.ReluForward(conv1_out_, g1.column_rows() * options_.conv1_channels);
  const PoolGeometry p1 = Pool(pool1_, images);
  pool_.Forward(d, conv1_out_, p1, pool1_out_, pool1_where_);
  const ConvGeometry g2 = Conv2Geometry(images);
  if (!NeedParams(kConv2Weight, kConv2Bias + 1)) return;
  conv2_.Forward(pool1_out_, g2, conv2_out_);
  d.ReluForward(conv2_out_, g2.column_rows() * options_.conv2_channels);
  const PoolGeometry p2 = Pool(pool2_, images);
  pool_.Forward(d, conv2_out_, p2, pool2_out_, pool2_where_);
  if (!NeedParams(kFc1Weight, kFc1Bias + 1)) return;
  d.Gemm(false, true, images, options_.hidden, features_, 1.0f, pool2_out_,
         param(kFc1Weight), 0.0f, hidden_);
  d.AddRowBias(hidden_, param(kFc1Bias), images, options_.hidden);
  d.ReluForward(hidden_, int64_t{images} * options_.hidden);
  const int classes = options_.input.num_classes;
  if (!NeedParams(kFc2Weight, kFc2Bias + 1)) return;
  d.Gemm(false, true, images, classes, options_.hidden, 1.0f, hidden_,
         param(kFc2Weight), 0.0f, logits());
  d.AddRowBias(logits(), param(kFc2Bias), images, classes);
}

void Cnn::RunBackward(const float* inputs, const int32_t* labels, int batch,
                      float* device_loss, const GradReadyCallback& report) {
  Device& d = device();
  const int classes = options_.input.num_classes;
  const int hidden = options_.hidden;
  float* dlogits = delta_[0];
  d.SoftmaxCrossEntropy(logits(), labels, batch, classes, dlogits, device_loss);

  // fc2, then fc1.
  d.SumRows(dlogits, grad(kFc2Bias), batch, classes);
  report(kFc2Bias);
  d.Gemm(true, false, classes, hidden, batch, 1.0f, dlogits, hidden_, 0.0f,
         grad(kFc2Weight));
  report(kFc2Weight);
  float* dhidden = delta_[1];
  d.Gemm(false, false, batch, hidden, classes, 1.0f, dlogits, param(kFc2Weight),
         0.0f, dhidden);
  d.ReluBackward(hidden_, dhidden, int64_t{batch} * hidden);
  d.SumRows(dhidden, grad(kFc1Bias), batch, hidden);
  report(kFc1Bias);
  d.Gemm(true, false, hidden, features_, batch, 1.0f, dhidden, pool2_out_, 0.0f,
         grad(kFc1Weight));
  report(kFc1Weight);
  float* dfeatures = delta_[0];
  d.Gemm(false, false, batch, features_, hidden, 1.0f, dhidden,
         param(kFc1Weight), 0.0f, dfeatures);

  // Pool 2, conv2.
  float* dconv2 = delta_[1];
  pool_.Backward(d, dfeatures, pool2_where_, Pool(pool2_, batch), dconv2);
  const ConvGeometry g2 = Conv2Geometry(batch);
  d.ReluBackward(conv2_out_, dconv2,
                 g2.column_rows() * options_.conv2_channels);
  conv2_.BackwardWeights(pool1_out_, g2, dconv2);
  report(kConv2Bias);
  report(kConv2Weight);
  float* dpool1 = delta_[0];
  conv2_.BackwardInput(g2, dconv2, dpool1);

  // Pool 1, conv1 (its input gradient is not needed).
  float* dconv1 = delta_[1];
  pool_.Backward(d, dpool1, pool1_where_, Pool(pool1_, batch), dconv1);
  const ConvGeometry g1 = Conv1Geometry(batch);
  d.ReluBackward(conv1_out_, dconv1,
                 g1.column_rows() * options_.conv1_channels);
  conv1_.BackwardWeights(inputs, g1, dconv1);
  report(kConv1Bias);
  report(kConv1Weight);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateCnn(const CnnOptions& options) {
  const ImageInput& in = options.input;
  if (in.channels < 1 || in.height < 4 || in.width < 4 || in.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=cnn takes images of at least 4x4 pixels with a channel and a "
        "class; the data set gives ",
        in.channels, "x", in.height, "x", in.width, " with ", in.num_classes,
        " classes (an image data set sets channels, height and width)"));
  }
  if (options.conv1_channels < 1 || options.conv2_channels < 1 ||
      options.hidden < 1 || options.max_rows_in_memory < 1) {
    return absl::InvalidArgumentError(
        "cnn: channel counts, hidden width and max rows must be >= 1");
  }
  return std::unique_ptr<Model>(std::make_unique<Cnn>(options));
}

}  // namespace gradsync
