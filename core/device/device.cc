// Device creation by type, and parsing of --device.
#include "core/device/device.h"

#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/device/cpu_device.h"

namespace gradsync {

#ifdef GRADSYNC_CUDA
// Defined by the CUDA backend (core/device/cuda_device.cc), which is compiled
// and linked only under --config=cuda; that build also defines GRADSYNC_CUDA
// for this file. Declared here rather than in a header so that the CPU-only
// build needs no CUDA file at all.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(
    const DeviceOptions& options);
#endif

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options) {
  switch (options.type) {
    case DeviceType::kCpu:
      if (options.precision == Precision::kTf32) {
        return absl::InvalidArgumentError(
            "--precision=tf32 is a CUDA setting (TF32 tensor cores); the CPU "
            "device has no TF32 arithmetic: pass --precision=fp32 (the "
            "default) or --precision=bf16");
      }
      if (options.cpu_threads < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("CPU thread count ", options.cpu_threads,
                         " must be >= 0 (0 = the BLAS library's default)"));
      }
      return std::unique_ptr<Device>(std::make_unique<CpuDevice>(
          options.cpu_threads, options.reference_convolutions,
          options.reference_batch_norm, options.precision,
          options.convolutions_round_own_operands, options.nchw_activations));
    case DeviceType::kCuda:
#ifdef GRADSYNC_CUDA
      if (options.gpu_index < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("GPU index ", options.gpu_index, " must be >= 0"));
      }
      return CreateCudaDevice(options);
#else
      return absl::UnimplementedError(
          "--device=cuda: this build has no CUDA; rebuild with --config=cuda");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device type ", static_cast<int>(options.type)));
}

absl::StatusOr<DeviceType> ParseDeviceType(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "cpu") return DeviceType::kCpu;
  if (lower == "cuda") return DeviceType::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --device=", name, "; choose cpu or cuda"));
}

absl::StatusOr<Precision> ParsePrecision(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "fp32") return Precision::kFp32;
  if (lower == "tf32") return Precision::kTf32;
  if (lower == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --precision=", name, "; choose fp32, tf32 or bf16"));
}

absl::StatusOr<ConvolutionLayout> ParseConvolutionLayout(
    const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "nhwc") return ConvolutionLayout::kNhwc;
  if (lower == "nchw") return ConvolutionLayout::kNchw;
  if (lower == "fastest") return ConvolutionLayout::kFastest;
  if (lower == "auto") return ConvolutionLayout::kAuto;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --cudnn_layout=", name, "; choose auto, nhwc, nchw or fastest"));
}

absl::StatusOr<std::optional<bool>> ParseCudnnGraph(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "auto") return std::optional<bool>();
  if (lower == "true") return std::optional<bool>(true);
  if (lower == "false") return std::optional<bool>(false);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --cudnn_graph=", name, "; choose auto, true or false"));
}

bool DefaultCudnnGraph(ConvolutionLayout layout, Precision precision) {
  switch (layout) {
    case ConvolutionLayout::kNhwc:
      return true;
    case ConvolutionLayout::kAuto:
      return precision != Precision::kFp32;
    case ConvolutionLayout::kNchw:
    case ConvolutionLayout::kFastest:
      return false;
  }
  return false;
}

bool CudnnGraphOf(const DeviceOptions& options) {
  return options.cudnn_graph.value_or(
      DefaultCudnnGraph(options.cudnn_layout, options.precision));
}

}  // namespace gradsync
