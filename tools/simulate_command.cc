// gradsync simulate: one training step of N workers under a strategy,
// simulated on SimGrid (sim/README.md). The simulator is its own program,
// sim/simulate: SimGrid keeps one engine per process, and linking it here
// would make every build of gradsync need libsimgrid-dev. This command finds
// it beside this binary (bazel-bin/tools/gradsync and bazel-bin/sim/simulate,
// or one install folder) and runs it with the arguments after "simulate";
// it parses and checks its own flags (`gradsync simulate --help`).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/files.h"
#include "tools/commands.h"

namespace gradsync {
namespace {

bool Executable(const std::string& path) {
  return access(path.c_str(), X_OK) == 0;
}

}  // namespace

int RunSimulateCommand(int argc, char** argv) {
  const std::string exe = ThisExecutable();
  const std::string dir = exe.substr(0, exe.rfind('/') + 1);
  const std::string candidates[] = {
      dir + "../sim/simulate",     // bazel-bin/tools/gradsync
      dir + "gradsync-simulate",  // both installed in one folder
      "bazel-bin/sim/simulate",   // a checkout's working directory
  };
  std::string simulator;
  for (const std::string& candidate : candidates) {
    if (Executable(candidate)) {
      simulator = candidate;
      break;
    }
  }
  if (simulator.empty()) {
    fprintf(stderr,
            "gradsync simulate: the simulator is not built: run `bazel build "
            "//sim:simulate` (it needs SimGrid: tools/install_deps.sh --sim); "
            "looked for %s../sim/simulate, %sgradsync-simulate and "
            "bazel-bin/sim/simulate\n",
            dir.c_str(), dir.c_str());
    return 2;
  }
  std::vector<char*> args = {const_cast<char*>(simulator.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(args[0], args.data());
  fprintf(stderr, "gradsync simulate: cannot run %s: %s\n", simulator.c_str(),
          std::strerror(errno));
  return 1;
}

}  // namespace gradsync
