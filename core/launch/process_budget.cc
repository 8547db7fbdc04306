#include "core/launch/process_budget.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gradsync {
namespace {

constexpr int kProcessesPerCore = 16;
constexpr double kUsableMemory = 0.8;

std::string Mebibytes(int64_t bytes) {
  return absl::StrFormat("%.0f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

MachineCapacity ThisMachine() {
  MachineCapacity machine;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    machine.cores = CPU_COUNT(&set);
  } else {
    machine.cores = static_cast<int>(std::thread::hardware_concurrency());
  }
  machine.cores = std::max(machine.cores, 1);
  if (FILE* file = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kib = 0;
    while (std::fgets(line, sizeof(line), file) != nullptr) {
      if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
        machine.available_bytes = static_cast<int64_t>(kib) * 1024;
        break;
      }
    }
    std::fclose(file);
  }
  return machine;
}

int MaxLocalProcesses(const MachineCapacity& machine,
                      int64_t bytes_per_process) {
  int64_t bound = int64_t{kProcessesPerCore} * std::max(machine.cores, 1);
  if (machine.available_bytes > 0 && bytes_per_process > 0) {
    bound = std::min<int64_t>(
        bound, static_cast<int64_t>(kUsableMemory * machine.available_bytes /
                                    bytes_per_process));
  }
  return static_cast<int>(std::max<int64_t>(bound, 1));
}

absl::Status CheckLocalProcesses(int workers, int servers,
                                 int64_t bytes_per_worker,
                                 int64_t bytes_per_server,
                                 const MachineCapacity& machine,
                                 int max_processes) {
  const int64_t processes = int64_t{workers} + servers;
  if (max_processes > 0) {
    if (processes <= max_processes) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "--workers=", workers, " and --servers=", servers, " make ", processes,
        " processes, more than --max_processes=", max_processes));
  }
  const int64_t by_cores = int64_t{kProcessesPerCore} * machine.cores;
  const int64_t needed =
      workers * bytes_per_worker + servers * bytes_per_server;
  const int64_t usable =
      static_cast<int64_t>(kUsableMemory * machine.available_bytes);
  const bool too_many = processes > by_cores;
  const bool too_big = machine.available_bytes > 0 && needed > usable;
  if (!too_many && !too_big) return absl::OkStatus();
  std::string why;
  if (too_many) {
    why = absl::StrCat(machine.cores, " cores hold at most ", by_cores, " (",
                       kProcessesPerCore, " a core)");
  }
  if (too_big) {
    absl::StrAppend(&why, too_many ? "; and " : "", "they need about ",
                    Mebibytes(needed), " (", Mebibytes(bytes_per_worker),
                    " a worker, which holds its own copy of the data, ",
                    Mebibytes(bytes_per_server), " a server) but 80% of the ",
                    Mebibytes(machine.available_bytes),
                    " of available memory is ", Mebibytes(usable));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--workers=", workers, " and --servers=", servers, " make ", processes,
      " processes on this machine: ", why,
      ". Use fewer, or pass --max_processes=N to allow N processes anyway"));
}

}  // namespace gradsync
