#include "core/optim/checkpoint_path.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool Exists(const std::string& path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0;
}

// Whether `name` is `stem` followed by a number; `rest` gets what follows
// the number.
bool IsNumbered(const std::string& name, const std::string& stem,
                std::string* rest) {
  if (!absl::StartsWith(name, stem)) return false;
  size_t end = stem.size();
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == stem.size()) return false;
  *rest = name.substr(end);
  return true;
}

// The files written beside the checkpoint whose killed writers leave
// temporary files: the parameter servers' shards (<path>.server<k>) and the
// workers' error-feedback residuals (<path>.residual<rank>, and the
// ".previous" copy each keeps; core/sync/error_feedback.h).
bool WrittenBesideTheCheckpoint(const std::string& name,
                                const std::string& prefix) {
  std::string rest;
  for (const char* kind : {".server", ".residual"}) {
    if (IsNumbered(name, prefix + kind, &rest) &&
        (rest.empty() || rest == ".previous")) {
      return true;
    }
  }
  return false;
}

// Removes an earlier run's error-feedback residuals beside `path`: a run
// that does not resume writes its own at its first checkpoint, and until
// then files of another run (more workers, another compression) would
// sit beside its checkpoint as if they were its state.
void RemoveEarlierResiduals(const std::string& path) {
  const std::string folder = FolderOf(path);
  const std::string stem = BaseOf(path) + ".residual";
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> earlier;
  while (const dirent* entry = readdir(dir)) {
    std::string rest;
    if (IsNumbered(entry->d_name, stem, &rest) &&
        (rest.empty() || rest == ".previous")) {
      earlier.push_back(absl::StrCat(folder, "/", entry->d_name));
    }
  }
  closedir(dir);
  for (const std::string& file : earlier) unlink(file.c_str());
}

}  // namespace

absl::Status CheckCheckpointFile(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " cannot be examined: ", std::strerror(errno)));
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path,
                     " is a directory; --checkpoint names a file (e.g. ", path,
                     "/model.ckpt)"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path,
        " is not a regular file (a FIFO, a device or a socket); --checkpoint "
        "names a file"));
  }
  return absl::OkStatus();
}

std::vector<std::string> RemoveStaleTempFiles(const std::string& path) {
  std::vector<std::string> removed;
  const std::string folder = FolderOf(path);
  const std::string prefix = BaseOf(path);
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return removed;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    // <base>.tmp.<pid>, also of the shards (<base>.server<k>.tmp.<pid>)
    // and of the residuals (<base>.residual<rank>.tmp.<pid>).
    if (!absl::StartsWith(name, prefix)) continue;
    const size_t tmp = name.rfind(".tmp.");
    if (tmp == std::string::npos || tmp < prefix.size()) continue;
    const std::string owner = name.substr(0, tmp);
    if (owner != prefix && !WrittenBesideTheCheckpoint(owner, prefix)) {
      continue;
    }
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(tmp + 5), &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) continue;  // its writer lives
    const std::string full = absl::StrCat(folder, "/", name);
    if (unlink(full.c_str()) == 0) removed.push_back(full);
  }
  closedir(dir);
  return removed;
}

absl::Status CheckCheckpointPath(const std::string& path,
                                 const CheckpointPathOptions& options) {
  if (path.empty()) return absl::OkStatus();
  const std::string folder = FolderOf(path);
  struct stat info;
  if (stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, ": its folder ", folder,
        " does not exist; create it first (the checkpoint would only be "
        "written after --checkpoint_every steps, and that work lost)"));
  }
  if (access(folder.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint ", path, ": its folder ", folder,
                     " is not writable: ", std::strerror(errno)));
  }
  std::vector<std::string> files = {path};
  for (int k = 0; k < options.num_servers; ++k) {
    files.push_back(absl::StrCat(path, ".server", k));
    files.push_back(absl::StrCat(path, ".server", k, ".previous"));
  }
  for (const std::string& file : files) {
    RETURN_IF_ERROR(CheckCheckpointFile(file));
  }
  if (Exists(path) && !options.resume && !options.overwrite) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path,
                     " already exists: pass --resume to continue from it, or "
                     "--overwrite_checkpoint to start over and replace it"));
  }
  RemoveStaleTempFiles(path);
  if (!options.resume) RemoveEarlierResiduals(path);
  return absl::OkStatus();
}

}  // namespace gradsync
