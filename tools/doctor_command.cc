// gradsync doctor: what this build and machine have — strategies compiled in,
// BLAS, data set, cores — and what is missing, with the command that fixes it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/strings/str_join.h"
#include "core/dataset.h"
#include "core/gradient_sync.h"
#include "core/manifest.h"
#include "tools/commands.h"

extern "C" char* openblas_get_config(void);

namespace gradsync {

int RunDoctorCommand() {
  int missing = 0;
  printf("gradsync doctor\n");
  printf("  git commit        %s\n", GitCommit().c_str());
  printf("  compiler          gcc %s\n", __VERSION__);
  printf("  cpu cores         %u\n", std::thread::hardware_concurrency());
  printf("  openblas          %s\n", openblas_get_config());
  printf("  strategies        %s\n",
         absl::StrJoin(GradientSyncRegistry::Names(), ", ").c_str());
  struct stat st;
  const std::string data = std::string(kDefaultFashionMnistDir) + "/train-images-idx3-ubyte.gz";
  if (stat(data.c_str(), &st) == 0) {
    printf("  fashion-mnist     %s\n", kDefaultFashionMnistDir);
  } else {
    printf("  fashion-mnist     MISSING (apt-get install dataset-fashion-mnist, "
           "or pass --data_dir / --data=synthetic)\n");
    ++missing;
  }
#ifdef GRADSYNC_CUDA
  printf("  cuda              built with --config=cuda\n");
#else
  printf("  cuda              not in this build (rebuild with --config=cuda)\n");
#endif
  return missing == 0 ? 0 : 1;
}

}  // namespace gradsync
