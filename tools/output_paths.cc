// Output paths checked at start-up (output_paths.h).
#include "tools/output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/telemetry/trace.h"

namespace gradsync {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_not_of('/') == std::string::npos
                           ? std::string::npos
                           : path.rfind('/', path.find_last_not_of('/'));
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// One line: what, where, and what to do.
absl::Status Refused(absl::string_view flag, const std::string& path,
                     const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat(flag, "=", path, " cannot be written: ", why,
                   "; fix the path before the run rather than lose its "
                   "output at the end"));
}

// Why the run could not write into `folder` (creating it where missing):
// "" when it can. The nearest part of the path that exists must be a
// writable folder.
std::string WhyNotWritableFolder(const std::string& folder) {
  std::string existing = folder;
  struct stat info;
  while (stat(existing.c_str(), &info) != 0) {
    // ENOTDIR: a part of the path is a file; walking up finds which.
    if (errno != ENOENT && errno != ENOTDIR) {
      return absl::StrCat(existing, ": ", std::strerror(errno));
    }
    const std::string parent = FolderOf(existing);
    if (parent == existing) return "no part of its path exists";
    existing = parent;
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::StrCat(existing, " is a file, not a folder");
  }
  if (access(existing.c_str(), W_OK | X_OK) != 0) {
    return absl::StrCat(existing, " is not writable (", std::strerror(errno),
                        ")");
  }
  return "";
}

// Creates `folder` and the parts of its path that are missing.
absl::Status MakeFolders(absl::string_view flag, const std::string& folder) {
  std::string partial;
  for (size_t i = 0; i <= folder.size(); ++i) {
    if ((i == folder.size() || folder[i] == '/') && !partial.empty() &&
        mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return Refused(
          flag, folder,
          absl::StrCat("creating ", partial, ": ", std::strerror(errno)));
    }
    if (i < folder.size()) partial += folder[i];
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckOutputFile(absl::string_view flag, const std::string& file) {
  if (file.empty()) return absl::OkStatus();
  struct stat info;
  if (stat(file.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) return Refused(flag, file, "it is a folder");
    if (!S_ISREG(info.st_mode)) {
      return Refused(flag, file,
                     "it is not a regular file (a FIFO, a device or a "
                     "socket)");
    }
  } else if (errno != ENOENT && errno != ENOTDIR) {
    // ENOTDIR: a part of the path is a file, which the folder's check names.
    return Refused(flag, file, std::strerror(errno));
  }
  // A folder that does not exist yet is created before the run starts.
  const std::string why = WhyNotWritableFolder(FolderOf(file));
  if (!why.empty()) return Refused(flag, file, why);
  return absl::OkStatus();
}

absl::Status CheckOutputFolder(absl::string_view flag,
                               const std::string& folder) {
  if (folder.empty()) return absl::OkStatus();
  const std::string why = WhyNotWritableFolder(folder);
  if (!why.empty()) return Refused(flag, folder, why);
  return absl::OkStatus();
}

absl::Status CheckWorkerOutputs(int rank, const WorkerOutputs& outputs) {
  RETURN_IF_ERROR(CheckOutputFolder("--metrics_dir", outputs.metrics_dir));
  if (!outputs.dump_params.empty()) {
    RETURN_IF_ERROR(CheckOutputFile(
        "--dump_params", absl::StrCat(outputs.dump_params, ".worker", rank)));
  }
  if (!outputs.trace.empty()) {
    RETURN_IF_ERROR(CheckOutputFile(
        "--trace", RankTracePath(outputs.trace, "worker", rank)));
    if (rank == 0) RETURN_IF_ERROR(CheckOutputFile("--trace", outputs.trace));
  }
  return absl::OkStatus();
}

absl::Status PrepareOutputFile(absl::string_view flag,
                               const std::string& file) {
  RETURN_IF_ERROR(CheckOutputFile(flag, file));
  if (file.empty()) return absl::OkStatus();
  return MakeFolders(flag, FolderOf(file));
}

absl::Status PrepareWorkerOutputs(int rank, const WorkerOutputs& outputs) {
  RETURN_IF_ERROR(CheckWorkerOutputs(rank, outputs));
  RETURN_IF_ERROR(MakeFolders("--metrics_dir", outputs.metrics_dir));
  if (!outputs.dump_params.empty()) {
    RETURN_IF_ERROR(
        MakeFolders("--dump_params", FolderOf(outputs.dump_params)));
  }
  if (!outputs.trace.empty()) {
    RETURN_IF_ERROR(MakeFolders("--trace", FolderOf(outputs.trace)));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
