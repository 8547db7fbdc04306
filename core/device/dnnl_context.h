// What every oneDNN primitive of one CPU device shares: the engine, the stream,
// the thread count, and scratch memory (oneDNN's scratchpads, weights in the
// library's blocked layout, weight gradients before their reorder back to
// PyTorch's order). The primitives of a device run one after another on the
// calling thread, so one scratch of each kind, as large as the largest
// primitive asks, serves them all: a model's memory grows by its largest layer
// rather than by the sum of its layers.
//
// Scratch grows only while primitives are created (at a model's Bind, or the
// first step of a new batch size); running a primitive never allocates. Not
// thread-safe: one device's primitives must not run concurrently.
//
// oneDNN in Debian is built with OpenMP: its thread count is libgomp's, which
// is per calling thread, so it is set before each run on the thread that runs
// it (a no-op when it already holds).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>

namespace gradsync {

class DnnlContext {
 public:
  // `threads` > 0 fixes oneDNN's thread count; 0 keeps OpenMP's default.
  explicit DnnlContext(int threads);

  DnnlContext(const DnnlContext&) = delete;
  DnnlContext& operator=(const DnnlContext&) = delete;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // Applies the thread count to the calling thread; call before executing.
  void UseThreads() const { SetThreads(threads_); }
  // One thread, for work too small to share: on a machine with more runnable
  // threads than cores, every parallel region waits for its slowest thread's
  // next time slice (milliseconds), which a product of a few hundred
  // microseconds cannot pay back.
  void UseOneThread() const { SetThreads(1); }
  int threads() const { return threads_; }

  // Scratch that will hold at least `bytes` (grows at creation time only).
  // kOutput: --precision=bf16's copy of an output gradient rounded to bf16.
  enum Scratch {
    kScratchpad,
    kWeights,
    kWeightGrad,
    kInput,
    kOutput,
    kScratchKinds
  };
  void Reserve(Scratch kind, size_t bytes);
  void* scratch(Scratch kind) const { return scratch_[kind].get(); }
  size_t scratch_bytes() const;

 private:
  struct FreeAligned {
    void operator()(void* block) const { std::free(block); }
  };

  static void SetThreads(int threads);

  const int threads_;  // resolved: OpenMP's default where 0 was asked
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unique_ptr<void, FreeAligned> scratch_[kScratchKinds];
  size_t capacity_[kScratchKinds] = {};
};

}  // namespace gradsync
