// The compression codecs' own compute cost (core/sync/compression.h), which
// the cost model adds to a compressed step (bench/cost_model.py's
// CODEC_SECONDS_PER_MB): per method, Encode with error feedback of one 4 MiB
// bucket (1 Mi floats of a normal gradient), and AddDecoded of that encoding
// into a bucket, on one core.
//
//   bazel run -c opt //bench:compression_benchmark -- --benchmark_min_time=0.5
//
// Columns: time per call, and bytes_per_second of float32 gradient (CPU
// time: the machine may be shared); the cost model's constant is its
// inverse, 1000 / (MB/s) milliseconds per 10^6 bytes.
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/sync/compression.h"

namespace gradsync {
namespace {

constexpr int64_t kFloats = 1 << 20;

const char* const kMethods[] = {"fp16",         "bf16",   "topk:0.01",
                                "randomk:0.01", "onebit", "none"};

std::vector<float> NormalGradient() {
  std::vector<float> gradient(kFloats);
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float& value : gradient) value = normal(random);
  return gradient;
}

void SetBytes(benchmark::State& state) {
  state.SetBytesProcessed(state.iterations() * kFloats * 4);
}

void BM_Encode(benchmark::State& state) {
  const CompressionSpec spec =
      CompressionSpec::Parse(kMethods[state.range(0)]).value();
  state.SetLabel(spec.ToString());
  const Compressor compressor(spec, 1);
  const std::vector<float> gradient = NormalGradient();
  std::vector<float> residual(kFloats, 0.0f);
  EncodedBucket encoded;
  int64_t step = 0;
  for (auto _ : state) {
    absl::Status status =
        compressor.Encode(gradient,
                          spec.UsesErrorFeedback() ? absl::MakeSpan(residual)
                                                   : absl::Span<float>(),
                          step++, 0, &encoded);
    if (!status.ok()) state.SkipWithError(status.ToString().c_str());
    benchmark::DoNotOptimize(encoded);
  }
  SetBytes(state);
}

void BM_Decode(benchmark::State& state) {
  const CompressionSpec spec =
      CompressionSpec::Parse(kMethods[state.range(0)]).value();
  state.SetLabel(spec.ToString());
  const Compressor compressor(spec, 1);
  const std::vector<float> gradient = NormalGradient();
  std::vector<float> residual(kFloats, 0.0f);
  EncodedBucket encoded;
  if (!compressor.Encode(gradient, absl::MakeSpan(residual), 0, 0, &encoded)
           .ok()) {
    state.SkipWithError("encode failed");
    return;
  }
  std::vector<float> bucket(kFloats, 0.0f);
  for (auto _ : state) {
    absl::Status status = AddDecoded(encoded, absl::MakeSpan(bucket));
    if (!status.ok()) state.SkipWithError(status.ToString().c_str());
    benchmark::ClobberMemory();
  }
  SetBytes(state);
}

BENCHMARK(BM_Encode)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gradsync

BENCHMARK_MAIN();
