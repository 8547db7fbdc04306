// gradsync train: one worker process. Reads who it is from the environment,
// hosts the coordinator if it is worker 0 of a multi-process job, joins, and
// runs the trainer under the strategy chosen by --sync.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "allreduce/allreduce_table.h"
#include "core/base/activity_deadline.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/cluster_env.h"
#include "core/cluster/coordinator.h"
#include "core/sync/gradient_sync.h"
#include "core/telemetry/derived_settings.h"
#include "core/optim/optimizer.h"
#include "core/train/trainer.h"
#include "tools/cluster_flags.h"
#include "tools/commands.h"
#include "tools/job_settings.h"
#include "tools/output_paths.h"
#include "tools/ps_flags.h"
#include "tools/train_flags.h"

// Defined by `gradsync launch` (launch_command.cc), in this same binary.
ABSL_DECLARE_FLAG(std::string, netem);

namespace gradsync {
namespace {

// Worker 0 listens on loopback when the job is local and on every interface
// otherwise; other processes reach it at MASTER_ADDR.
std::string CoordinatorBindAddress(const ClusterEnv& env) {
  const bool local =
      env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
  return absl::StrCat(local ? "127.0.0.1" : "0.0.0.0", ":", env.master_port);
}

// The job's shape as this process sees it, and its training flags, travel
// with every Join, so that worker 0's coordinator refuses a member that
// believes in another job or would train another model.
CoordinatorClientOptions ClientOptions(const ClusterEnv& env,
                                       const CoordinatorSecurity& security,
                                       const WorkerSettings& settings) {
  CoordinatorClientOptions options;
  options.security = security;
  options.num_workers = env.world_size;
  options.num_servers = env.num_servers;
  options.shape_source = env.shape;
  options.settings = settings;
  return options;
}

// Loads the data set within `timeout`. A file that blocks (a FIFO, a hung
// network mount) blocks open(2) or read(2), which nothing can interrupt: when
// the deadline passes, the error names the file and the process ends, after
// telling the job so that the others stop too.
absl::StatusOr<DatasetPair> LoadDataWithDeadline(
    const ClusterEnv& env, absl::Duration timeout,
    CoordinatorClient* coordinator) {
  ActivityDeadline deadline(timeout, [&](const std::string& blocked) {
    const absl::Status error = absl::DeadlineExceededError(absl::StrCat(
        "worker ", env.rank, ": loading the data did not finish within ",
        absl::FormatDuration(timeout), " (--timeout_s): still ",
        blocked.empty() ? "loading" : blocked,
        ". Is it a FIFO, or on a mount that does not answer? Pass a "
        "readable regular file, or a larger --timeout_s for slow storage"));
    GS_LOG(ERROR) << error.message();
    if (coordinator != nullptr) coordinator->Leave(error);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  });
  return LoadDatasetFromFlags();
}

// Everything after the coordinator is reached: an error here is reported to
// the job (CoordinatorClient::Leave), so that the others stop at once
// rather than wait out their deadlines on a worker that is gone.
absl::Status TrainInJob(const ClusterEnv& env, const TrainerOptions& options,
                        Device& device, CoordinatorClient* coordinator,
                        SyncContext& context) {
  if (coordinator != nullptr) {
    ASSIGN_OR_RETURN(context.members,
                     coordinator->Join(env.advertise_host, options.timeout));
  }
  // A typo in an output path costs nothing now, and the run's results at
  // its end otherwise: checked after Join, so that a refusal ends the whole
  // job at once naming this worker, and before the data is loaded.
  RETURN_IF_ERROR(Annotate(
      PrepareWorkerOutputs(env.rank, {options.metrics_dir, options.dump_params,
                                      options.trace_path}),
      absl::StrCat("worker ", env.rank)));
  // After Join: a worker that fails while loading ends the job at once.
  ASSIGN_OR_RETURN(DatasetPair data,
                   LoadDataWithDeadline(env, options.timeout, coordinator));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModelFromFlags(data));
  ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> sync,
                   GradientSyncRegistry::Create(options.sync, context));
  ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, env, *model, data,
                                                   device, *sync, coordinator));
  if (env.rank == 0) {
    std::string line = absl::StrFormat("done: %d steps, final loss %.4f",
                                       result.steps, result.final_loss);
    if (result.test_accuracy >= 0) {
      absl::StrAppend(&line, absl::StrFormat(", final test accuracy %.2f%%",
                                             100 * result.test_accuracy));
    }
    if (!result.summary_path.empty())
      absl::StrAppend(&line, "; summary: ", result.summary_path);
    printf("%s\n", line.c_str());
    fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status Train() {
  ASSIGN_OR_RETURN(ClusterEnv env, ClusterEnvFromEnvironment());
  if (env.role != Role::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this process is ", env.Describe(), " (", env.shape,
        "): start parameter servers with `gradsync server`, or every task "
        "with `gradsync run`, which takes the role the environment gives"));
  }
  SetLogTag(absl::StrCat("worker ", env.rank));
  // The launcher ran us inside its emulated network; recording the link in
  // --netem makes the run's manifest (every flag) say so.
  if (const char* netem = std::getenv("GRADSYNC_NETEM"))
    absl::SetFlag(&FLAGS_netem, netem);
  ASSIGN_OR_RETURN(TrainerOptions options, TrainerOptionsFromFlags());
  // A strategy's flag that this --sync does not read is said once and
  // recorded as ignored, so the manifest's echo of it is not taken as applied.
  const StrategyFlagUse use{
      UsesParameterServers(options.sync),
      FindAllReduce(options.sync) != nullptr || options.sync == "hybrid"};
  for (const IgnoredFlag& flag : FlagsIgnoredBy(options.sync, use)) {
    RecordIgnoredFlag(flag.name, absl::StrCat(flag.value, ": ", flag.why));
    if (env.rank == 0) {
      GS_LOG(WARNING) << "--" << flag.name << "=" << flag.value
                      << " is ignored: " << flag.why
                      << " (recorded under ignored_flags in the manifest)";
    }
  }
  // Before any work: a checkpoint that cannot be written, or that would
  // overwrite saved progress, is found now rather than at its first write.
  if (env.rank == 0) {
    int shards = 0;
    if (options.sync == "ps") {
      ASSIGN_OR_RETURN(const int colocated,
                       ColocatedServersFromFlags(env.world_size));
      shards = colocated + env.num_servers;
    }
    RETURN_IF_ERROR(CheckCheckpointPathFromFlags(shards));
    // A reused metrics folder must not show an earlier run's summary
    // beside this run's files: it is written again at the end. (A folder
    // that cannot be one is said as such first.)
    if (!options.metrics_dir.empty()) {
      RETURN_IF_ERROR(CheckOutputFolder("--metrics_dir", options.metrics_dir));
      const std::string summary =
          absl::StrCat(options.metrics_dir, "/summary.json");
      if (std::remove(summary.c_str()) != 0 && errno != ENOENT) {
        return absl::PermissionDeniedError(absl::StrCat(
            "cannot remove the earlier run's ", summary, ": ",
            std::strerror(errno), "; pass another --metrics_dir"));
      }
    }
  }
  ASSIGN_OR_RETURN(
      DeviceOptions device_options,
      DeviceOptionsFromFlags(env.local_rank, env.local_world_size));
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                   CreateDevice(device_options));

  std::unique_ptr<CoordinatorServer> coordinator_server;
  std::unique_ptr<CoordinatorClient> coordinator;
  SyncContext context;
  context.identity = env;
  context.timeout = options.timeout;
  context.optimizer = options.optimizer;
  context.compression = options.compression;
  context.compression_seed = options.seed;
  context.schedule = options.schedule;
  ASSIGN_OR_RETURN(context.optimizer.lr,
                   ScaleLearningRate(options.optimizer.lr, options.lr_scaling,
                                     env.world_size));
  if (env.world_size > 1 || env.num_servers > 0) {
    ASSIGN_OR_RETURN(CoordinatorSecurity security,
                     CoordinatorSecurityFromFlags());
    // After every flag is final (--netem above, derived defaults).
    WorkerSettings settings = WorkerSettingsFromFlags();
    // What a job with parameter servers derives from its link, which each
    // process reads from its own environment: compared at Join too.
    if (UsesParameterServers(options.sync) || env.num_servers > 0) {
      ASSIGN_OR_RETURN(const int colocated,
                       ColocatedServersFromFlags(env.world_size));
      ASSIGN_OR_RETURN(const PsStreamSettings streams,
                       StreamSettingsOfThisProcess(
                           env.world_size, colocated + env.num_servers));
      StateDerivedStreamSettings(streams, &settings);
    }
    if (env.rank == 0) {
      ASSIGN_OR_RETURN(
          coordinator_server,
          CoordinatorServer::Start(ApplyBindFlag(CoordinatorBindAddress(env)),
                                   env.job_id, env.world_size, env.num_servers,
                                   security, env.shape, settings));
    }
    ASSIGN_OR_RETURN(coordinator, CoordinatorClient::Connect(
                                      env.coordinator_target(), env.job_id,
                                      Role::kWorker, env.rank, options.timeout,
                                      ClientOptions(env, security, settings)));
    // Without a launcher's id, worker 0's coordinator named the job.
    context.identity.job_id = coordinator->job_id();
    context.rendezvous = coordinator.get();
  }
  const absl::Status status =
      TrainInJob(env, options, *device, coordinator.get(), context);
  if (!status.ok() && coordinator != nullptr) coordinator->Leave(status);
  return status;
}

}  // namespace

int RunTrainCommand() {
  absl::Status status = Train();
  if (!status.ok()) {
    GS_LOG(ERROR) << status.message();
    return 1;
  }
  return 0;
}

}  // namespace gradsync
