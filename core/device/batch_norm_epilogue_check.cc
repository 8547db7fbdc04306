#include "core/device/batch_norm_epilogue_check.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/base/status_macros.h"
#include "core/device/bfloat16.h"

namespace gradsync {
namespace {

// Host vectors to and from one device.
class Transfer {
 public:
  explicit Transfer(Device& device) : device_(device) {}

  absl::StatusOr<float*> Upload(const std::vector<float>& host) {
    ASSIGN_OR_RETURN(float* buffer, device_.Allocate<float>(
                                        static_cast<int64_t>(host.size())));
    RETURN_IF_ERROR(
        device_.CopyToDevice(buffer, host.data(), host.size() * sizeof(float)));
    return buffer;
  }
  // `host` rounded to bf16, on the device twice: as the bf16 bits and as
  // those bits widened to float32 (exact), the two forms of one tensor.
  struct Bf16Twins {
    float* widened;
    uint16_t* bits;
  };
  absl::StatusOr<Bf16Twins> UploadRounded(std::vector<float> host) {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      bits[i] = bfloat16::RoundToBits(host[i]);
      host[i] = bfloat16::FromBits(bits[i]);
    }
    Bf16Twins twins{};
    ASSIGN_OR_RETURN(twins.widened, Upload(host));
    ASSIGN_OR_RETURN(twins.bits, device_.Allocate<uint16_t>(
                                     static_cast<int64_t>(bits.size())));
    RETURN_IF_ERROR(device_.CopyToDevice(twins.bits, bits.data(),
                                         bits.size() * sizeof(uint16_t)));
    return twins;
  }
  absl::StatusOr<std::vector<float>> Download(const float* buffer,
                                              int64_t count) {
    std::vector<float> host(static_cast<size_t>(count));
    RETURN_IF_ERROR(
        device_.CopyToHost(host.data(), buffer, host.size() * sizeof(float)));
    return host;
  }

 private:
  Device& device_;
};

// Bit for bit: the fused pass computes the same float operations in the
// same order.
absl::Status ExpectSameBits(Device& device, const float* unfused,
                            const float* fused, int64_t count,
                            absl::string_view what) {
  Transfer transfer(device);
  ASSIGN_OR_RETURN(std::vector<float> a, transfer.Download(unfused, count));
  ASSIGN_OR_RETURN(std::vector<float> b, transfer.Download(fused, count));
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return absl::InternalError(
          absl::StrCat(device.name(), ": ", what, " differs at element ", i,
                       " of ", count, ": unfused ", a[i], ", fused ", b[i]));
    }
  }
  return absl::OkStatus();
}

// `bits` holds `values` rounded to bf16 (bfloat16.h), element for element:
// a batch norm's bf16 copy of what it wrote in float32.
absl::Status ExpectRoundedBits(Device& device, const float* values,
                               const uint16_t* bits, int64_t count,
                               absl::string_view what) {
  Transfer transfer(device);
  ASSIGN_OR_RETURN(std::vector<float> a, transfer.Download(values, count));
  std::vector<uint16_t> b(static_cast<size_t>(count));
  RETURN_IF_ERROR(
      device.CopyToHost(b.data(), bits, b.size() * sizeof(uint16_t)));
  for (int64_t i = 0; i < count; ++i) {
    if (bfloat16::RoundToBits(a[i]) != b[i]) {
      return absl::InternalError(
          absl::StrCat(device.name(), ": ", what, " at element ", i, " of ",
                       count, " is bf16 bits ", b[i], ", not ",
                       bfloat16::RoundToBits(a[i]), " (", a[i], " rounded)"));
    }
  }
  return absl::OkStatus();
}

// Channel c's values: N(0, 1)·(1 + c mod 3) + (c mod 5)/4 - 0.5, so that
// channels differ in offset and scale and a ReLU after the normalisation
// zeroes a share of every channel.
std::vector<float> ChannelValues(int64_t rows, int channels, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows * channels));
  for (int64_t i = 0; i < rows * channels; ++i) {
    const int c = static_cast<int>(i % channels);
    values[i] = normal(generator) * static_cast<float>(1 + c % 3) +
                0.25f * static_cast<float>(c % 5) - 0.5f;
  }
  return values;
}

std::vector<float> Uniform(int64_t count, float low, float high,
                           uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = uniform(generator);
  return values;
}

}  // namespace

absl::Status CheckBatchNormEpilogues(Device& device, int64_t rows,
                                     int channels) {
  if (rows < 2 || channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckBatchNormEpilogues needs rows >= 2 and channels "
                     ">= 1; got ",
                     rows, " x ", channels));
  }
  const int64_t n = rows * channels;
  constexpr float kMomentum = 0.1f, kEpsilon = 1e-5f;
  Transfer transfer(device);
  const std::vector<float> host_dy = ChannelValues(rows, channels, 12);
  ASSIGN_OR_RETURN(const float* x,
                   transfer.Upload(ChannelValues(rows, channels, 11)));
  ASSIGN_OR_RETURN(const float* residual,
                   transfer.Upload(ChannelValues(rows, channels, 13)));
  ASSIGN_OR_RETURN(const float* gamma,
                   transfer.Upload(Uniform(channels, 0.5f, 1.5f, 14)));
  ASSIGN_OR_RETURN(const float* beta,
                   transfer.Upload(Uniform(channels, -0.5f, 0.5f, 15)));
  std::vector<float> running_init(2 * static_cast<size_t>(channels), 0.0f);
  for (int c = 0; c < channels; ++c) running_init[channels + c] = 1.0f;

  // Per side (unfused, fused): y, saved statistics, running statistics,
  // inference output, dy, dx, dγ and dβ.
  struct Side {
    float* y;
    float* saved;
    float* running;
    float* inference;
    float* dy;
    float* dx;
    float* dparams;
  };
  auto make_side = [&]() -> absl::StatusOr<Side> {
    Side side{};
    ASSIGN_OR_RETURN(side.y, device.Allocate<float>(n));
    ASSIGN_OR_RETURN(side.saved, device.Allocate<float>(2 * channels));
    ASSIGN_OR_RETURN(side.running, transfer.Upload(running_init));
    ASSIGN_OR_RETURN(side.inference, device.Allocate<float>(n));
    ASSIGN_OR_RETURN(side.dy, transfer.Upload(host_dy));
    ASSIGN_OR_RETURN(side.dx, device.Allocate<float>(n));
    ASSIGN_OR_RETURN(side.dparams, device.Allocate<float>(2 * channels));
    return side;
  };

  const BatchNormEpilogue epilogues[] = {
      BatchNormEpilogue::Relu(), BatchNormEpilogue::AddThenRelu(residual),
      BatchNormEpilogue{residual, false}};
  const char* names[] = {"relu", "residual + relu", "residual"};
  // Each epilogue as it is, then also leaving bf16 copies: of the forward's
  // outputs, and of dx from the backward (instead of dx).
  ASSIGN_OR_RETURN(uint16_t * y_copy, device.Allocate<uint16_t>(n));
  ASSIGN_OR_RETURN(uint16_t * inference_copy, device.Allocate<uint16_t>(n));
  ASSIGN_OR_RETURN(uint16_t * dx_copy, device.Allocate<uint16_t>(n));
  for (int variant = 0; variant < 6; ++variant) {
    const bool copies = variant >= 3;
    const int e = variant % 3;
    const BatchNormEpilogue& epilogue = epilogues[e];
    ASSIGN_OR_RETURN(Side unfused, make_side());
    ASSIGN_OR_RETURN(Side fused, make_side());
    auto unfused_epilogue = [&](float* y) {
      if (epilogue.residual != nullptr) device.Add(y, epilogue.residual, n);
      if (epilogue.relu) device.ReluForward(y, n);
    };

    device.BatchNormForwardTraining(
        x, rows, channels, 1, gamma, beta, kMomentum, kEpsilon, unfused.y,
        unfused.saved, unfused.saved + channels, unfused.running,
        unfused.running + channels, BatchNormEpilogue::None());
    unfused_epilogue(unfused.y);
    device.BatchNormForwardTraining(
        x, rows, channels, 1, gamma, beta, kMomentum, kEpsilon, fused.y,
        fused.saved, fused.saved + channels, fused.running,
        fused.running + channels,
        copies ? epilogue.WithBf16Copy(y_copy) : epilogue);

    device.BatchNormForwardInference(
        x, rows, channels, 1, gamma, beta, unfused.running,
        unfused.running + channels, kEpsilon, unfused.inference,
        BatchNormEpilogue::None());
    unfused_epilogue(unfused.inference);
    device.BatchNormForwardInference(
        x, rows, channels, 1, gamma, beta, fused.running,
        fused.running + channels, kEpsilon, fused.inference,
        copies ? epilogue.WithBf16Copy(inference_copy) : epilogue);

    const std::string name =
        absl::StrCat(names[e], copies ? " (with bf16 copies)" : "");
    RETURN_IF_ERROR(device.Synchronize());
    RETURN_IF_ERROR(ExpectSameBits(device, unfused.y, fused.y, n,
                                   name + " training output"));
    RETURN_IF_ERROR(ExpectSameBits(device, unfused.saved, fused.saved,
                                   2 * channels, name + " saved statistics"));
    RETURN_IF_ERROR(ExpectSameBits(device, unfused.running, fused.running,
                                   2 * channels, name + " running statistics"));
    RETURN_IF_ERROR(ExpectSameBits(device, unfused.inference, fused.inference,
                                   n, name + " inference output"));
    if (copies) {
      RETURN_IF_ERROR(ExpectRoundedBits(device, unfused.y, y_copy, n,
                                        name + " training output's copy"));
      RETURN_IF_ERROR(ExpectRoundedBits(device, unfused.inference,
                                        inference_copy, n,
                                        name + " inference output's copy"));
    }
    if (!epilogue.relu) continue;

    // The backward through the ReLU: ReluBackward then the plain backward,
    // against the backward that masks dy as it reads it.
    device.ReluBackward(unfused.y, unfused.dy, n);
    device.BatchNormBackward(x, unfused.dy, rows, channels, 1, gamma,
                             unfused.saved, unfused.saved + channels,
                             unfused.dx, unfused.dparams,
                             unfused.dparams + channels, nullptr, nullptr);
    device.BatchNormBackward(
        x, fused.dy, rows, channels, 1, gamma, fused.saved,
        fused.saved + channels, copies ? nullptr : fused.dx, fused.dparams,
        fused.dparams + channels, fused.y, copies ? dx_copy : nullptr);
    RETURN_IF_ERROR(device.Synchronize());
    if (copies) {
      RETURN_IF_ERROR(ExpectRoundedBits(device, unfused.dx, dx_copy, n,
                                        name + " dx (bf16 only)"));
    } else {
      RETURN_IF_ERROR(
          ExpectSameBits(device, unfused.dx, fused.dx, n, name + " dx"));
    }
    RETURN_IF_ERROR(ExpectSameBits(device, unfused.dparams, fused.dparams,
                                   2 * channels, name + " dgamma, dbeta"));
    // dy is read, not written.
    ASSIGN_OR_RETURN(const float* original_dy, transfer.Upload(host_dy));
    RETURN_IF_ERROR(ExpectSameBits(device, original_dy, fused.dy, n,
                                   name + " dy (must be left as it was)"));
  }

  // x and dy given as bf16 bits (a convolution's bf16 output and input
  // gradient): every pass gives the bits it gives on those values widened
  // to float32.
  {
    ASSIGN_OR_RETURN(const Transfer::Bf16Twins x_twins,
                     transfer.UploadRounded(ChannelValues(rows, channels, 11)));
    ASSIGN_OR_RETURN(const Transfer::Bf16Twins dy_twins,
                     transfer.UploadRounded(host_dy));
    const InputTensor inputs[2] = {x_twins.widened,
                                   InputTensor::Bf16(x_twins.bits)};
    const InputTensor gradients[2] = {dy_twins.widened,
                                      InputTensor::Bf16(dy_twins.bits)};
    Side sides[2];
    for (int k = 0; k < 2; ++k) {
      ASSIGN_OR_RETURN(sides[k], make_side());
      Side& side = sides[k];
      device.BatchNormForwardTraining(
          inputs[k], rows, channels, 1, gamma, beta, kMomentum, kEpsilon,
          side.y, side.saved, side.saved + channels, side.running,
          side.running + channels, BatchNormEpilogue::AddThenRelu(residual));
      device.BatchNormForwardInference(
          inputs[k], rows, channels, 1, gamma, beta, side.running,
          side.running + channels, kEpsilon, side.inference,
          BatchNormEpilogue::Relu());
      device.BatchNormBackward(inputs[k], gradients[k], rows, channels, 1,
                               gamma, side.saved, side.saved + channels,
                               side.dx, side.dparams, side.dparams + channels,
                               side.y, nullptr);
    }
    RETURN_IF_ERROR(device.Synchronize());
    const Side& f = sides[0];
    const Side& b = sides[1];
    RETURN_IF_ERROR(ExpectSameBits(device, f.y, b.y, n, "bf16 x: output"));
    RETURN_IF_ERROR(ExpectSameBits(device, f.saved, b.saved, 2 * channels,
                                   "bf16 x: saved statistics"));
    RETURN_IF_ERROR(ExpectSameBits(device, f.running, b.running, 2 * channels,
                                   "bf16 x: running statistics"));
    RETURN_IF_ERROR(ExpectSameBits(device, f.inference, b.inference, n,
                                   "bf16 x: inference output"));
    RETURN_IF_ERROR(ExpectSameBits(device, f.dx, b.dx, n, "bf16 x: dx"));
    RETURN_IF_ERROR(ExpectSameBits(device, f.dparams, b.dparams, 2 * channels,
                                   "bf16 x: dgamma, dbeta"));
  }

  // Two gradients meeting at a ReLU's output, through that ReLU.
  ASSIGN_OR_RETURN(float* relu_output, device.Allocate<float>(n));
  device.CopyOnDevice(relu_output, x, n);
  device.ReluForward(relu_output, n);
  ASSIGN_OR_RETURN(float* unfused_sum, transfer.Upload(host_dy));
  ASSIGN_OR_RETURN(float* fused_sum, transfer.Upload(host_dy));
  device.Add(unfused_sum, residual, n);
  device.ReluBackward(relu_output, unfused_sum, n);
  device.ReluBackwardOfSum(relu_output, residual, fused_sum, fused_sum, n);
  RETURN_IF_ERROR(device.Synchronize());
  RETURN_IF_ERROR(
      ExpectSameBits(device, unfused_sum, fused_sum, n, "ReluBackwardOfSum"));

  // Its addends as bf16 bits (convolutions' input gradients), into another
  // buffer, against the same pass on the widened float32 values in place.
  ASSIGN_OR_RETURN(const Transfer::Bf16Twins a,
                   transfer.UploadRounded(ChannelValues(rows, channels, 16)));
  ASSIGN_OR_RETURN(const Transfer::Bf16Twins b,
                   transfer.UploadRounded(ChannelValues(rows, channels, 17)));
  ASSIGN_OR_RETURN(float* from_bits, device.Allocate<float>(n));
  device.ReluBackwardOfSum(relu_output, b.widened, a.widened, a.widened, n);
  device.ReluBackwardOfSum(relu_output, InputTensor::Bf16(b.bits),
                           InputTensor::Bf16(a.bits), from_bits, n);
  RETURN_IF_ERROR(device.Synchronize());
  return ExpectSameBits(device, a.widened, from_bits, n,
                        "ReluBackwardOfSum of bf16 gradients");
}

}  // namespace gradsync
