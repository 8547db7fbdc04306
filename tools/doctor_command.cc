// gradsync doctor: what this build and machine have — strategies compiled in,
// BLAS, data set, cores, and in CUDA builds the GPUs, driver, CUDA runtime,
// NCCL and cuBLAS with the files they were loaded from, plus a small GEMM on
// every GPU checked against the CPU — and what is missing, with the fix.
// Exits 1 when anything is missing, so a script on a GPU node can gate on it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/data/dataset.h"
#include "core/sync/gradient_sync.h"
#include "core/telemetry/manifest.h"
#include "tools/commands.h"

#ifdef GRADSYNC_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "core/device/cuda_device.h"
#include "core/device/device.h"
#endif

extern "C" char* openblas_get_config(void);

// Defined in tools/train_flags.cc (the training flags); the bundle's wrapper
// points it at the Fashion-MNIST files it carries.
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, data_dir);

namespace gradsync {
namespace {

void Row(const std::string& label, const std::string& value) {
  printf("  %-18s%s\n", label.c_str(), value.c_str());
}

#ifdef GRADSYNC_CUDA

// Continuation lines line up under Row()'s values.
constexpr char kIndent[] = "                    ";

std::string VersionText(int version) {  // 13000 -> "13.0"
  return absl::StrCat(version / 1000, ".", version % 1000 / 10);
}

// The files this process has mapped whose names start with `prefix`
// ("libnccl.so"): where the dynamic loader really found each library, which
// LD_LIBRARY_PATH, RUNPATH and the bundle's wrapper all influence.
std::vector<std::string> LoadedFrom(const std::string& prefix) {
  std::set<std::string> paths;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string base = path.substr(path.rfind('/') + 1);
    if (absl::StartsWith(base, prefix)) paths.insert(path);
  }
  return {paths.begin(), paths.end()};
}

// The kernel module's version line, e.g. "NVIDIA UNIX x86_64 Kernel Module
// 580.65.06 ...": the driver's own number, which cudaDriverGetVersion (the
// CUDA version the driver supports) does not give.
std::string KernelModuleVersion() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(file, line)) return "";
  absl::string_view text = line;
  absl::ConsumePrefix(&text, "NVRM version: ");
  return std::string(absl::StripAsciiWhitespace(text));
}

// A 256×512×784 product (the default MLP's first layer at batch 256) on `gpu`,
// compared with the CPU backend: proves that kernels launch, cuBLAS runs and
// memory moves, end to end.
std::string SmokeTest(int gpu, int* missing) {
  absl::StatusOr<std::unique_ptr<CudaDevice>> cuda = CudaDevice::Create(gpu);
  if (!cuda.ok()) {
    ++*missing;
    return absl::StrCat("FAILED: ", cuda.status().message());
  }
  absl::StatusOr<std::unique_ptr<Device>> cpu = CreateDevice(DeviceOptions{});
  if (!cpu.ok()) return absl::StrCat("skipped: ", cpu.status().message());
  const int m = 256, n = 512, k = 784;
  std::mt19937_64 generator(1);
  auto random = [&generator](size_t count) {
    std::vector<float> values(count);
    for (float& v : values) {
      v = static_cast<float>(
          static_cast<double>(generator() >> 11) * 0x1.0p-53 - 0.5);
    }
    return values;
  };
  const std::vector<float> a = random(size_t{m} * k), b = random(size_t{n} * k);
  std::vector<std::vector<float>> results;
  for (Device* device : {cpu->get(), static_cast<Device*>(cuda->get())}) {
    absl::Status status;
    float* da = nullptr;
    float* db = nullptr;
    float* dc = nullptr;
    auto allocate = [&](float** out, size_t count) {
      absl::StatusOr<float*> buffer = device->Allocate<float>(count);
      if (!buffer.ok()) status.Update(buffer.status());
      *out = buffer.ok() ? *buffer : nullptr;
    };
    allocate(&da, a.size());
    allocate(&db, b.size());
    allocate(&dc, size_t{m} * n);
    if (status.ok()) status = device->CopyToDevice(da, a.data(), a.size() * 4);
    if (status.ok()) status = device->CopyToDevice(db, b.data(), b.size() * 4);
    std::vector<float> c(size_t{m} * n);
    if (status.ok()) {
      device->Gemm(false, true, m, n, k, 1.0f, da, db, 0.0f, dc);
      status = device->CopyToHost(c.data(), dc, c.size() * 4);
    }
    if (!status.ok()) {
      ++*missing;
      return absl::StrCat("FAILED: ", status.message());
    }
    results.push_back(std::move(c));
  }
  double worst = 0;
  for (size_t i = 0; i < results[0].size(); ++i) {
    worst = std::max(worst, std::fabs(double{results[0][i]} - results[1][i]));
  }
  // Sums of 784 products of values in [-0.5, 0.5): |c| is a few units, and
  // float32 with different summation orders agrees to ~1e-5.
  const bool ok = worst < 1e-3;
  if (!ok) ++*missing;
  return absl::StrCat(ok ? "ok" : "WRONG RESULTS", ": gemm ", m, "x", n, "x", k,
                      " matches the CPU to ", absl::StrFormat("%.1e", worst));
}

int CudaSection() {
  int missing = 0;
  printf(
      "CUDA (built with --config=cuda, CUDA %s, NCCL %d.%d.%d, cuDNN %d, "
      "kernels for sm_80 and sm_90, PTX for compute_90)\n",
      VersionText(CUDART_VERSION).c_str(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
      CUDNN_MAJOR);
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  Row("cuda runtime", VersionText(runtime));
  int driver = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  const std::string module = KernelModuleVersion();
  if (driver == 0) {
    Row("nvidia driver",
        "MISSING (no libcuda.so.1: install the NVIDIA driver; "
        "containers need the GPU runtime hook)");
    ++missing;
  } else {
    Row("nvidia driver",
        absl::StrCat("supports CUDA ", VersionText(driver),
                     module.empty() ? "" : absl::StrCat(" (", module, ")")));
    if (driver < runtime) {
      Row("", absl::StrCat("TOO OLD: CUDA ", VersionText(runtime),
                           " needs a driver for CUDA ", VersionText(runtime),
                           " or newer (or the cuda-compat package)"));
      ++missing;
    }
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    Row("nccl",
        absl::StrCat(nccl / 10000, ".", nccl / 100 % 100, ".", nccl % 100));
  }
  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  Row("cublas",
      absl::StrCat(cublas_major, ".", cublas_minor, ".", cublas_patch));
  // cuDNN 9 encodes major*10000 + minor*100 + patch. The convolutions were
  // compiled against CUDNN_MAJOR's API; another major's library would not
  // have loaded at all, but a build may be run with a cuDNN 9 older than its
  // own headers, which cuDNN does not promise to support.
  const size_t cudnn = cudnnGetVersion();
  const size_t cudnn_major = cudnn / 10000, cudnn_minor = cudnn / 100 % 100;
  std::string cudnn_text =
      absl::StrCat(cudnn_major, ".", cudnn_minor, ".", cudnn % 100,
                   " (built with ", CUDNN_MAJOR, ".", CUDNN_MINOR, ")");
  if (cudnn_major != CUDNN_MAJOR || cudnn_minor < CUDNN_MINOR) {
    absl::StrAppend(&cudnn_text, " — TOO OLD: install cuDNN ", CUDNN_MAJOR, ".",
                    CUDNN_MINOR, " or a newer ", CUDNN_MAJOR, ".x");
    ++missing;
  }
  Row("cudnn", cudnn_text);

  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note =
      visible != nullptr ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=", visible, ")")
                         : "";
  if (error != cudaSuccess) {
    cudaGetLastError();
    Row("gpus", absl::StrCat("NONE VISIBLE: cudaGetDeviceCount: ",
                             cudaGetErrorString(error), visible_note));
    ++missing;
    count = 0;
  } else if (count == 0) {
    Row("gpus", absl::StrCat("NONE VISIBLE", visible_note));
    ++missing;
  } else {
    Row("gpus", absl::StrCat(count, " visible", visible_note));
  }
  for (int gpu = 0; gpu < count; ++gpu) {
    cudaDeviceProp properties;
    if (cudaGetDeviceProperties(&properties, gpu) != cudaSuccess) continue;
    // sm_80 machine code runs on every 8.x GPU (A100, A10, L4, L40) and the
    // compute_90 PTX is compiled by the driver for 9.0 and newer; nothing
    // older than 8.0 has kernels in this build.
    const bool supported = properties.major >= 8;
    if (!supported) ++missing;
    Row(absl::StrCat("  cuda:", gpu),
        absl::StrFormat(
            "%s, %.1f GiB, compute capability %d.%d, %d SMs%s", properties.name,
            properties.totalGlobalMem / 1073741824.0, properties.major,
            properties.minor, properties.multiProcessorCount,
            supported ? "" : " — UNSUPPORTED: kernels need 8.0+"));
    if (supported) Row("", SmokeTest(gpu, &missing));
  }

  printf("  loaded from\n");
  struct Library {
    const char* label;
    const char* prefix;  // of the file name
  };
  for (const Library& library :
       {Library{"cuda runtime", "libcudart.so"},
        Library{"cublas", "libcublas.so"},
        Library{"cublasLt", "libcublasLt.so"}, Library{"cudnn", "libcudnn.so"},
        Library{"nccl", "libnccl.so"}, Library{"driver", "libcuda.so"}}) {
    const std::vector<std::string> paths = LoadedFrom(library.prefix);
    Row(absl::StrCat("    ", library.label),
        paths.empty() ? absl::StrCat("not loaded (no ", library.prefix, "*)")
                      : absl::StrJoin(paths, absl::StrCat("\n", kIndent)));
  }
  if (const char* path = std::getenv("LD_LIBRARY_PATH")) {
    Row("LD_LIBRARY_PATH", path);
  }
  return missing;
}

#endif  // GRADSYNC_CUDA

}  // namespace

int RunDoctorCommand() {
  int missing = 0;
  printf("gradsync doctor\n");
  Row("git commit", GitCommit());
  Row("compiler", absl::StrCat("gcc ", __VERSION__));
  Row("cpu cores", absl::StrCat(std::thread::hardware_concurrency()));
  Row("openblas", openblas_get_config());
  Row("strategies", absl::StrJoin(GradientSyncRegistry::Names(), ", "));
  if (const char* bundle = std::getenv("GRADSYNC_BUNDLE")) {
    Row("bundle", bundle);
  }
  struct stat st;
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  const std::string data = data_dir + "/train-images-idx3-ubyte.gz";
  const std::string data_set = absl::GetFlag(FLAGS_data);
  if (data_set == "synthetic") {
    Row("data", "synthetic (made in memory, no files)");
  } else if (data_set == "cifar10") {
    // The first batch file, in the folder or the archive's subfolder, as
    // LoadCifar10 looks for it; the full check happens when a run loads it.
    std::string found;
    for (const std::string& folder :
         {data_dir, data_dir + "/cifar-10-batches-bin"}) {
      if (found.empty() &&
          stat((folder + "/data_batch_1.bin").c_str(), &st) == 0) {
        found = folder;
      }
    }
    if (!found.empty()) {
      Row("cifar10", found);
    } else {
      Row("cifar10",
          absl::StrCat("MISSING in ", data_dir,
                       " (data_batch_1..5.bin, test_batch.bin of the binary "
                       "version from https://www.cs.toronto.edu/~kriz/"
                       "cifar.html, or tools/fetch_cifar10.py --out=DIR; "
                       "or --data=synthetic)"));
      ++missing;
    }
  } else if (stat(data.c_str(), &st) == 0) {
    Row("fashion-mnist", data_dir);
  } else {
    Row("fashion-mnist",
        absl::StrCat("MISSING in ", data_dir,
                     " (apt-get install dataset-fashion-mnist, or pass "
                     "--data_dir / --data=synthetic)"));
    ++missing;
  }
#ifdef GRADSYNC_CUDA
  missing += CudaSection();
#else
  Row("cuda", "not in this build (rebuild with --config=cuda)");
#endif
  if (missing > 0) printf("%d thing(s) missing (marked above)\n", missing);
  return missing == 0 ? 0 : 1;
}

}  // namespace gradsync
