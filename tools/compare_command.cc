// gradsync compare: runs bench/compare.py (the comparison is a sweep of real
// jobs, which bench/scaling.py already drives; the command gives it one name
// and finds it). The script comes from this binary's runfiles, so it matches
// the build, else from bench/ under the working directory (a checkout); the
// binaries it launches are this one and netem beside it (GRADSYNC_BIN_DIR).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/files.h"
#include "tools/commands.h"

namespace gradsync {
namespace {

bool Readable(const std::string& path) {
  return access(path.c_str(), R_OK) == 0;
}

}  // namespace

int RunCompareCommand(int argc, char** argv) {
  const std::string exe = ThisExecutable();
  const std::string candidates[] = {
      exe + ".runfiles/gradsync/bench/compare.py",
      std::string(argv[0]) + ".runfiles/gradsync/bench/compare.py",
      "bench/compare.py",
  };
  std::string script;
  for (const std::string& candidate : candidates) {
    if (Readable(candidate)) {
      script = candidate;
      break;
    }
  }
  if (script.empty()) {
    fprintf(stderr,
            "gradsync compare: bench/compare.py not found beside this binary "
            "(%s.runfiles) nor under the working directory; run it from a "
            "checkout, after `bazel build //tools:gradsync //tools:netem`\n",
            exe.c_str());
    return 1;
  }
  if (!exe.empty() && std::getenv("GRADSYNC_BIN_DIR") == nullptr) {
    setenv("GRADSYNC_BIN_DIR", exe.substr(0, exe.rfind('/')).c_str(), 1);
  }
  // Debian's interpreter: it has matplotlib for the plot.
  std::vector<char*> args = {const_cast<char*>("/usr/bin/python3"),
                             const_cast<char*>(script.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(args[0], args.data());
  fprintf(stderr, "gradsync compare: cannot run /usr/bin/python3 %s: %s\n",
          script.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace gradsync
