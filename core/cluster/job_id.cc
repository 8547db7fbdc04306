#include "core/cluster/job_id.h"

#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gradsync {
namespace {

const char* NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

}  // namespace

std::string NewJobId() {
  std::random_device random;
  const uint64_t bits =
      (uint64_t{random()} << 16 ^ uint64_t{random()}) & 0xffffffffffffULL;
  return absl::StrCat(
      absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
      "-", absl::Hex(bits, absl::kZeroPad12));
}

std::string JobIdFromEnvironment() {
  if (const char* id = NonEmptyEnv("GRADSYNC_JOB_ID")) return id;
  // srun: one id per job step, the same in every task of it.
  if (const char* job = NonEmptyEnv("SLURM_JOB_ID")) {
    const char* step = NonEmptyEnv("SLURM_STEP_ID");
    return absl::StrCat("slurm-", job, step != nullptr ? "." : "",
                        step != nullptr ? step : "");
  }
  // mpirun: the PMIx namespace names the job (Open MPI 4 and 5).
  if (const char* space = NonEmptyEnv("PMIX_NAMESPACE")) {
    return absl::StrCat("mpi-", space);
  }
  if (const char* job = NonEmptyEnv("OMPI_MCA_ess_base_jobid")) {
    return absl::StrCat("mpi-", job);
  }
  // torchrun names its run only when told (--rdzv_id); "none" is its default.
  if (const char* run = NonEmptyEnv("TORCHELASTIC_RUN_ID")) {
    if (std::string(run) != "none") return absl::StrCat("torchrun-", run);
  }
  return "";
}

}  // namespace gradsync
