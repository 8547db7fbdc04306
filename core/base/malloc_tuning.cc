#include "core/base/malloc_tuning.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gradsync {

void KeepFreedMemoryForReuse() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr &&
      std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return;
  }
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit; setting
  // either value also stops glibc from moving the threshold by itself.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace gradsync
