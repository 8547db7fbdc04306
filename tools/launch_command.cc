// gradsync launch: starts a whole job on this machine, like torchrun — N
// worker processes (`gradsync train`) and K parameter servers (`gradsync
// server`) with the environment each needs, per-process logs under the run
// folder, rank-prefixed console lines, and the first failure stopping all.
// With --nnodes=M it starts this node's share of a job of M nodes, one
// launcher per node (torchrun's --nnodes --node_rank --master_addr
// --master_port): node i runs workers i*n..i*n+n-1 and servers
// i*k..i*k+k-1; node 0 runs worker 0, which hosts the coordinator, and
// gathers the summary. A failure on another node reaches this one through
// the coordinator (every process hears of a lost member).
//
// `gradsync launch ... -- python3 train.py ARGS`: when the first word after
// "--" is not a flag, it is the workers' command (any program, typically a
// PyTorch one using gradsync.torch); servers are still `gradsync server`.
// torch's c10d store then keeps MASTER_PORT and gradsync's coordinator moves
// to GRADSYNC_COORDINATOR_PORT (python/job_connection.h). `--trace=PATH`
// and the strategies' flags (--ps_*, --ring_*, ...) before "--" reach the
// workers as GRADSYNC_TRACE and GRADSYNC_FLAGS and the servers on their
// command line (the program's own arguments are its own).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <system_error>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/files.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_id.h"
#include "core/cluster/job_token.h"
#include "core/cluster/listen_port.h"
#include "core/cluster/local_address.h"
#include "core/launch/launcher.h"
#include "core/launch/netem.h"
#include "core/launch/process_budget.h"
#include "core/optim/optimizer.h"
#include "core/sync/gradient_sync.h"
#include "core/telemetry/manifest.h"
#include "core/telemetry/metrics.h"
#include "core/train/straggler.h"
#include "tools/commands.h"
#include "tools/output_paths.h"
#include "tools/ps_flags.h"
#include "tools/trace_flags.h"
#include "tools/train_flags.h"

ABSL_FLAG(int, workers, 1, "number of worker processes (on this node)");
ABSL_FLAG(int, servers, 0,
          "number of parameter-server processes (--sync=ps; on this node)");
ABSL_FLAG(int, nnodes, 1,
          "nodes of the job, one `gradsync launch` on each, every one with "
          "the same --workers and --servers");
ABSL_FLAG(int, node_rank, 0,
          "this node's index, 0..nnodes-1; node 0 runs "
          "worker 0, which hosts the coordinator");
ABSL_FLAG(std::string, master_addr, "",
          "with --nnodes > 1: node 0's address as the other nodes reach it "
          "(the coordinator listens there on --master_port)");
ABSL_FLAG(std::string, advertise_host, "",
          "with --nnodes > 1: this node's address as the other nodes reach "
          "it; default: the local address of the route to --master_addr");
ABSL_FLAG(std::string, run_dir, "",
          "folder for logs and metrics; default runs/<job id>");
ABSL_FLAG(int, master_port, 0,
          "coordinator port (worker 0 hosts it); 0 picks a free one (one node "
          "only)");
ABSL_FLAG(double, job_deadline_s, 0,
          "stop the whole job after this many seconds; 0 = no limit");
ABSL_FLAG(std::string, job_id, "",
          "job id; default a fresh random one, or with --nnodes > 1 one made "
          "of --master_addr and --master_port (the same on every node)");
ABSL_FLAG(int, max_processes, 0,
          "the most worker and server processes this launcher may start; 0: "
          "derived from this machine's cores (16 a core) and available "
          "memory (each worker holds its own copy of the data set)");
ABSL_FLAG(
    std::string, netem, "",
    "emulate a cluster network: RATE[,LATENCY][,buffer=BYTES]"
    "[,rto_min=DURATION][,cc=NAME][,ecn] (like 1gbit,200us or "
    "100mbit,buffer=1mb,rto_min=5ms) for every process's own full-duplex "
    "link; each worker and server runs in its own network namespace behind "
    "one switch (a bridge; 1 MiB per port by default, core/launch/README.md), "
    "addresses in 10.213.0.0/16, removed when the job ends. Needs root and "
    "iproute2");
ABSL_FLAG(int, ranks_per_host, 1,
          "with --netem: workers share an emulated host (namespace and link) "
          "this many at a time (workers 0..R-1 on the first host, ...), each "
          "server still on its own; they get LOCAL_RANK/LOCAL_WORLD_SIZE of "
          "that host, so --sync=hierarchical groups them as one node");

// Training flags (tools/train_flags.cc), for the memory a worker needs.
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(int64_t, synthetic_size);
ABSL_DECLARE_FLAG(std::string, layers);

namespace gradsync {
namespace {

// While the emulated network exists, SIGINT/SIGTERM must not kill us before
// the teardown: during set-up they are only recorded here, and
// RunProcessGroup installs its own handlers (and restores these) while the
// job runs.
volatile sig_atomic_t g_stop_requested = 0;

void RecordStop(int) { g_stop_requested = 1; }

// The strategies' flags (tools/ps_flags.cc, allreduce/) given to the launcher
// before "--" with a value other than their default, as "--name=value": with
// a worker command, whose arguments are its own, they are how the workers
// (GRADSYNC_FLAGS, read by gradsync.torch) and the servers (their command
// line) get them.
std::vector<std::string> StrategyFlagsGivenToLauncher() {
  std::vector<std::string> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    // (Debian's Abseil keeps IsSpecifiedOnCommandLine private: a value other
    // than the default is what was given.)
    if (flag->CurrentValue() == flag->DefaultValue() ||
        !(absl::StrContains(file, kPsFlagsFile) ||
          absl::StrContains(file, "allreduce/"))) {
      continue;
    }
    flags.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
  }
  std::sort(flags.begin(), flags.end());
  return flags;
}

bool HasFlag(const std::vector<std::string>& flags, absl::string_view name) {
  for (const std::string& flag : flags) {
    if (absl::StartsWith(flag, absl::StrCat("--", name, "=")) ||
        flag == absl::StrCat("--", name)) {
      return true;
    }
  }
  return false;
}

// Where this launcher's processes sit in the job: one node of `nnodes`.
struct NodePlacement {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string advertise_host = "127.0.0.1";
};

absl::StatusOr<NodePlacement> PlaceNode() {
  NodePlacement node;
  node.nnodes = absl::GetFlag(FLAGS_nnodes);
  node.node_rank = absl::GetFlag(FLAGS_node_rank);
  if (node.nnodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes=", node.nnodes, " must be at least 1"));
  }
  if (node.node_rank < 0 || node.node_rank >= node.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_rank=", node.node_rank, " is outside 0..",
                     node.nnodes - 1, " (--nnodes=", node.nnodes, ")"));
  }
  const std::string master = absl::GetFlag(FLAGS_master_addr);
  if (node.nnodes == 1) {
    if (!master.empty() && master != "127.0.0.1" && master != "localhost") {
      return absl::InvalidArgumentError(
          "--master_addr is for a job of several nodes (--nnodes > 1); one "
          "node's job runs on 127.0.0.1");
    }
    return node;
  }
  if (master.empty() || absl::GetFlag(FLAGS_master_port) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", node.nnodes,
        " needs --master_addr and --master_port: node 0's address and the "
        "coordinator's port, the same on every node"));
  }
  if (!absl::GetFlag(FLAGS_netem).empty()) {
    return absl::InvalidArgumentError(
        "--netem emulates a cluster on one machine; it does not combine with "
        "--nnodes (run each launcher in a namespace of your own instead)");
  }
  node.master_addr = master;
  node.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  if (node.advertise_host.empty()) {
    ASSIGN_OR_RETURN(
        node.advertise_host,
        LocalAddressToward(master, absl::GetFlag(FLAGS_master_port)));
  }
  return node;
}

// --workers and --servers, checked against a launcher's WORLD_SIZE around us.
absl::Status CheckJobShape(int workers, int servers, int nnodes) {
  if (workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers=", workers, " must be at least 1"));
  }
  if (servers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--servers=", servers, " must be >= 0"));
  }
  // A launcher inside another launcher's job would silently disagree on the
  // world.
  if (const char* world = std::getenv("WORLD_SIZE")) {
    int env_world = 0;
    if (absl::SimpleAtoi(world, &env_world) && env_world != workers * nnodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--workers=", workers,
          nnodes > 1 ? absl::StrCat(" on each of ", nnodes, " nodes")
                     : std::string(),
          " but the environment says WORLD_SIZE=", world,
          "; unset WORLD_SIZE (and RANK) or make them agree"));
    }
  }
  return absl::OkStatus();
}

// About what one worker holds: its float32 copy of the data set (train and
// test) and a process's own base (gRPC, threads, the model). An estimate for
// the bound on processes, not an accounting.
int64_t EstimatedWorkerBytes() {
  constexpr int64_t kProcessBase = int64_t{64} << 20;
  const std::string data = absl::GetFlag(FLAGS_data);
  int64_t samples = 70000, features = 28 * 28;  // Fashion-MNIST
  if (data == "cifar10") {
    samples = 60000;
    features = 3 * 32 * 32;
  } else if (data == "synthetic") {
    samples = absl::GetFlag(FLAGS_synthetic_size);
    samples += samples / 4;  // its test set
    const std::string layers = absl::GetFlag(FLAGS_layers);
    int64_t first = 0;
    if (absl::SimpleAtoi(layers.substr(0, layers.find(',')), &first) &&
        first > 0) {
      features = first;
    }
  }
  return kProcessBase + samples * features * static_cast<int64_t>(sizeof(float));
}

// Removes <folder>/summary.json of an earlier run, so that a folder shows a
// summary only once this run has written its own.
absl::Status RemoveEarlierSummary(const std::string& folder) {
  const std::string path = absl::StrCat(folder, "/summary.json");
  std::error_code error;
  std::filesystem::remove(path, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot remove the earlier run's ", path, ": ", error.message(),
        "; pass another --run_dir"));
  }
  return absl::OkStatus();
}

// Checks the training flags once here, so a typo gives one message instead
// of one per process (absl exits on an unknown flag). Parsing them sets this
// process's flags, which is harmless.
void CheckTrainingFlags(const std::vector<std::string>& training_flags) {
  std::vector<std::string> check_args = {"gradsync"};
  check_args.insert(check_args.end(), training_flags.begin(),
                    training_flags.end());
  std::vector<char*> check_argv;
  for (std::string& arg : check_args) check_argv.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(check_argv.size()),
                         check_argv.data());
}

// What every process of the job shares.
struct JobPlan {
  std::string self;  // this executable, which every process runs
  std::string job_id;
  std::string run_dir;
  int port = 0;  // the coordinator's
  std::string job_token;
  int workers = 0;  // on this node
  int servers = 0;  // on this node
  NodePlacement node;
  // The workers' command (resolved on PATH), or empty for `gradsync train`;
  // with a command, the coordinator's port, MASTER_PORT being torch's.
  std::vector<std::string> command;
  int coordinator_port = 0;
  // With a command: `gradsync launch --trace=PATH` (the workers' flags are
  // the program's own), passed to the workers as GRADSYNC_TRACE and to the
  // servers as --trace; and the strategies' flags given to the launcher.
  TraceSettings trace;
  std::vector<std::string> strategy_flags;
};

// A worker command's program as execve wants it: a path, or the first
// executable of that name on PATH.
absl::StatusOr<std::string> ResolveOnPath(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  for (absl::string_view folder :
       absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(folder, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(
      "the workers' command '", program,
      "' is not an executable on PATH; give its path (/usr/bin/python3)"));
}

// After "--": training flags for `gradsync train`, or a command.
bool IsWorkerCommand(const std::vector<std::string>& after_dashes) {
  return !after_dashes.empty() && !absl::StartsWith(after_dashes[0], "-");
}

absl::StatusOr<JobPlan> PlanJob(int workers, int servers, NodePlacement node,
                                std::vector<std::string> command) {
  JobPlan plan;
  plan.command = std::move(command);
  if (!plan.command.empty()) {
    ASSIGN_OR_RETURN(plan.command[0], ResolveOnPath(plan.command[0]));
  }
  plan.workers = workers;
  plan.servers = servers;
  plan.node = std::move(node);
  plan.self = ThisExecutable();
  if (plan.self.empty())
    return absl::InternalError(
        "cannot find our own executable (/proc/self/exe)");
  plan.job_id = absl::GetFlag(FLAGS_job_id);
  if (plan.job_id.empty() && plan.node.nnodes > 1) {
    // Every node must name the same job without talking first.
    plan.job_id = absl::StrCat("job-", plan.node.master_addr, "-",
                               absl::GetFlag(FLAGS_master_port));
  }
  if (plan.job_id.empty()) plan.job_id = NewJobId();
  plan.run_dir = absl::GetFlag(FLAGS_run_dir);
  if (plan.run_dir.empty()) plan.run_dir = absl::StrCat("runs/", plan.job_id);
  if (std::error_code error;
      !std::filesystem::create_directories(plan.run_dir + "/logs", error) &&
      error) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the run folder ", plan.run_dir,
        "/logs: ", error.message(), "; pass a writable --run_dir"));
  }
  plan.port = absl::GetFlag(FLAGS_master_port);
  if (plan.port == 0) {
    ASSIGN_OR_RETURN(plan.port, PickFreePort());
  } else if (plan.node.node_rank == 0) {
    // Before any process starts: a port another job holds would otherwise
    // be found by worker 0 only, while the others knock on that job's door.
    RETURN_IF_ERROR(
        CheckPortFree(absl::StrCat(plan.node.nnodes > 1 ? "0.0.0.0" : "127.0.0.1",
                                   ":", plan.port)));
  }
  if (!plan.command.empty()) {
    // Nodes agree on MASTER_PORT + 1 without talking; one node picks.
    plan.coordinator_port = plan.port + 1;
    if (plan.node.nnodes == 1) {
      ASSIGN_OR_RETURN(plan.coordinator_port, PickFreePort());
    }
  }
  // Only this job's processes get in (core/cluster/job_token.h): a token from
  // --job_token_file or our environment is passed on, otherwise a job of one
  // node gets a fresh one. The nodes of a larger job must share one.
  if (const std::string& given = JobTokenOfThisProcess(); !given.empty()) {
    plan.job_token = given;
  } else if (plan.node.nnodes > 1) {
    GS_LOG(WARNING) << "no job token (--job_token_file or " << kJobTokenEnv
                    << "): any process that reaches the coordinator may join "
                       "this job; give every node the same token";
  } else {
    ASSIGN_OR_RETURN(plan.job_token, NewJobToken());
  }
  return plan;
}

// Where a worker command's process records that it called
// gradsync.torch.connect() (python/job_connection.cc): how the launcher
// tells a program that ended after training from one that never joined.
std::string ConnectRecordPath(const JobPlan& plan, int rank) {
  return absl::StrCat(plan.run_dir, "/logs/worker", rank, ".connected");
}

bool FileExists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

// For a worker command: why the clean exit of the process at `index` (the
// specs' order: this node's workers, then its servers) fails the job, or
// "". A worker that ends without having called connect() can never join,
// so the job's servers, or its workers that did join, would wait for it
// until their deadline and then blame the coordinator's address or the
// peer. A job in which no worker connects and no server waits is a program
// that does not use gradsync (torch's own DDP under this launcher): fine.
std::string WhyWorkerCommandExitFails(const JobPlan& plan, int index) {
  if (plan.command.empty() || index >= plan.workers) return "";
  const int first = plan.node.node_rank * plan.workers;
  const int rank = first + index;
  if (FileExists(ConnectRecordPath(plan, rank))) return "";
  std::vector<std::string> joined;
  for (int r = first; r < first + plan.workers; ++r) {
    if (r != rank && FileExists(ConnectRecordPath(plan, r))) {
      joined.push_back(absl::StrCat(r));
    }
  }
  const int servers = plan.servers * plan.node.nnodes;
  if (servers == 0 && joined.empty()) return "";
  const std::string waiting =
      servers > 0
          ? absl::StrCat("the job's ", servers,
                         " parameter server(s) wait for every worker")
          : absl::StrCat("worker(s) ", absl::StrJoin(joined, ", "),
                         " joined the job and wait for it");
  return absl::StrCat(
      "worker ", rank,
      " exited with code 0 without calling gradsync.torch.connect(), while ",
      waiting,
      ": stopping the job rather than let them wait out their timeout; call "
      "connect() in every worker's program");
}

// One process per worker, then one per server, on this machine.
std::vector<ProcessSpec> ProcessSpecs(const JobPlan& plan,
                                      const std::vector<std::string>& flags) {
  const int nnodes = plan.node.nnodes;
  std::vector<std::pair<std::string, std::string>> common = {
      {"WORLD_SIZE", absl::StrCat(plan.workers * nnodes)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(plan.workers + plan.servers)},
      {"MASTER_ADDR", plan.node.master_addr},
      {"MASTER_PORT", absl::StrCat(plan.port)},
      {"GRADSYNC_JOB_ID", plan.job_id},
      {kJobTokenEnv, plan.job_token},
      {"GRADSYNC_NUM_SERVERS", absl::StrCat(plan.servers * nnodes)},
      {"GRADSYNC_LAUNCHER", "1"},
      {"GRADSYNC_GIT_COMMIT", GitCommit()},
  };
  if (nnodes > 1) {
    common.push_back({"GRADSYNC_ADVERTISE_HOST", plan.node.advertise_host});
  }
  std::vector<ProcessSpec> specs;
  const int first_worker = plan.node.node_rank * plan.workers;
  const int first_server = plan.node.node_rank * plan.servers;
  for (int local = 0; local < plan.workers; ++local) {
    const int r = first_worker + local;
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", r);
    spec.argv = {plan.self, "train"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.env = common;
    if (!plan.command.empty()) {
      spec.argv = plan.command;
      spec.env.push_back(
          {"GRADSYNC_COORDINATOR_PORT", absl::StrCat(plan.coordinator_port)});
      spec.env.push_back({"GRADSYNC_METRICS_DIR", plan.run_dir});
      if (!plan.trace.path.empty()) {
        spec.env.push_back({"GRADSYNC_TRACE", plan.trace.path});
        spec.env.push_back(
            {"GRADSYNC_TRACE_STEPS", absl::StrCat(plan.trace.steps)});
      }
      if (!plan.strategy_flags.empty()) {
        // After the ones already in our environment, so the launcher's win
        // (the last value of a flag is the one applied).
        const char* given = std::getenv("GRADSYNC_FLAGS");
        std::string all = given != nullptr ? given : "";
        for (const std::string& flag : plan.strategy_flags)
          absl::StrAppend(&all, all.empty() ? "" : " ", flag);
        spec.env.push_back({"GRADSYNC_FLAGS", all});
      }
    }
    if (!plan.command.empty()) {
      spec.env.push_back(
          {"GRADSYNC_CONNECT_RECORD", ConnectRecordPath(plan, r)});
    }
    spec.env.push_back({"RANK", absl::StrCat(r)});
    spec.env.push_back({"LOCAL_RANK", absl::StrCat(local)});
    spec.env.push_back({"GRADSYNC_ROLE", "worker"});
    // No NCCL_HOSTID: it would make every rank its own "host" and turn
    // NCCL's NVLink, P2P and shared-memory transports off. --sync=nccl takes
    // one GPU per rank instead (allreduce/nccl/nccl_sync.cc refuses more ranks).
    spec.log_path = absl::StrCat(plan.run_dir, "/logs/worker", r, ".log");
    specs.push_back(std::move(spec));
  }
  for (int local = 0; local < plan.servers; ++local) {
    const int k = first_server + local;
    ProcessSpec spec;
    spec.name = absl::StrCat("server ", k);
    spec.argv = {plan.self, "server"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.env = common;
    if (!plan.command.empty()) {
      spec.argv = {plan.self, "server",
                   absl::StrCat("--metrics_dir=", plan.run_dir)};
      if (!plan.trace.path.empty()) {
        spec.argv.push_back(absl::StrCat("--trace=", plan.trace.path));
        spec.argv.push_back(absl::StrCat("--trace_steps=", plan.trace.steps));
      }
      spec.argv.insert(spec.argv.end(), plan.strategy_flags.begin(),
                       plan.strategy_flags.end());
      for (auto& [name, value] : spec.env) {
        if (name == "MASTER_PORT") value = absl::StrCat(plan.coordinator_port);
      }
    }
    // No RANK: torchrun's variables describe the workers.
    spec.env.push_back({"LOCAL_RANK", absl::StrCat(plan.workers + local)});
    spec.env.push_back({"GRADSYNC_ROLE", "server"});
    spec.env.push_back({"GRADSYNC_SERVER_RANK", absl::StrCat(k)});
    spec.log_path = absl::StrCat(plan.run_dir, "/logs/server", k, ".log");
    specs.push_back(std::move(spec));
  }
  return specs;
}

// Builds the emulated network of --netem (one namespace per process), writes
// <run_dir>/network.txt and moves every process into its namespace, worker
// 0's address becoming MASTER_ADDR. SIGINT/SIGTERM are only recorded from
// here on, so that the caller can tear the network down.
absl::StatusOr<std::unique_ptr<EmulatedNetwork>> PlaceInEmulatedNetwork(
    const std::string& netem, const JobPlan& plan,
    std::vector<ProcessSpec>& specs) {
  ASSIGN_OR_RETURN(LinkSpec link, ParseLinkSpec(netem));
  struct sigaction action = {};
  action.sa_handler = RecordStop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // Workers share hosts R at a time; servers keep one each.
  const int ranks_per_host = std::max(1, absl::GetFlag(FLAGS_ranks_per_host));
  const int worker_hosts = (plan.workers + ranks_per_host - 1) / ranks_per_host;
  auto host_of = [&](size_t i) {
    const int process = static_cast<int>(i);
    return process < plan.workers ? process / ranks_per_host
                                  : worker_hosts + process - plan.workers;
  };
  EmulatedNetworkOptions network_options;
  network_options.nodes = worker_hosts + plan.servers;
  network_options.link = link;
  ASSIGN_OR_RETURN(std::unique_ptr<EmulatedNetwork> network,
                   EmulatedNetwork::Create(network_options));
  GS_LOG(INFO) << "emulated network: " << network->Describe();
  // Where each process runs, for whoever inspects (ip netns exec <ns> ss -ti)
  // or disturbs (a cut link, a changed qdisc) the network while the job runs.
  std::string map = absl::StrCat("# emulated network of job ", plan.job_id,
                                 ": ", network->Describe(), "\n", "bridge ",
                                 network->BridgeNamespace(), "\n");
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StrAppend(
        &map, specs[i].name, " ", network->NodeNamespace(host_of(i)), " ",
        network->NodeAddress(host_of(i)), " bridge-port p", host_of(i), "\n");
  }
  if (absl::Status written =
          WriteFileAtomically(plan.run_dir + "/network.txt", map);
      !written.ok()) {
    RETURN_IF_ERROR(network->Destroy());
    return written;
  }
  // Process i (workers, then servers) runs in namespace i and is reached
  // at its address there; worker 0 hosts the coordinator.
  const std::string master_addr = network->NodeAddress(host_of(0));
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::string> argv = network->ExecPrefix(host_of(i));
    argv.insert(argv.end(), specs[i].argv.begin(), specs[i].argv.end());
    specs[i].argv = std::move(argv);
    for (auto& [name, value] : specs[i].env) {
      if (name == "MASTER_ADDR") value = master_addr;
    }
    specs[i].env.push_back(
        {"GRADSYNC_ADVERTISE_HOST", network->NodeAddress(host_of(i))});
    if (ranks_per_host > 1 && static_cast<int>(i) < plan.workers) {
      const int on_host =
          std::min(ranks_per_host, plan.workers - host_of(i) * ranks_per_host);
      for (auto& [name, value] : specs[i].env) {
        if (name == "LOCAL_RANK") value = absl::StrCat(i % ranks_per_host);
        if (name == "LOCAL_WORLD_SIZE") value = absl::StrCat(on_host);
      }
    }
    specs[i].env.push_back({"GRADSYNC_NETEM", netem});
    // Gloo (a PyTorch worker's DDP process group) binds the address its
    // host name resolves to, loopback inside a namespace: name the link.
    specs[i].env.push_back({"GLOO_SOCKET_IFNAME", "eth0"});
    // Without sch_netem the latency of --netem is not there: the PS's
    // window rule (tools/emulated_link.h) must not size windows for it.
    if (!network->latency_emulated()) {
      specs[i].env.push_back({"GRADSYNC_NETEM_LATENCY_EMULATED", "0"});
    }
  }
  return network;
}

absl::StatusOr<int> Launch(const std::vector<std::string>& training_flags) {
  SetLogTag("launch");
  const int workers = absl::GetFlag(FLAGS_workers);
  const int servers = absl::GetFlag(FLAGS_servers);
  ASSIGN_OR_RETURN(NodePlacement node, PlaceNode());
  RETURN_IF_ERROR(CheckJobShape(workers, servers, node.nnodes));
  // A worker command (a Python program) reads its own arguments; gradsync's
  // training flags are checked only when the workers are gradsync's.
  const bool command = IsWorkerCommand(training_flags);
  // The launcher's own flags first, then the workers'.
  if (const double deadline = absl::GetFlag(FLAGS_job_deadline_s);
      !(deadline >= 0) || !std::isfinite(deadline)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--job_deadline_s=", deadline,
        " is not a duration: give seconds > 0, or 0 for no limit"));
  }
  if (const int per_host = absl::GetFlag(FLAGS_ranks_per_host); per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks_per_host=", per_host,
                     " must be at least 1 (workers per emulated host)"));
  }
  // gradsync's workers take --trace after "--" (each writes its own file);
  // given to the launcher it would be read by no one.
  if (!command && !absl::GetFlag(FLAGS_trace).empty() &&
      !HasFlag(training_flags, "trace")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--trace=", absl::GetFlag(FLAGS_trace),
        " before \"--\" is for a worker command (a Python program); "
        "gradsync's workers take it after \"--\": gradsync launch ... -- "
        "--trace=",
        absl::GetFlag(FLAGS_trace), " ..."));
  }
  if (const int port = absl::GetFlag(FLAGS_master_port);
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--master_port=", port,
        " is not a TCP port: pass 1..65535, or 0 to pick a free one"));
  }
  if (!command) {
    CheckTrainingFlags(training_flags);
    // The values too, once here: a mistake gives one message now rather
    // than one per worker after each has loaded the data.
    ASSIGN_OR_RETURN(const TrainerOptions trainer, TrainerOptionsFromFlags());
    RETURN_IF_ERROR(ScaleLearningRate(trainer.optimizer.lr,
                                      trainer.lr_scaling, workers * node.nnodes)
                        .status());
    // What this node's workers will write (each checks again, after Join):
    // one message now instead of one per worker. The run folder, the
    // default --metrics_dir, is the launcher's own.
    for (int r = node.node_rank * workers; r < (node.node_rank + 1) * workers;
         ++r) {
      RETURN_IF_ERROR(CheckWorkerOutputs(
          r, {trainer.metrics_dir, trainer.dump_params, trainer.trace_path}));
    }
    if (servers > 0 && !UsesParameterServers(absl::GetFlag(FLAGS_sync))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--servers=", servers, " starts parameter servers, but --sync=",
          absl::GetFlag(FLAGS_sync),
          " does not use them: drop --servers, or pass --sync=ps (or "
          "--sync=hybrid) after --"));
    }
    if (absl::GetFlag(FLAGS_sync) == "hybrid" && servers == 0) {
      ASSIGN_OR_RETURN(const int colocated,
                       ColocatedServersFromFlags(workers * node.nnodes));
      if (colocated == 0) {
        return absl::InvalidArgumentError(
            "--sync=hybrid sends the row-sparse tensors (embedding tables) "
            "to parameter servers, but this job has none: pass "
            "--servers=K to gradsync launch, or --ps_colocate (or "
            "--ps_colocated_servers=k) after --");
      }
    }
  }
  // Before anything forks: a typo of --workers=100000 is refused here.
  RETURN_IF_ERROR(CheckLocalProcesses(
      workers, servers, EstimatedWorkerBytes(), int64_t{64} << 20,
      ThisMachine(), absl::GetFlag(FLAGS_max_processes)));
  // Worker 0's checkpoint, checked once here rather than after start-up.
  if (node.node_rank == 0 && !command) {
    int shards = 0;
    if (absl::GetFlag(FLAGS_sync) == "ps") {
      ASSIGN_OR_RETURN(const int colocated,
                       ColocatedServersFromFlags(workers * node.nnodes));
      shards = colocated + servers * node.nnodes;
    }
    RETURN_IF_ERROR(CheckCheckpointPathFromFlags(shards));
  }
  // Where the parameter servers run, checked once here rather than by
  // every worker and server after the job has started.
  if (!command && UsesParameterServers(absl::GetFlag(FLAGS_sync))) {
    RETURN_IF_ERROR(
        CheckServerPlacement(workers * node.nnodes, servers * node.nnodes));
  }
  // What each worker would refuse only after it has joined and loaded its
  // data, checked last here so that the checks above keep their words.
  if (!command) {
    ASSIGN_OR_RETURN(const TrainerOptions trainer, TrainerOptionsFromFlags());
    // The strategy's own flags (--ps_*, --allreduce_*), which each worker's
    // strategy would otherwise refuse only after Join and the data.
    SyncContext job;
    job.identity.world_size = workers * node.nnodes;
    job.identity.num_servers = servers * node.nnodes;
    job.identity.local_world_size = workers + servers;
    job.optimizer = trainer.optimizer;
    job.compression = trainer.compression;
    job.compression_seed = trainer.seed;
    job.schedule = trainer.schedule;
    job.timeout = trainer.timeout;
    RETURN_IF_ERROR(GradientSyncRegistry::CheckOptions(trainer.sync, job));
    // The device each worker would create, the data each would load, the
    // stragglers it would play and its parameter checks.
    RETURN_IF_ERROR(DeviceOptionsFromFlags(0, workers).status());
    RETURN_IF_ERROR(CheckDataFlags());
    RETURN_IF_ERROR(CheckSlowness(trainer.slowness, workers * node.nnodes));
    if (trainer.check_params_every > 0 && UsesParameterServers(trainer.sync)) {
      ASSIGN_OR_RETURN(const ps::UpdateMode update, UpdateModeFromFlags());
      ASSIGN_OR_RETURN(const ConsistencyOptions consistency,
                       ConsistencyFromFlags(update));
      if (consistency.mode != ps::CONSISTENCY_BSP) {
        // The trainer's own words (core/train/trainer.cc).
        return absl::InvalidArgumentError(
            "--check_params_every compares the workers' parameters after "
            "steps, which --ps_consistency=ssp|asp lets differ; leave it out");
      }
    }
  }
  ASSIGN_OR_RETURN(JobPlan plan, PlanJob(workers, servers, std::move(node),
                                         command ? training_flags
                                                 : std::vector<std::string>()));
  if (command) {
    ASSIGN_OR_RETURN(plan.trace, TraceSettingsFromFlags());
    plan.strategy_flags = StrategyFlagsGivenToLauncher();
  }

  std::vector<std::string> flags = training_flags;
  if (!command && !HasFlag(flags, "metrics_dir"))
    flags.push_back(absl::StrCat("--metrics_dir=", plan.run_dir));
  // Every process of a one-node job is on this machine: its parameter
  // servers need no address another host can reach.
  if (plan.node.nnodes == 1 && absl::GetFlag(FLAGS_netem).empty() &&
      !HasFlag(flags, "ps_bind")) {
    flags.push_back("--ps_bind=127.0.0.1:0");
  }
  // A reused run folder must not show an earlier run's summary beside this
  // run's logs (worker 0 writes it again at its end).
  RETURN_IF_ERROR(RemoveEarlierSummary(plan.run_dir));
  std::vector<ProcessSpec> specs = ProcessSpecs(plan, flags);
  std::string master_addr = plan.node.master_addr;
  std::unique_ptr<EmulatedNetwork> network;
  if (absl::GetFlag(FLAGS_ranks_per_host) != 1 &&
      absl::GetFlag(FLAGS_netem).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ranks_per_host=", absl::GetFlag(FLAGS_ranks_per_host),
        " places workers on emulated hosts: it needs --netem=RATE[,...]"));
  }
  if (const std::string netem = absl::GetFlag(FLAGS_netem); !netem.empty()) {
    ASSIGN_OR_RETURN(network, PlaceInEmulatedNetwork(netem, plan, specs));
    master_addr = network->NodeAddress(0);
    if (g_stop_requested) {
      RETURN_IF_ERROR(network->Destroy());
      return 130;
    }
  }
  if (plan.node.nnodes > 1) {
    GS_LOG(INFO) << "job " << plan.job_id << ": node " << plan.node.node_rank
                 << " of " << plan.node.nnodes << " ("
                 << plan.node.advertise_host << "), workers "
                 << plan.node.node_rank * workers << ".."
                 << (plan.node.node_rank + 1) * workers - 1 << " of "
                 << workers * plan.node.nnodes << ", " << servers << " of "
                 << servers * plan.node.nnodes << " server(s), coordinator on "
                 << master_addr << ":" << plan.port << ", logs in "
                 << plan.run_dir << "/logs";
  } else {
    GS_LOG(INFO) << "job " << plan.job_id << ": " << workers << " worker(s), "
                 << servers << " server(s), coordinator on " << master_addr
                 << ":" << plan.port << ", logs in " << plan.run_dir << "/logs";
  }
  LaunchOptions options;
  std::vector<int> exited_unjoined;  // indices, for on_tick
  if (command) {
    // A reused run folder's records are an earlier job's.
    for (int r = plan.node.node_rank * workers;
         r < (plan.node.node_rank + 1) * workers; ++r) {
      unlink(ConnectRecordPath(plan, r).c_str());
    }
    // A worker that ended without connect() before any other joined is
    // no failure yet; it is once another joins and waits for it.
    options.on_clean_exit = [&plan, &exited_unjoined](int index) {
      std::string why = WhyWorkerCommandExitFails(plan, index);
      if (why.empty() && index < plan.workers &&
          !FileExists(ConnectRecordPath(
              plan, plan.node.node_rank * plan.workers + index))) {
        exited_unjoined.push_back(index);
      }
      return why;
    };
    options.on_tick = [&plan, &exited_unjoined]() {
      for (int index : exited_unjoined) {
        std::string why = WhyWorkerCommandExitFails(plan, index);
        if (!why.empty()) return why;
      }
      return std::string();
    };
  }
  const double deadline = absl::GetFlag(FLAGS_job_deadline_s);
  if (deadline > 0) options.deadline = absl::Seconds(deadline);
  absl::StatusOr<LaunchResult> launched = RunProcessGroup(specs, options);
  if (network != nullptr) {
    // The queues' drops (incast at a switch port) for bench/scaling.py;
    // they go with the namespaces.
    absl::StatusOr<std::string> counters = network->QueueCountersJson();
    const absl::Status kept =
        counters.ok() ? WriteFileAtomically(
                            plan.run_dir + "/network_counters.json", *counters)
                      : counters.status();
    if (!kept.ok()) {
      GS_LOG(WARNING) << "the emulated network's queue counters: "
                      << kept.message();
    }
    // Every process has ended (RunProcessGroup waits for all), so the
    // namespaces are empty and go at once.
    const absl::Status removed = network->Destroy();
    if (!removed.ok()) {
      GS_LOG(ERROR) << "removing the emulated network: " << removed.message();
    } else {
      GS_LOG(INFO) << "emulated network " << network->prefix() << " removed";
    }
  }
  if (!launched.ok()) return launched.status();
  if (launched->exit_code != 0) {
    GS_LOG(ERROR) << "job " << plan.job_id << " failed: " << launched->failure
                  << " (logs in " << plan.run_dir << "/logs)";
  } else {
    GS_LOG(INFO) << "job " << plan.job_id << " finished; metrics and logs in "
                 << plan.run_dir;
  }
  return launched->exit_code;
}

}  // namespace

int RunLaunchCommand(const std::vector<std::string>& training_flags) {
  absl::StatusOr<int> code = Launch(training_flags);
  if (!code.ok()) {
    GS_LOG(ERROR) << code.status().message();
    return 2;
  }
  return *code;
}

}  // namespace gradsync
