// Where a model's training step spends its device time, operation by
// operation: the model bound to a ProfilingDevice
// (core/device/profiling_device.h), a mark of the device's clock after every
// kernel or library call, the marks read after each step. Prints the time by
// category (convolution directions, batch norm, element-wise, ...) and the
// largest operations by kind and shape; --out writes every operation in
// queue order as JSON.
//
//   bazel run -c opt //bench:layer_profile -- --model=resnet18 --batch=32
//   bin/layer_profile --device=cuda --batch=128 --precision=bf16 --out=p.json
//     (the second from tools/bundle.sh's bundle, on a GPU node)
//
// A step is what the trainer's is without a strategy: forward, backward, one
// SGD update over every parameter, the loss copied to the host. Data are
// random (images in [-1, 1), labels cycling through the classes). Steps after
// --warmup are timed twice: --steps unmarked (the device's clock at the
// step's start and end only) and --steps profiled; the two medians say what
// the marks cost. On CUDA each operation's time is the GPU's from the
// previous mark, so it also holds any time the GPU waited for the host to
// queue it: where the profiled step's total is well above the unmarked
// step's, the marks slowed the host's launches until the GPU waited for them,
// and the operations' times overstate their kernels'. Beside each figure
// the host's time to queue it ("host ms", core/device/profiling_device.h):
// where the unmarked step is longer than the kernels' device time, these say
// which operations kept the GPU waiting for the host.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bench/layer_profile_table.h"
#include "bench/model_step_benchmark.h"
#include "core/base/files.h"
#include "core/base/status_macros.h"
#include "core/device/device.h"
#include "core/device/profiling_device.h"
#include "core/model/model.h"
#include "core/sync/param_layout.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "resnet18",
          "resnet18 (CIFAR-10's form), cnn (Fashion-MNIST's) or mlp");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(int, gpu, 0, "CUDA only: which GPU");
ABSL_FLAG(std::string, precision, "fp32", "fp32, tf32 (CUDA only) or bf16");
ABSL_FLAG(bool, bf16_operands, true,
          "--precision=bf16: let convolutions and batch norms pass bf16 "
          "tensors (the default); false: every convolution rounds its own "
          "inputs and widens its output, to measure what the default saves");
ABSL_FLAG(std::string, cudnn_graph, "auto",
          "CUDA: convolutions also try cuDNN's graph API: true, false or "
          "auto (the layout's and precision's default; DeviceOptions)");
ABSL_FLAG(std::string, cudnn_layout, "auto",
          "CUDA, fp32 and tf32: the layout cuDNN computes convolutions in: "
          "auto, nhwc, nchw or fastest (DeviceOptions)");
ABSL_FLAG(int, batch, 128, "images a step");
ABSL_FLAG(int, warmup, 5, "untimed steps first (cuDNN's searches, caches)");
ABSL_FLAG(int, steps, 10, "timed steps, unmarked and then profiled");
ABSL_FLAG(int, threads, 0, "CPU only: BLAS and oneDNN threads (0: default)");
ABSL_FLAG(int, max_ops, 4096, "operations a profiled step may queue");
ABSL_FLAG(int, top, 25, "operations printed (all of them go to --out)");
ABSL_FLAG(std::string, out, "", "also write the whole profile here (JSON)");

namespace gradsync {
namespace {

absl::StatusOr<std::unique_ptr<Model>> CreateNamedModel(
    const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "resnet18") return CreateResNet(ResNetOptions{});
  if (lower == "cnn") return CreateCnn(CnnOptions{});
  if (lower == "mlp") return CreateMlp(MlpOptions{});
  return absl::InvalidArgumentError(absl::StrCat(
      "--model=", name, ": layer_profile profiles resnet18, cnn or mlp"));
}

absl::Status CheckPositive(const char* flag, int value, int least) {
  if (value >= least) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": must be at least ", least));
}

absl::Status Run() {
  const int batch = absl::GetFlag(FLAGS_batch);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int steps = absl::GetFlag(FLAGS_steps);
  RETURN_IF_ERROR(CheckPositive("batch", batch, 1));
  RETURN_IF_ERROR(CheckPositive("warmup", warmup, 0));
  RETURN_IF_ERROR(CheckPositive("steps", steps, 1));
  RETURN_IF_ERROR(CheckPositive("max_ops", absl::GetFlag(FLAGS_max_ops), 1));
  RETURN_IF_ERROR(CheckPositive("threads", absl::GetFlag(FLAGS_threads), 0));

  DeviceOptions options;
  ASSIGN_OR_RETURN(options.type, ParseDeviceType(absl::GetFlag(FLAGS_device)));
  options.gpu_index = absl::GetFlag(FLAGS_gpu);
  options.cpu_threads = absl::GetFlag(FLAGS_threads);
  ASSIGN_OR_RETURN(options.precision,
                   ParsePrecision(absl::GetFlag(FLAGS_precision)));
  options.convolutions_round_own_operands = !absl::GetFlag(FLAGS_bf16_operands);
  ASSIGN_OR_RETURN(options.cudnn_graph,
                   ParseCudnnGraph(absl::GetFlag(FLAGS_cudnn_graph)));
  ASSIGN_OR_RETURN(options.cudnn_layout,
                   ParseConvolutionLayout(absl::GetFlag(FLAGS_cudnn_layout)));
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateDevice(options));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ProfilingDevice> profiled,
      ProfilingDevice::Create(*device, absl::GetFlag(FLAGS_max_ops)));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   CreateNamedModel(absl::GetFlag(FLAGS_model)));

  ASSIGN_OR_RETURN(ParamLayout layout,
                   ParamLayout::Create(model->ParamSpecs(), 25 << 20));
  const int64_t total = layout.total_numel();
  std::vector<float> host(total);
  model->InitParams(1, layout, host.data());
  ASSIGN_OR_RETURN(float* params, device->Allocate<float>(total));
  ASSIGN_OR_RETURN(float* grads, device->Allocate<float>(total));
  ASSIGN_OR_RETURN(float* velocity, device->Allocate<float>(total));
  RETURN_IF_ERROR(
      device->CopyToDevice(params, host.data(), total * sizeof(float)));
  RETURN_IF_ERROR(model->Bind(*profiled, layout, params, grads, batch));

  const SyntheticBatch data = MakeSyntheticBatch(*model, batch);
  const std::vector<float>& images = data.images;
  const std::vector<int32_t>& labels = data.labels;
  ASSIGN_OR_RETURN(float* inputs, device->Allocate<float>(images.size()));
  ASSIGN_OR_RETURN(int32_t * device_labels, device->Allocate<int32_t>(batch));
  ASSIGN_OR_RETURN(float* loss, device->Allocate<float>(1));
  RETURN_IF_ERROR(device->CopyToDevice(inputs, images.data(),
                                       images.size() * sizeof(float)));
  RETURN_IF_ERROR(device->CopyToDevice(device_labels, labels.data(),
                                       labels.size() * sizeof(int32_t)));

  float host_loss = 0;
  auto step = [&]() -> absl::Status {
    RETURN_IF_ERROR(
        model->ForwardBackward(inputs, device_labels, batch, loss, [](int) {}));
    profiled->SgdUpdate(params, grads, velocity, total, 0.01f, 0.9f, 0.0f);
    return device->CopyToHost(&host_loss, loss, sizeof(float));
  };
  for (int s = 0; s < warmup; ++s) RETURN_IF_ERROR(step());

  ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock, device->CreateClock(2));
  std::vector<double> unmarked;
  for (int s = 0; s < steps; ++s) {
    RETURN_IF_ERROR(clock->Record(0));
    RETURN_IF_ERROR(step());
    RETURN_IF_ERROR(clock->Record(1));
    RETURN_IF_ERROR(device->Synchronize());
    ASSIGN_OR_RETURN(const double ms, clock->ElapsedMs(0, 1));
    unmarked.push_back(ms);
  }
  std::vector<std::vector<ProfiledOp>> profiles;
  for (int s = 0; s < steps; ++s) {
    RETURN_IF_ERROR(profiled->BeginStep());
    RETURN_IF_ERROR(step());
    ASSIGN_OR_RETURN(std::vector<ProfiledOp> ops, profiled->EndStep());
    profiles.push_back(std::move(ops));
  }
  ASSIGN_OR_RETURN(const ProfileTable table, SummarizeProfile(profiles));

  const double unmarked_ms = MedianOf(unmarked);
  const std::string heading = absl::StrCat(
      model->name(), " on ", device->name(),
      ", --precision=", PrecisionName(options.precision),
      options.convolutions_round_own_operands ? " (--bf16_operands=false)" : "",
      options.cudnn_graph.has_value()
          ? (*options.cudnn_graph ? " (--cudnn_graph=true)"
                                  : " (--cudnn_graph=false)")
          : "",
      options.cudnn_layout == ConvolutionLayout::kAuto
          ? ""
          : absl::StrCat(" (--cudnn_layout=",
                         ConvolutionLayoutName(options.cudnn_layout), ")"),
      ", batch ", batch, "; last loss ", host_loss);
  std::printf(
      "%s\nunmarked step: %.3f ms (median of %d; the device's clock "
      "at its start and end)\n",
      heading.c_str(), unmarked_ms, steps);
  std::printf("%s", FormatProfile(table, absl::GetFlag(FLAGS_top)).c_str());
  if (!profiled->convolutions().empty()) {
    // Each shape once, in the order they were made: layers of one shape
    // run the choice the first of them made (the device keeps it by shape),
    // and that first one's description also says how its search went.
    std::printf("\nconvolutions, as the library runs them:\n");
    std::vector<std::string> printed;
    for (const ProfilingDevice::Convolution& conv : profiled->convolutions()) {
      if (std::find(printed.begin(), printed.end(), conv.shape) !=
          printed.end()) {
        continue;
      }
      printed.push_back(conv.shape);
      std::printf("  %s: %s\n", conv.shape.c_str(), conv.library.c_str());
    }
  }

  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    nlohmann::json json = ProfileJson(table);
    json["model"] = model->name();
    json["device"] = device->name();
    json["precision"] = PrecisionName(options.precision);
    json["bf16_operands"] = !options.convolutions_round_own_operands;
    json["cudnn_graph"] = CudnnGraphOf(options);
    json["cudnn_layout"] = ConvolutionLayoutName(options.cudnn_layout);
    json["batch"] = batch;
    json["warmup"] = warmup;
    json["unmarked_step_ms"] = unmarked_ms;
    json["unmarked_steps_ms"] = unmarked;
    nlohmann::json convolutions = nlohmann::json::array();
    for (const ProfilingDevice::Convolution& conv : profiled->convolutions()) {
      convolutions.push_back(
          {{"shape", conv.shape}, {"library", conv.library}});
    }
    json["convolutions"] = convolutions;
    RETURN_IF_ERROR(WriteFileAtomically(out, json.dump(1) + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "layer_profile: a model step's device time, operation by operation "
      "(--help lists the flags)");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr,
                 "layer_profile: unexpected argument \"%s\"; it takes only "
                 "--flags (--help lists them)\n",
                 rest[1]);
    return 2;
  }
  const absl::Status status = gradsync::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "layer_profile: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
