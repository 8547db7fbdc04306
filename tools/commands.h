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
// gradsync predict: α–β queries (JSON) on stdin, answers on stdout, from the
// C++ cost model (tools/predict_command.cc lists the formulas). 0 at the end
// of the input; 2 with one line on stderr for a bad query.
int RunPredictCommand(int argc, char** argv);
// gradsync simulate [flags]: one training step on SimGrid (sim/simulate,
// exec'd with the raw arguments after "simulate"; it parses its own flags).
// Returns only on failure.
int RunSimulateCommand(int argc, char** argv);
// gradsync doctor: what this machine and build have.
int RunDoctorCommand();
// gradsync server: one parameter-server process (tools/server_command.cc).
// Reads the --ps_* flags and the environment (core/cluster/cluster_env.h:
// GRADSYNC_ROLE=server, GRADSYNC_SERVER_RANK, GRADSYNC_NUM_SERVERS,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GRADSYNC_JOB_ID), serves its shard on
// a free port, joins the coordinator with that address, and serves until
// every worker has sent Shutdown; prints its summary as one JSON line on
// stdout at exit. Returns 0 when every worker said the job was over; 1 with
// an error naming the missing workers when they went away (no call for
// --ps_idle_timeout_s), or when start-up failed.
int RunServerCommand();

}  // namespace gradsync
