#include "core/device/dnnl_context.h"

#include <omp.h>

#include <cstring>

#include "core/base/logging.h"

namespace gradsync {

DnnlContext::DnnlContext(int threads)
    : threads_(threads > 0 ? threads : omp_get_max_threads()),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {}

void DnnlContext::SetThreads(int threads) {
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

void DnnlContext::Reserve(Scratch kind, size_t bytes) {
  if (bytes <= capacity_[kind]) return;
  constexpr size_t kAlignment = 64;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* block = std::aligned_alloc(kAlignment, rounded);
  GS_CHECK(block != nullptr)
      << "oneDNN scratch: out of memory allocating " << rounded << " bytes";
  std::memset(block, 0, rounded);
  scratch_[kind].reset(block);
  capacity_[kind] = rounded;
}

size_t DnnlContext::scratch_bytes() const {
  size_t bytes = 0;
  for (size_t capacity : capacity_) bytes += capacity;
  return bytes;
}

}  // namespace gradsync
