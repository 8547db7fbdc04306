// The gradsync command line: one binary, one subcommand per role.
//
//   gradsync launch --workers=N [--servers=K] -- <training flags>
//   gradsync train  <training flags>     (one worker; rank from the
//   environment) gradsync server <flags>              (one parameter server)
//   gradsync compare [--netem=RATE[,LATENCY]] [--workers=N] ...
//   gradsync predict < queries.json       (the α–β cost model)
//   gradsync doctor
//
// `gradsync <command> --help` lists that command's flags.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/malloc_tuning.h"
#include "core/cluster/cluster_env.h"
#include "tools/cluster_flags.h"
#include "tools/commands.h"
#include "tools/ps_flags.h"

namespace {

// The source folders whose flags each command's --help shows.
std::vector<std::string>& HelpFolders() {
  static std::vector<std::string> folders;
  return folders;
}

bool ShowFlagsOf(absl::string_view file) {
  for (const std::string& folder : HelpFolders()) {
    if (absl::StrContains(file, folder)) return true;
  }
  return false;
}

constexpr char kUsage[] =
    "gradsync: compare gradient-synchronization strategies on one model.\n\n"
    "usage:\n"
    "  gradsync launch --workers=N [--servers=K] -- <training flags>\n"
    "  gradsync launch --workers=N [--servers=K] -- python3 train.py ARGS\n"
    "                                      any command as the workers "
    "(python/README.md)\n"
    "  gradsync train <training flags>     one worker (rank from "
    "RANK/WORLD_SIZE,\n"
    "                                      SLURM_PROCID/SLURM_NTASKS or "
    "OMPI_COMM_WORLD_*)\n"
    "  gradsync server <flags>             one parameter server "
    "(GRADSYNC_SERVER_RANK)\n"
    "  gradsync run <training flags>       a worker or a server, as the "
    "environment\n"
    "                                      says (every task of mpirun/srun: "
    "the\n"
    "                                      last GRADSYNC_NUM_SERVERS tasks "
    "serve)\n"
    "  gradsync compare [--netem=100mbit] [--workers=4] [--model=mlp]\n"
    "                                      every strategy on this model and "
    "network:\n"
    "                                      a verdict table, a plot, an answer\n"
    "  gradsync predict < queries.json     the α–β cost model: JSON queries "
    "in,\n"
    "                                      JSON answers out\n"
    "  gradsync simulate --strategy=ring --workers=1024 --link=25gbit,5us\n"
    "      --profile=sim/profiles/resnet50-b128-fp32.json\n"
    "                                      one step of N workers on SimGrid "
    "(sim/)\n"
    "  gradsync doctor                     what this build and machine have\n\n"
    "`gradsync <command> --help` lists the command's flags.";

}  // namespace

int main(int argc, char** argv) {
  gradsync::KeepFreedMemoryForReuse();
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "help") == 0) {
    fprintf(argc < 2 ? stderr : stdout, "%s\n", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // A Python driver with its own flags (bench/compare.py): no Abseil parsing.
  if (command == "compare") return gradsync::RunCompareCommand(argc, argv);
  // A filter of JSON queries, no flags.
  if (command == "predict") return gradsync::RunPredictCommand(argc, argv);
  // The simulator, a program of its own beside this one (sim/).
  if (command == "simulate") return gradsync::RunSimulateCommand(argc, argv);
  if (command == "train" || command == "run") {
    // No "core/": its libraries take values, read from flags in tools/.
    HelpFolders() = {"allreduce/", gradsync::kPsFlagsFile, "tools/train_flags",
                     "tools/cluster_flags"};
  } else if (command == "launch") {
    HelpFolders() = {"tools/launch_command"};
  } else if (command == "server") {
    HelpFolders() = {gradsync::kPsFlagsFile};
  } else if (command == "doctor") {
    HelpFolders() = {"tools/doctor"};
  } else {
    fprintf(stderr, "gradsync: unknown command '%s'\n\n%s\n", command.c_str(),
            kUsage);
    return 2;
  }
  absl::SetProgramUsageMessage(
      absl::StrCat("gradsync ", command, " [flags]",
                   command == "launch" ? " -- <training flags>" : "",
                   "\n(see `gradsync --help` for the commands)"));
  absl::FlagsUsageConfig config;
  config.contains_help_flags = ShowFlagsOf;
  config.contains_helpshort_flags = ShowFlagsOf;
  absl::SetFlagsUsageConfig(config);

  // Parse as if the command were the program: argv[0] followed by the flags.
  std::vector<char*> args = {argv[0]};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  // Before any command runs: the ring and the parameter servers ask for the
  // process's token (core/cluster/job_token.h) deep inside.
  gradsync::SetJobTokenFileFromFlag();
  std::vector<std::string> rest;
  for (size_t i = 1; i < positional.size(); ++i) rest.push_back(positional[i]);

  if (command == "launch") return gradsync::RunLaunchCommand(rest);
  if (!rest.empty()) {
    fprintf(stderr,
            "gradsync %s: unexpected argument '%s' (flags are --name=value)\n",
            command.c_str(), rest.front().c_str());
    return 2;
  }
  if (command == "train") return gradsync::RunTrainCommand();
  if (command == "run") {
    // One command line for every task: the environment says which role
    // (core/cluster/cluster_env.h).
    absl::StatusOr<gradsync::ClusterEnv> env =
        gradsync::ClusterEnvFromEnvironment();
    if (!env.ok()) {
      fprintf(stderr, "gradsync run: %s\n",
              std::string(env.status().message()).c_str());
      return 1;
    }
    return env->role == gradsync::Role::kServer ? gradsync::RunServerCommand()
                                                : gradsync::RunTrainCommand();
  }
  if (command == "server") return gradsync::RunServerCommand();
  return gradsync::RunDoctorCommand();
}
