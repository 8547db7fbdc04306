// The subcommands of the gradsync binary. Each runs after the command line has
// been parsed (Abseil flags) and returns the process's exit code.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

// gradsync train: one worker (rank and world from the environment).
int RunTrainCommand();
// gradsync launch --workers=N [--servers=K] -- <training flags>.
// `argv0` is how we were invoked; `training_flags` come after "--".
int RunLaunchCommand(const std::vector<std::string>& training_flags);
// gradsync compare [flags] [-- training flags]: every strategy on this
// model and network (bench/compare.py, exec'd with the raw arguments after
// "compare"; it parses its own flags). Returns only on failure.
int RunCompareCommand(int argc, char** argv);
// gradsync doctor: what this machine and build have.
int RunDoctorCommand();

}  // namespace gradsync
