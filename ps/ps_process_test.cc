// --sync=ps with real processes: K `gradsync server` processes and N worker
// processes started by the launcher library on 127.0.0.1, each worker
// checking its results exactly (tests/ps_process_test_worker.cc); and a server
// whose workers disappear, which must exit non-zero naming them.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster/coordinator.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ps/client/client.h"
#include "ps/client/partitioner.h"

namespace gradsync {
namespace {

// The JSON line `gradsync server` prints when it ends ("event":
// "ps_server_summary"), parsed; null when the output has none.
nlohmann::json ServerSummaryEvent(const std::string& output) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{")) continue;
    nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_discarded() &&
        event.value("event", "") == "ps_server_summary") {
      return event;
    }
  }
  return nullptr;
}

using ::testing::HasSubstr;

constexpr char kBinary[] = "tests/ps_process_test_worker";

struct Job {
  int workers = 2;
  int servers = 1;
  std::vector<std::string> flags;
  double idle_timeout_s = 60;
};

std::vector<ProcessSpec> MakeSpecs(const Job& job, int port,
                                   const std::string& job_id) {
  std::vector<std::pair<std::string, std::string>> common = {
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", absl::StrCat(port)},
      {"WORLD_SIZE", absl::StrCat(job.workers)},
      {"GRADSYNC_NUM_SERVERS", absl::StrCat(job.servers)},
      {"GRADSYNC_JOB_ID", job_id},
  };
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < job.workers; ++r) {
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", r);
    spec.argv = {kBinary, "--timeout_s=10"};
    spec.argv.insert(spec.argv.end(), job.flags.begin(), job.flags.end());
    spec.env = common;
    spec.env.push_back({"RANK", absl::StrCat(r)});
    spec.env.push_back({"LOCAL_RANK", absl::StrCat(r)});
    specs.push_back(spec);
  }
  for (int k = 0; k < job.servers; ++k) {
    ProcessSpec spec;
    spec.name = absl::StrCat("server ", k);
    spec.argv = {kBinary,
                 absl::StrCat("--ps_idle_timeout_s=", job.idle_timeout_s)};
    spec.argv.insert(spec.argv.end(), job.flags.begin(), job.flags.end());
    spec.env = common;
    spec.env.push_back({"RANK", "0"});  // torchrun's variables describe workers
    spec.env.push_back({"GRADSYNC_ROLE", "server"});
    spec.env.push_back({"GRADSYNC_SERVER_RANK", absl::StrCat(k)});
    specs.push_back(spec);
  }
  return specs;
}

LaunchResult Launch(const Job& job, const std::string& job_id) {
  absl::StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status();
  LaunchOptions options;
  options.echo = false;
  options.deadline = absl::Seconds(120);
  options.grace = absl::Seconds(2);
  auto result = RunProcessGroup(MakeSpecs(job, *port, job_id), options);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

std::string AllOutput(const LaunchResult& result) {
  std::string out;
  for (const ProcessResult& process : result.processes) {
    absl::StrAppend(&out, "--- ", process.name, " (exit ", process.exit_code,
                    "):\n", process.output);
  }
  return out;
}

void ExpectAllPass(const LaunchResult& result, const Job& job) {
  ASSERT_EQ(result.exit_code, 0) << result.failure << "\n" << AllOutput(result);
  for (const ProcessResult& process : result.processes) {
    EXPECT_EQ(process.exit_code, 0) << process.name << ":\n" << process.output;
  }
  for (int r = 0; r < job.workers; ++r) {
    EXPECT_THAT(result.processes[r].output,
                HasSubstr(absl::StrCat("worker ", r, " ok")));
  }
  for (int k = 0; k < job.servers; ++k) {
    const nlohmann::json summary =
        ServerSummaryEvent(result.processes[job.workers + k].output);
    EXPECT_EQ(summary.value("ok", false), true) << summary;
    EXPECT_EQ(summary["summary"].value("server", -1), k) << summary;
  }
}

TEST(PsProcessTest, WorkerUpdateThreeWorkersTwoServers) {
  Job job;
  job.workers = 3;
  job.servers = 2;
  job.flags = {"--ps_update=worker", "--ps_chunk_kb=1", "--ps_message_kb=1"};
  ExpectAllPass(Launch(job, "ps-process-worker"), job);
}

TEST(PsProcessTest, ServerUpdateTwoWorkersTwoServers) {
  Job job;
  job.workers = 2;
  job.servers = 2;
  job.flags = {"--ps_update=server", "--ps_chunk_kb=1", "--ps_message_kb=1",
               "--lr_scaling=linear"};
  ExpectAllPass(Launch(job, "ps-process-server"), job);
}

TEST(PsProcessTest, ColocatedServers) {
  Job job;
  job.workers = 2;
  job.servers = 0;
  job.flags = {"--ps_colocate", "--ps_update=server", "--ps_chunk_kb=1"};
  ExpectAllPass(Launch(job, "ps-process-colocate"), job);
}

// A `gradsync server` whose only worker registers and then goes away exits
// with code 1 after --ps_idle_timeout_s, naming the worker. The test plays the
// coordinator and the worker itself.
TEST(PsProcessTest, ServerExitsNamingWorkersThatDisappeared) {
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok());
  const std::string job_id = "ps-process-gone";
  auto coordinator =
      CoordinatorServer::Start(absl::StrCat("127.0.0.1:", *port), job_id, 1, 1);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  Job job;
  job.workers = 1;
  job.servers = 1;
  job.idle_timeout_s = 1;
  std::vector<ProcessSpec> specs = MakeSpecs(job, *port, job_id);
  specs.erase(specs.begin());  // only the server runs as a process
  LaunchResult result;
  std::thread launcher([&] {
    LaunchOptions options;
    options.echo = false;
    options.deadline = absl::Seconds(60);
    auto launched = RunProcessGroup(specs, options);
    ASSERT_TRUE(launched.ok()) << launched.status();
    result = *launched;
  });
  auto worker =
      CoordinatorClient::Connect(absl::StrCat("127.0.0.1:", *port), job_id,
                                 Role::kWorker, 0, absl::Seconds(30));
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto members = (*worker)->Join("127.0.0.1", absl::Seconds(30));
  ASSERT_TRUE(members.ok()) << members.status();
  std::string server_address;
  for (const Member& member : *members) {
    if (member.role == Role::kServer) server_address = member.address;
  }
  ASSERT_FALSE(server_address.empty());
  auto layout = ParamLayout::Create({{"w", {10}}}, 0);
  ASSERT_TRUE(layout.ok());
  auto partition = Partition::Create(*layout, 1, 4096);
  ASSERT_TRUE(partition.ok());
  PsClientOptions options;
  options.job_id = job_id;
  auto client = PsClient::Create(options, *partition, {server_address});
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Register(nullptr).ok());
  // ...and never calls again, nor shuts down.
  launcher.join();
  ASSERT_EQ(result.processes.size(), 1u);
  EXPECT_EQ(result.processes[0].exit_code, 1) << result.processes[0].output;
  EXPECT_THAT(result.processes[0].output,
              HasSubstr("worker(s) 0 never said the job was over"));
  const nlohmann::json summary = ServerSummaryEvent(result.processes[0].output);
  EXPECT_EQ(summary.value("ok", true), false) << summary;
}

}  // namespace
}  // namespace gradsync
