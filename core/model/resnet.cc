// ResNet-18 in the form used for CIFAR-10 (--model=resnet18), on the Device
// interface: a 3×3 stride-1 stem (no 7×7 convolution, no initial max-pool,
// since 32×32 images have few pixels to spare), four stages of BasicBlocks
// ([2,2,2,2] over widths [64,128,256,512], the first block of stages 2-4
// halving the resolution with stride 2 and a 1×1 convolution + batch norm on
// the shortcut), global average pooling and a fully connected classifier.
// Convolutions have no bias (batch norm follows each). For 10 classes:
// 62 tensors, 11,173,962 parameters.
//
// Parameters are named and ordered as torchvision's resnet18 lists them in
// named_parameters() (conv1, bn1, layer1.0.conv1, layer1.0.bn1, ...,
// layer2.0.downsample.0/.1, ..., fc), so the buckets follow DDP's (reverse
// order). Backward hands every gradient to `ready` as soon as it is final,
// classifier first, stage 4 before stage 3 and so on: buckets of the late
// layers are on the wire while the early layers' backward still runs.
//
// Activations are NHWC (core/device/layer_geometry.h), or NCHW where the
// device asks for them (Device::activation_layout: CUDA's
// --cudnn_layout=nchw): then every convolution reads and writes NCHW, batch
// norm and pooling work over NCHW, and the element-wise kernels (the
// residual sums, ReLUs) are the same. The stem reads the data set's CHW
// rows in place.
//
// Under --precision=bf16, with NHWC activations, where the device's
// convolutions take bf16 operands
// (ConvolutionKernel::AcceptsBf16Operands), every convolution but the stem's
// reads and writes bf16 where its neighbours can: it writes its output and
// its input gradient in bf16 only, which the batch norm after it and the
// kernels before it read (batch norm's x and dy, the residual sum's
// gradients); that batch norm's epilogue leaves its output's bf16 rounding
// beside the float32 one where a convolution reads it next; and its backward
// writes its input gradient, the convolution's dy, in bf16 only. The values
// are the bits of the path where each convolution rounds its own operands
// and widens its results into float32 (every bf16 value widens exactly), in
// fewer passes over memory. The stem's convolution, whose input is the data
// set's CHW rows, rounds its own.
//
// A BasicBlock, with x its input:
//   out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
//   shortcut = x, or bn(conv1×1 stride s (x)) where the shape changes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/model/batch_norm.h"
#include "core/model/bounded_memory_model.h"
#include "core/model/conv2d.h"
#include "core/model/model.h"
#include "core/model/param_init.h"
#include "core/model/pooling.h"

namespace gradsync {
namespace {

// The column scratch's cap (64 MiB): batches whose column matrix is larger
// are convolved in pieces of whole images (conv2d.h).
constexpr int64_t kMaxColumnFloats = int64_t{1} << 24;

// A convolution and the parameter index of its weight.
struct ConvLayer {
  Conv2d conv;
  int weight = -1;
};

// A batch norm and the parameter indices of its weight (γ) and bias (β).
struct NormLayer {
  BatchNorm norm;
  int weight = -1;
  int bias = -1;
};

struct Block {
  int in_channels = 0, out_channels = 0;
  int in_height = 0, in_width = 0, out_height = 0, out_width = 0;
  std::unique_ptr<ConvLayer> conv1, conv2, down_conv;
  std::unique_ptr<NormLayer> bn1, bn2, down_bn;
  // Activations, [rows·out_height·out_width × out_channels] each.
  float* conv1_out = nullptr;  // bn1's input
  float* act1 = nullptr;       // relu(bn1(...)), conv2's input
  float* conv2_out = nullptr;  // bn2's input
  float* out = nullptr;        // the block's output, after the last ReLU
  float* down_out = nullptr;   // the shortcut convolution's output, bn's input
  // bf16 operands (see the file comment), null where the model makes none:
  // the convolutions' outputs in bf16 only (then the float32 ones above are
  // null), act1's rounding, and out's where a next block's convolutions
  // read it.
  uint16_t* conv1_out_bf16 = nullptr;
  uint16_t* conv2_out_bf16 = nullptr;
  uint16_t* down_out_bf16 = nullptr;
  uint16_t* act1_bf16 = nullptr;
  uint16_t* out_bf16 = nullptr;
};

class ResNet : public BoundedMemoryModel {
 public:
  explicit ResNet(const ResNetOptions& options);

  std::string name() const override { return name_; }
  std::vector<ParamSpec> ParamSpecs() const override { return specs_; }
  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override;

  int64_t buffer_count() const override { return buffer_count_; }
  float* buffers() override { return buffers_; }

 private:
  std::unique_ptr<ConvLayer> AddConv(const std::string& name,
                                     Conv2dShape shape);
  std::unique_ptr<NormLayer> AddNorm(const std::string& name, int channels);
  template <typename Visit>
  void ForEachNorm(Visit visit);
  template <typename Visit>
  void ForEachConv(Visit visit);

  absl::Status BindLayers(Device& device) override;
  void RunForward(const float* inputs, int images, bool training) override;
  bool AsksForParamsPerLayer() const override { return true; }
  // NeedParams for one layer's parameters.
  bool Need(const ConvLayer& layer) {
    return NeedParams(layer.weight, layer.weight + 1);
  }
  bool Need(const NormLayer& layer) {
    return NeedParams(std::min(layer.weight, layer.bias),
                      std::max(layer.weight, layer.bias) + 1);
  }
  void RunBackward(const float* inputs, const int32_t* labels, int batch,
                   float* device_loss, const GradReadyCallback& ready) override;
  // `plane`: Plane() of the normalised activations' height and width.
  void Normalize(NormLayer& layer, const InputTensor& x, int64_t rows,
                 int64_t plane, float* y, bool training,
                 const BatchNormEpilogue& epilogue) {
    if (training) {
      layer.norm.ForwardTraining(x, rows, y, epilogue, plane);
    } else {
      layer.norm.ForwardInference(x, rows, y, epilogue, plane);
    }
  }
  // The layout of activations of `channels` × height × width, as kept.
  ImageLayout Activations(int channels, int height, int width) const {
    return LayoutOf(layout_, channels, height, width);
  }
  // Batch norm's `plane` for activations of height × width (batch_norm.h).
  int64_t Plane(int height, int width) const {
    return layout_ == ActivationLayout::kNchw ? int64_t{height} * width : 1;
  }
  // `conv`'s geometry on `images` inputs of height × width laid out as
  // `input`, its output in the kept layout.
  ConvGeometry Geometry(const ConvLayer& conv, int images, int height,
                        int width, const ImageLayout& input) const {
    return conv.conv.Geometry(images, height, width, input, layout_);
  }
  ConvGeometry StemGeometry(int images) const {
    const ImageInput& in = options_.input;
    return Geometry(*stem_conv_, images, in.height, in.width,
                    NchwLayout(in.channels, in.height, in.width));
  }

  const ResNetOptions options_;
  std::string name_;
  std::vector<ParamSpec> specs_;
  // Kaiming-normal std of each convolution weight, by parameter index (0 for
  // the others).
  std::vector<float> conv_std_;
  std::unique_ptr<ConvLayer> stem_conv_;
  std::unique_ptr<NormLayer> stem_bn_;
  std::vector<Block> blocks_;
  int fc_weight_ = -1, fc_bias_ = -1;
  int features_ = 0;  // the last stage's width
  int64_t buffer_count_ = 0;

  // The activations' layout: the device's (set at BindLayers).
  ActivationLayout layout_ = ActivationLayout::kNhwc;
  float* buffers_ = nullptr;
  float* stem_conv_out_ = nullptr;
  float* stem_out_ = nullptr;
  float* pooled_ = nullptr;  // [rows × features]
  float* dlogits_ = nullptr;
  float* dpooled_ = nullptr;
  float* delta_[2] = {nullptr, nullptr};    // the gradient between blocks
  float* scratch_[2] = {nullptr, nullptr};  // within a block
  float* columns_ = nullptr;
  // bf16 operands (see the file comment), where the convolutions take them:
  // the stem's output rounded, one convolution's output gradient at a time,
  // and the convolutions' input gradients (two alive at a time: conv1's
  // until the residual sum, conv2's or the shortcut's).
  bool bf16_operands_ = false;
  uint16_t* stem_out_bf16_ = nullptr;
  uint16_t* grad_bf16_ = nullptr;
  uint16_t* dx_bf16_[2] = {nullptr, nullptr};
};

std::unique_ptr<ConvLayer> ResNet::AddConv(const std::string& name,
                                           Conv2dShape shape) {
  auto layer = std::make_unique<ConvLayer>(ConvLayer{Conv2d(name, shape)});
  layer->weight = static_cast<int>(specs_.size());
  specs_.push_back(layer->conv.ParamSpecs()[0]);
  // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu").
  conv_std_.push_back(
      std::sqrt(2.0f / static_cast<float>(shape.out_channels * shape.kernel *
                                          shape.kernel)));
  return layer;
}

std::unique_ptr<NormLayer> ResNet::AddNorm(const std::string& name,
                                           int channels) {
  auto layer =
      std::make_unique<NormLayer>(NormLayer{BatchNorm(name, channels)});
  layer->weight = static_cast<int>(specs_.size());
  layer->bias = layer->weight + 1;
  for (const ParamSpec& spec : layer->norm.ParamSpecs()) {
    specs_.push_back(spec);
    conv_std_.push_back(0.0f);
  }
  buffer_count_ += layer->norm.buffer_count();
  return layer;
}

ResNet::ResNet(const ResNetOptions& options)
    : BoundedMemoryModel(options.input, options.max_rows_in_memory),
      options_(options) {
  const ImageInput& in = options.input;
  const int stem_width = options.widths[0];
  stem_conv_ = AddConv("conv1", {in.channels, stem_width, 3, 1, 1, false});
  stem_bn_ = AddNorm("bn1", stem_width);
  int channels = stem_width, height = in.height, width = in.width;
  for (size_t stage = 0; stage < options.blocks.size(); ++stage) {
    for (int index = 0; index < options.blocks[stage]; ++index) {
      const std::string prefix = absl::StrCat("layer", stage + 1, ".", index);
      const int stride = stage > 0 && index == 0 ? 2 : 1;
      Block block;
      block.in_channels = channels;
      block.out_channels = options.widths[stage];
      block.in_height = height;
      block.in_width = width;
      block.out_height = ConvOutputSize(height, 3, stride, 1);
      block.out_width = ConvOutputSize(width, 3, stride, 1);
      block.conv1 =
          AddConv(absl::StrCat(prefix, ".conv1"),
                  {channels, block.out_channels, 3, stride, 1, false});
      block.bn1 = AddNorm(absl::StrCat(prefix, ".bn1"), block.out_channels);
      block.conv2 =
          AddConv(absl::StrCat(prefix, ".conv2"),
                  {block.out_channels, block.out_channels, 3, 1, 1, false});
      block.bn2 = AddNorm(absl::StrCat(prefix, ".bn2"), block.out_channels);
      if (stride != 1 || channels != block.out_channels) {
        block.down_conv =
            AddConv(absl::StrCat(prefix, ".downsample.0"),
                    {channels, block.out_channels, 1, stride, 0, false});
        block.down_bn =
            AddNorm(absl::StrCat(prefix, ".downsample.1"), block.out_channels);
      }
      channels = block.out_channels;
      height = block.out_height;
      width = block.out_width;
      blocks_.push_back(std::move(block));
    }
  }
  features_ = channels;
  fc_weight_ = static_cast<int>(specs_.size());
  specs_.push_back({"fc.weight", {in.num_classes, channels}});
  fc_bias_ = fc_weight_ + 1;
  specs_.push_back({"fc.bias", {in.num_classes}});
  conv_std_.push_back(0.0f);
  conv_std_.push_back(0.0f);
  const bool resnet18 = options.blocks == std::vector<int>{2, 2, 2, 2} &&
                        options.widths == std::vector<int>{64, 128, 256, 512};
  name_ = resnet18 ? "resnet18"
                   : absl::StrCat("resnet-", absl::StrJoin(options.blocks, "."),
                                  "-", absl::StrJoin(options.widths, "."));
  absl::StrAppend(&name_, "-", in.channels, "x", in.height, "x", in.width, "-",
                  in.num_classes);
}

template <typename Visit>
void ResNet::ForEachNorm(Visit visit) {
  visit(*stem_bn_);
  for (Block& block : blocks_) {
    visit(*block.bn1);
    visit(*block.bn2);
    if (block.down_bn) visit(*block.down_bn);
  }
}

template <typename Visit>
void ResNet::ForEachConv(Visit visit) {
  const ImageInput& in = options_.input;
  visit(*stem_conv_, in.height, in.width,
        NchwLayout(in.channels, in.height, in.width));
  for (Block& block : blocks_) {
    const ImageLayout block_input =
        Activations(block.in_channels, block.in_height, block.in_width);
    visit(*block.conv1, block.in_height, block.in_width, block_input);
    visit(*block.conv2, block.out_height, block.out_width,
          Activations(block.out_channels, block.out_height, block.out_width));
    if (block.down_conv) {
      visit(*block.down_conv, block.in_height, block.in_width, block_input);
    }
  }
}

absl::Status ResNet::BindLayers(Device& device) {
  const int64_t rows = rows_in_memory();
  const ImageInput& in = options_.input;
  const int stem_width = options_.widths[0];

  // The convolutions, each prepared for the bound batch; on the im2col path
  // they share one column scratch. bf16 operands (see the file comment):
  // where every convolution but the stem's takes them, with NHWC
  // activations (the bf16 copies are NHWC, as the convolutions read them).
  layout_ = device.activation_layout();
  absl::Status prepared;
  int64_t per_image = 0;
  bf16_operands_ = layout_ == ActivationLayout::kNhwc;
  ForEachConv(
      [&](ConvLayer& layer, int height, int width, const ImageLayout& input) {
        layer.conv.Bind(device, param(layer.weight), grad(layer.weight),
                        nullptr, nullptr);
        if (!prepared.ok()) return;
        const ConvGeometry g =
            Geometry(layer, static_cast<int>(rows), height, width, input);
        prepared = layer.conv.Prepare(g);
        if (!prepared.ok()) return;
        if (&layer != stem_conv_.get()) {
          bf16_operands_ = bf16_operands_ && layer.conv.AcceptsBf16Operands(g);
        }
        if (layer.conv.uses_columns()) {
          per_image =
              std::max(per_image, layer.conv.ColumnsPerImage(height, width));
        }
      });
  RETURN_IF_ERROR(prepared);

  // Activations; with bf16 operands the blocks' convolution outputs are bf16
  // only, and the inputs of convolutions have bf16 copies.
  const int64_t stem_size = rows * in.height * in.width * stem_width;
  int64_t largest = stem_size;
  ASSIGN_OR_RETURN(stem_conv_out_, device.Allocate<float>(stem_size));
  ASSIGN_OR_RETURN(stem_out_, device.Allocate<float>(stem_size));
  if (bf16_operands_) {
    ASSIGN_OR_RETURN(stem_out_bf16_, device.Allocate<uint16_t>(stem_size));
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    Block& block = blocks_[b];
    const int64_t size =
        rows * block.out_height * block.out_width * block.out_channels;
    largest =
        std::max({largest, size,
                  rows * block.in_height * block.in_width * block.in_channels});
    ASSIGN_OR_RETURN(block.act1, device.Allocate<float>(size));
    ASSIGN_OR_RETURN(block.out, device.Allocate<float>(size));
    if (bf16_operands_) {
      ASSIGN_OR_RETURN(block.conv1_out_bf16, device.Allocate<uint16_t>(size));
      ASSIGN_OR_RETURN(block.conv2_out_bf16, device.Allocate<uint16_t>(size));
      ASSIGN_OR_RETURN(block.act1_bf16, device.Allocate<uint16_t>(size));
      if (b + 1 < blocks_.size()) {
        ASSIGN_OR_RETURN(block.out_bf16, device.Allocate<uint16_t>(size));
      }
      if (block.down_conv) {
        ASSIGN_OR_RETURN(block.down_out_bf16, device.Allocate<uint16_t>(size));
      }
    } else {
      ASSIGN_OR_RETURN(block.conv1_out, device.Allocate<float>(size));
      ASSIGN_OR_RETURN(block.conv2_out, device.Allocate<float>(size));
      if (block.down_conv) {
        ASSIGN_OR_RETURN(block.down_out, device.Allocate<float>(size));
      }
    }
  }
  ASSIGN_OR_RETURN(pooled_, device.Allocate<float>(rows * features_));
  ASSIGN_OR_RETURN(dpooled_, device.Allocate<float>(rows * features_));
  ASSIGN_OR_RETURN(dlogits_, device.Allocate<float>(rows * in.num_classes));
  for (float** buffer : {&delta_[0], &delta_[1], &scratch_[0], &scratch_[1]}) {
    ASSIGN_OR_RETURN(*buffer, device.Allocate<float>(largest));
  }
  if (bf16_operands_) {
    for (uint16_t** buffer : {&grad_bf16_, &dx_bf16_[0], &dx_bf16_[1]}) {
      ASSIGN_OR_RETURN(*buffer, device.Allocate<uint16_t>(largest));
    }
  }
  if (per_image > 0) {
    const int64_t capacity =
        std::max(per_image, std::min(rows * per_image, kMaxColumnFloats));
    ASSIGN_OR_RETURN(columns_, device.Allocate<float>(capacity));
    ForEachConv([&](ConvLayer& layer, int, int, const ImageLayout&) {
      layer.conv.BindColumns(columns_, capacity);
    });
  }

  // Running statistics (the buffers), and each norm's saved batch statistics.
  ASSIGN_OR_RETURN(buffers_, device.Allocate<float>(buffer_count_));
  ASSIGN_OR_RETURN(float* saved, device.Allocate<float>(buffer_count_));
  int64_t offset = 0;
  ForEachNorm([&](NormLayer& layer) {
    layer.norm.Bind(device, param(layer.weight), param(layer.bias),
                    grad(layer.weight), grad(layer.bias), buffers_ + offset,
                    saved + offset);
    offset += layer.norm.buffer_count();
  });
  return absl::OkStatus();
}

void ResNet::InitParams(uint64_t seed, const ParamLayout& layout,
                        float* host_params) const {
  GS_CHECK(layout.params().size() == specs_.size())
      << name() << ": InitParams with a layout of " << layout.params().size()
      << " parameters";
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamInfo& info = layout.params()[i];
    float* out = host_params + info.offset;
    const int index = static_cast<int>(i);
    std::mt19937_64 generator = ParamGenerator(seed, index);
    if (index == fc_weight_ || index == fc_bias_) {
      // PyTorch's nn.Linear default.
      FillUniform(generator, 1.0f / std::sqrt(static_cast<float>(features_)),
                  out, info.numel);
    } else if (conv_std_[i] > 0.0f) {
      FillNormal(generator, conv_std_[i], out, info.numel);
    } else {
      // Batch norm: γ = 1, β = 0 (the weight precedes the bias).
      const bool is_weight =
          info.spec.name.size() >= 7 &&
          info.spec.name.compare(info.spec.name.size() - 7, 7, ".weight") == 0;
      FillConstant(is_weight ? 1.0f : 0.0f, out, info.numel);
    }
  }
}

void ResNet::RunForward(const float* inputs, int images, bool training) {
  Device& d = device();
  const ConvGeometry stem = StemGeometry(images);
  if (!Need(*stem_conv_)) return;
  stem_conv_->conv.Forward(inputs, stem, stem_conv_out_);
  if (!Need(*stem_bn_)) return;
  // With bf16 operands, each batch norm a convolution reads leaves its
  // output's bf16 copy too (the file comment); the copies' buffers are null
  // elsewhere, and an epilogue with a null copy makes none.
  Normalize(*stem_bn_, stem_conv_out_, stem.column_rows(),
            Plane(stem.out_height, stem.out_width), stem_out_, training,
            BatchNormEpilogue::Relu().WithBf16Copy(stem_out_bf16_));
  const float* x = stem_out_;
  const uint16_t* x_bf16 = stem_out_bf16_;
  // conv.Forward into `out`; with bf16 operands from x's bf16 copy into
  // `out_bf16`. Returns the output as the batch norm after it reads it.
  auto convolve = [&](Conv2d& conv, const float* in, const uint16_t* in_bf16,
                      const ConvGeometry& g, float* out,
                      uint16_t* out_bf16) -> InputTensor {
    if (bf16_operands_) {
      conv.ForwardFromBf16(in_bf16, g, out_bf16);
      return InputTensor::Bf16(out_bf16);
    }
    conv.Forward(in, g, out);
    return out;
  };
  for (Block& block : blocks_) {
    const ConvGeometry g1 = Geometry(
        *block.conv1, images, block.in_height, block.in_width,
        Activations(block.in_channels, block.in_height, block.in_width));
    const int64_t rows = g1.column_rows();
    const int64_t plane = Plane(block.out_height, block.out_width);
    if (!Need(*block.conv1)) return;
    const InputTensor conv1_out =
        convolve(block.conv1->conv, x, x_bf16, g1, block.conv1_out,
                 block.conv1_out_bf16);
    if (!Need(*block.bn1)) return;
    Normalize(*block.bn1, conv1_out, rows, plane, block.act1, training,
              BatchNormEpilogue::Relu().WithBf16Copy(block.act1_bf16));
    const ConvGeometry g2 = Geometry(
        *block.conv2, images, block.out_height, block.out_width,
        Activations(block.out_channels, block.out_height, block.out_width));
    if (!Need(*block.conv2)) return;
    const InputTensor conv2_out =
        convolve(block.conv2->conv, block.act1, block.act1_bf16, g2,
                 block.conv2_out, block.conv2_out_bf16);
    // The tail, out = relu(bn2(conv2_out) + shortcut), is bn2's epilogue: one
    // pass writes `out`. The shortcut's own batch norm, where it has one,
    // runs first; bn2's parameters are asked for before the shortcut's, in
    // the order the model lists them (the order forward waits for buckets).
    if (!Need(*block.bn2)) return;
    const float* shortcut = x;
    if (block.down_conv) {
      const ConvGeometry gd = Geometry(
          *block.down_conv, images, block.in_height, block.in_width, g1.input);
      if (!Need(*block.down_conv)) return;
      const InputTensor down_out =
          convolve(block.down_conv->conv, x, x_bf16, gd, block.down_out,
                   block.down_out_bf16);
      if (!Need(*block.down_bn)) return;
      Normalize(*block.down_bn, down_out, rows, plane, scratch_[0], training,
                BatchNormEpilogue::None());
      shortcut = scratch_[0];
    }
    // The last block's output goes to the pooling: no copy (out_bf16 null).
    Normalize(
        *block.bn2, conv2_out, rows, plane, block.out, training,
        BatchNormEpilogue::AddThenRelu(shortcut).WithBf16Copy(block.out_bf16));
    x = block.out;
    x_bf16 = block.out_bf16;
  }
  const Block& last = blocks_.back();
  const int pixels = last.out_height * last.out_width;
  GlobalAvgPoolForward(d, x, images, pixels, features_, pooled_, layout_);
  const int classes = options_.input.num_classes;
  if (!NeedParams(std::min(fc_weight_, fc_bias_),
                  std::max(fc_weight_, fc_bias_) + 1)) {
    return;
  }
  d.Gemm(false, true, images, classes, features_, 1.0f, pooled_,
         param(fc_weight_), 0.0f, logits());
  d.AddRowBias(logits(), param(fc_bias_), images, classes);
}

void ResNet::RunBackward(const float* inputs, const int32_t* labels, int batch,
                         float* device_loss, const GradReadyCallback& report) {
  auto report_norm = [&](const NormLayer& layer) {
    report(layer.bias);
    report(layer.weight);
  };
  Device& d = device();

  // Classifier and pooling.
  const int classes = options_.input.num_classes;
  d.SoftmaxCrossEntropy(logits(), labels, batch, classes, dlogits_,
                        device_loss);
  d.SumRows(dlogits_, grad(fc_bias_), batch, classes);
  report(fc_bias_);
  d.Gemm(true, false, classes, features_, batch, 1.0f, dlogits_, pooled_, 0.0f,
         grad(fc_weight_));
  report(fc_weight_);
  d.Gemm(false, false, batch, features_, classes, 1.0f, dlogits_,
         param(fc_weight_), 0.0f, dpooled_);
  const Block& last = blocks_.back();
  int current = 0;  // delta_[current]: the gradient of the block's output
  GlobalAvgPoolBackward(d, dpooled_, batch, last.out_height * last.out_width,
                        features_, delta_[current], layout_);

  // A batch norm's backward, then the convolution before it; returns the
  // convolution's input gradient. With bf16 operands the batch norm writes
  // its dx only in bf16 (grad_bf16_), which the convolution reads with its
  // input's bf16 copy, and the convolution writes its dx only in bf16
  // (dx_bf16), for the kernels after it to read (the file comment).
  auto norm_then_conv =
      [&](NormLayer& norm, const float* norm_x, const uint16_t* norm_x_bf16,
          const InputTensor& dy, int64_t rows, int64_t plane,
          const float* relu_output, float* dy_scratch, ConvLayer& conv,
          const float* x, const uint16_t* x_bf16, const ConvGeometry& g,
          float* dx, uint16_t* dx_bf16) -> InputTensor {
    auto weight_ready = [&] { report(conv.weight); };
    if (bf16_operands_) {
      norm.norm.Backward(InputTensor::Bf16(norm_x_bf16), dy, rows, nullptr,
                         relu_output, grad_bf16_, plane);
      report_norm(norm);
      conv.conv.BackwardFromBf16(x_bf16, g, grad_bf16_, dx_bf16, weight_ready);
      return InputTensor::Bf16(dx_bf16);
    }
    norm.norm.Backward(norm_x, dy, rows, dy_scratch, relu_output, nullptr,
                       plane);
    report_norm(norm);
    conv.conv.Backward(x, g, dy_scratch, dx, weight_ready);
    return dx;
  };
  for (int b = static_cast<int>(blocks_.size()) - 1; b >= 0; --b) {
    Block& block = blocks_[b];
    const float* x = b > 0 ? blocks_[b - 1].out : stem_out_;
    const uint16_t* x_bf16 = b > 0 ? blocks_[b - 1].out_bf16 : stem_out_bf16_;
    const ConvGeometry g1 = Geometry(
        *block.conv1, batch, block.in_height, block.in_width,
        Activations(block.in_channels, block.in_height, block.in_width));
    const ConvGeometry g2 = Geometry(
        *block.conv2, batch, block.out_height, block.out_width,
        Activations(block.out_channels, block.out_height, block.out_width));
    const int64_t rows = g1.column_rows();
    const int64_t plane = Plane(block.out_height, block.out_width);
    const int64_t size = rows * block.out_channels;
    // grad_out: the gradient of the block's last ReLU's input, the sum of
    // both branches, which each branch receives whole. The last block takes
    // it through that ReLU here; every other block receives it so from the
    // block after it (ReluBackwardOfSum below).
    float* grad_out = delta_[current];
    float* grad_in = delta_[1 - current];
    if (b + 1 == static_cast<int>(blocks_.size())) {
      d.ReluBackward(block.out, grad_out, size);
    }
    // act1's gradient; bn1 takes it through act1's ReLU.
    const InputTensor act1_grad = norm_then_conv(
        *block.bn2, block.conv2_out, block.conv2_out_bf16, grad_out, rows,
        plane, nullptr, scratch_[0], *block.conv2, block.act1, block.act1_bf16,
        g2, scratch_[1], dx_bf16_[0]);
    const InputTensor residual_grad =
        norm_then_conv(*block.bn1, block.conv1_out, block.conv1_out_bf16,
                       act1_grad, rows, plane, block.act1, scratch_[0],
                       *block.conv1, x, x_bf16, g1, grad_in, dx_bf16_[1]);
    const int64_t in_size =
        int64_t{batch} * block.in_height * block.in_width * block.in_channels;
    InputTensor shortcut_grad = grad_out;
    if (block.down_conv) {
      const ConvGeometry gd = Geometry(*block.down_conv, batch, block.in_height,
                                       block.in_width, g1.input);
      // After bn1 has read dx_bf16_[0] (act1_grad).
      shortcut_grad = norm_then_conv(*block.down_bn, block.down_out,
                                     block.down_out_bf16, grad_out, rows, plane,
                                     nullptr, scratch_[1], *block.down_conv, x,
                                     x_bf16, gd, scratch_[0], dx_bf16_[0]);
    }
    // x is a ReLU's output (the previous block's or the stem's): the two
    // branches' gradients meet there and go through that ReLU in one pass,
    // into grad_in (in place where the residual branch's gradient is there).
    d.ReluBackwardOfSum(x, shortcut_grad, residual_grad, grad_in, in_size);
    current = 1 - current;
  }

  // The stem; its input gradient is not needed.
  const ConvGeometry stem = StemGeometry(batch);
  const int64_t stem_rows = stem.column_rows();
  // Through the stem's ReLU already (the first block's ReluBackwardOfSum).
  float* grad = delta_[current];
  stem_bn_->norm.Backward(stem_conv_out_, grad, stem_rows, scratch_[0], nullptr,
                          nullptr, Plane(stem.out_height, stem.out_width));
  report_norm(*stem_bn_);
  stem_conv_->conv.BackwardWeights(inputs, stem, scratch_[0]);
  report(stem_conv_->weight);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateResNet(
    const ResNetOptions& options) {
  const ImageInput& in = options.input;
  if (in.channels < 1 || in.height < 1 || in.width < 1 || in.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=resnet18 takes images (channels x height x width, CIFAR-10's "
        "3x32x32); the data set gives ",
        in.channels, "x", in.height, "x", in.width, " with ", in.num_classes,
        " classes (an image data set sets channels, height and width)"));
  }
  if (options.blocks.empty() ||
      options.blocks.size() != options.widths.size()) {
    return absl::InvalidArgumentError(
        "resnet: blocks per stage and stage widths must be non-empty lists of "
        "the same length");
  }
  for (size_t i = 0; i < options.blocks.size(); ++i) {
    if (options.blocks[i] < 1 || options.widths[i] < 1) {
      return absl::InvalidArgumentError(
          "resnet: every stage needs at least one block and one channel");
    }
  }
  if (options.max_rows_in_memory < 1) {
    return absl::InvalidArgumentError("resnet: max rows must be >= 1");
  }
  return std::unique_ptr<Model>(std::make_unique<ResNet>(options));
}

}  // namespace gradsync
