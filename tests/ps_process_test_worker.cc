// One process of //ps:ps_process_test. With GRADSYNC_ROLE=server it is
// exactly `gradsync server` (RunServerCommand, tools/server_command.cc).
// Otherwise it is a worker that trains nothing: it runs --steps of --sync=ps
// over a fixed layout with small integer gradients and checks every result bit
// for bit against the average (--ps_update=worker) or core's optimizer run on
// it (--ps_update=server).
// Exit code 0 when all checks pass.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/cluster_env.h"
#include "core/cluster/coordinator.h"
#include "core/device/device.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "core/optim/optimizer.h"
#include "ps/ps_sync.h"
#include "tools/cluster_flags.h"
#include "tools/commands.h"
#include "tools/ps_flags.h"

ABSL_FLAG(int, steps, 3, "steps to run");
// --timeout_s (tools/cluster_flags.cc) and --trace (tools/trace_flags.cc)
// are the command line's own, as `gradsync server` reads them.
ABSL_FLAG(int, exit_after_setup, -1,
          "this worker rank exits with code 3 right after Setup (a worker "
          "that disappears)");
// The optimizer of --ps_update=server, as the trainer's flags would give it.
ABSL_FLAG(std::string, optimizer, "sgd", "sgd or adam");
ABSL_FLAG(double, lr, 0.1, "learning rate");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(double, weight_decay, 0.01, "L2 weight decay");
ABSL_FLAG(std::string, lr_scaling, "none", "linear or none");

namespace gradsync {
namespace {

float Gradient(int rank, int step, int64_t i) {
  return static_cast<float>((rank + 2) * (i % 7) - step);
}

// `coordinator_server` belongs to the caller, so that an error is logged
// before the coordinator (worker 0's) goes down and takes the others with it.
absl::Status RunWorker(const ClusterEnv& env,
                       std::unique_ptr<CoordinatorServer>& coordinator_server) {
  ASSIGN_OR_RETURN(const absl::Duration timeout, PeerTimeoutFromFlags());
  CoordinatorClientOptions client_options;
  ASSIGN_OR_RETURN(client_options.security, CoordinatorSecurityFromFlags());
  if (env.rank == 0) {
    ASSIGN_OR_RETURN(
        coordinator_server,
        CoordinatorServer::Start(ApplyBindFlag(env.coordinator_target()),
                                 env.job_id, env.world_size, env.num_servers,
                                 client_options.security));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> coordinator,
                   CoordinatorClient::Connect(
                       env.coordinator_target(), env.job_id, Role::kWorker,
                       env.rank, timeout, client_options));
  SyncContext context;
  context.identity = env;
  context.rendezvous = coordinator.get();
  ASSIGN_OR_RETURN(context.members,
                   coordinator->Join(env.advertise_host, timeout));
  context.timeout = timeout;
  context.optimizer.kind = absl::GetFlag(FLAGS_optimizer);
  ASSIGN_OR_RETURN(
      context.optimizer.lr,
      ScaleLearningRate(static_cast<float>(absl::GetFlag(FLAGS_lr)),
                        absl::GetFlag(FLAGS_lr_scaling), env.world_size));
  context.optimizer.momentum =
      static_cast<float>(absl::GetFlag(FLAGS_momentum));
  context.optimizer.weight_decay =
      static_cast<float>(absl::GetFlag(FLAGS_weight_decay));

  ASSIGN_OR_RETURN(PsSyncOptions options, PsSyncOptionsFromFlags(context));
  ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> sync,
                   CreatePsSync(context, options));
  ASSIGN_OR_RETURN(
      ParamLayout layout,
      ParamLayout::Create({{"w", {30, 11}}, {"b", {7}}, {"s", {1}}}, 512));
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                   CreateDevice(DeviceOptions()));
  const int64_t n = layout.total_numel();
  std::vector<float> params(n), grads(n), reference(n);
  for (int64_t i = 0; i < n; ++i) params[i] = reference[i] = 0.001f * (i % 17);
  RETURN_IF_ERROR(sync->Setup(layout, *device, {grads.data(), params.data()}));
  if (env.rank == absl::GetFlag(FLAGS_exit_after_setup)) {
    GS_LOG(ERROR) << "exiting after setup, as asked";
    std::exit(3);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   CreateOptimizer(options.optimizer));
  RETURN_IF_ERROR(optimizer->Bind(*device, n));

  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    for (int64_t i = 0; i < n; ++i) grads[i] = Gradient(env.rank, step, i);
    for (const Bucket& bucket : layout.buckets())
      sync->BucketReady(bucket.index);
    StepStats stats;
    RETURN_IF_ERROR(sync->Finish(stats));
    std::vector<float> average(n);
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < env.world_size; ++r) sum += Gradient(r, step, i);
      average[i] = sum / static_cast<float>(env.world_size);
    }
    const bool server_mode = sync->UpdatesParameters();
    if (server_mode)
      optimizer->Step(reference.data(), average.data(), options.optimizer.lr);
    const std::vector<float>& expected = server_mode ? reference : average;
    const std::vector<float>& got = server_mode ? params : grads;
    for (int64_t i = 0; i < n; ++i) {
      if (got[i] != expected[i]) {
        return absl::InternalError(absl::StrCat("step ", step, " element ", i,
                                                ": got ", got[i], ", expected ",
                                                expected[i]));
      }
    }
  }
  RETURN_IF_ERROR(sync->Shutdown());
  std::printf("worker %d ok: %s\n", env.rank, sync->SummaryJson().c_str());
  std::fflush(stdout);
  // Worker 0 hosts the coordinator: keep it up until everyone is done.
  return coordinator->Barrier("ps_process_test/done", BarrierGroup::kWorkers,
                              timeout);
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  gradsync::SetJobTokenFileFromFlag();
  absl::StatusOr<gradsync::ClusterEnv> env =
      gradsync::ClusterEnvFromEnvironment();
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", std::string(env.status().message()).c_str());
    return 1;
  }
  if (env->role == gradsync::Role::kServer) return gradsync::RunServerCommand();
  gradsync::SetLogTag(absl::StrCat("worker ", env->rank));
  std::unique_ptr<gradsync::CoordinatorServer> coordinator_server;
  absl::Status status = gradsync::RunWorker(*env, coordinator_server);
  if (!status.ok()) {
    GS_LOG(ERROR) << status.message();
    return 1;
  }
  return 0;
}
