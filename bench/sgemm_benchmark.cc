// OpenBLAS's single-precision matrix product on this machine, at the shapes
// an im2col convolution of ResNet-18 (CIFAR variant) gives, and a square one
// for the machine's peak: the roofline that a CPU convolution built on GEMM
// can approach and never pass.
//
//   bazel run -c opt //bench:sgemm_benchmark -- --benchmark_min_time=1
//
// A 3×3 convolution from C_in to C_out channels on a batch of B images of
// H×W outputs is one product [C_out × 9·C_in] · [9·C_in × B·H·W]: M = C_out,
// K = 9·C_in, N = B·H·W. The four stages of ResNet-18 at batch 32 give the
// "stage" rows (32×32, 16×16, 8×8 and 4×4 outputs). ResNet-18's forward pass
// is 0.555 G multiply-adds per image and forward + backward about 3.33 GFLOP
// (bench/pytorch_resnet18_reference.py counts them), so a step of batch B
// takes at least 3.33·B / (GFLOP/s below) seconds on this machine.
//
// Time is wall-clock (UseRealTime) and GFLOP/s is 2·M·N·K per wall-clock
// second; the CPU column is the process's CPU time over all threads, which on
// a machine shared with other work stays near threads × the unloaded time
// while wall time grows with the load, and GFLOP/cpu_s is the rate per second
// of one core's CPU time.
#include <cblas.h>
#include <time.h>

#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

double ProcessCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * now.tv_nsec;
}

void BM_Sgemm(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const int k = static_cast<int>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  openblas_set_num_threads(threads);
  std::mt19937 engine(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(int64_t{m} * k), b(int64_t{k} * n), c(int64_t{m} * n);
  for (float& x : a) x = uniform(engine);
  for (float& x : b) x = uniform(engine);
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                a.data(), k, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const double cpu_seconds = ProcessCpuSeconds() - cpu_start;
  const double gflop = 2.0 * m * n * k * 1e-9;
  state.counters["GFLOP/s"] =
      benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
  // Per second of CPU time of one core: what the product achieves while it
  // runs, whatever else shares the machine (threads x this ~ an unloaded
  // machine's GFLOP/s when the threads scale).
  if (cpu_seconds > 0) {
    state.counters["GFLOP/cpu_s"] =
        gflop * static_cast<double>(state.iterations()) / cpu_seconds;
  }
}

void Shapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"M", "N", "K", "threads"});
  for (int threads : {1, 2}) {
    bench->Args({1024, 1024, 1024, threads});  // square: the peak
    // ResNet-18 stages at batch 32: {C_out, 32·H·W, 9·C_in}.
    bench->Args({64, 32 * 32 * 32, 9 * 64, threads});
    bench->Args({128, 32 * 16 * 16, 9 * 128, threads});
    bench->Args({256, 32 * 8 * 8, 9 * 256, threads});
    bench->Args({512, 32 * 4 * 4, 9 * 512, threads});
  }
}

BENCHMARK(BM_Sgemm)
    ->Apply(Shapes)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
