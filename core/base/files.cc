#include "core/base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string error = std::strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat("writing ", tmp, ": ", error));
    }
    done += n;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const std::string error = std::strerror(errno);
    unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat("flushing ", tmp, ": ", error));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    unlink(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("renaming ", tmp, " to ", path, ": ", error));
  }
  return absl::OkStatus();
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && !S_ISDIR(info.st_mode);
}

std::string ThisExecutable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  path[n] = '\0';
  return path;
}

}  // namespace gradsync
