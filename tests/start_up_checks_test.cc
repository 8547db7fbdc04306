// Issue 30: every bad path and value is refused before work is lost, with
// one message that names the real cause. Each test reproduces one numbered
// defect of the issue against the real binary (small MLP, synthetic or tiny
// IDX data, a few steps).
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cluster/local_address.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"
#include "tests/job_checks.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Env = std::vector<std::pair<std::string, std::string>>;

// A clean refusal: a non-zero exit that is no crash, naming `message`.
void ExpectRefused(const ProcessResult& result, const std::string& message) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(result.exit_code, 128) << "crashed: " << result.output;
  EXPECT_THAT(result.output, HasSubstr(message));
}

std::string Dir(const std::string& name) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// A tiny MLP on synthetic data: a run of a second or two.
std::vector<std::string> Small(std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {
      "--data=synthetic", "--synthetic_size=256", "--layers=64,16,10",
      "--batch_size=16",  "--epochs=1",           "--max_steps=4",
      "--progress=false", "--eval=false",         "--timeout_s=30"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

std::vector<std::string> Train(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"train"};
  for (const std::string& flag : Small(extra)) args.push_back(flag);
  return args;
}

std::vector<std::string> Launch(std::vector<std::string> launch_flags,
                                std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"launch"};
  args.insert(args.end(), launch_flags.begin(), launch_flags.end());
  args.push_back("--");
  for (const std::string& flag : Small(extra)) args.push_back(flag);
  return args;
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// An IDX data set of 4x4 images in `dir`; `labels` for both splits.
void WriteIdxDataSet(const std::string& dir,
                     const std::vector<uint8_t>& labels) {
  const uint8_t n = static_cast<uint8_t>(labels.size());
  for (const char* split : {"train", "t10k"}) {
    std::vector<uint8_t> images = {0, 0, 8, 3, 0, 0, 0, n,
                                   0, 0, 0, 4, 0, 0, 0, 4};
    for (int i = 0; i < n * 16; ++i) images.push_back(static_cast<uint8_t>(i));
    WriteBytes(absl::StrCat(dir, "/", split, "-images-idx3-ubyte"), images);
    std::vector<uint8_t> label_file = {0, 0, 8, 1, 0, 0, 0, n};
    label_file.insert(label_file.end(), labels.begin(), labels.end());
    WriteBytes(absl::StrCat(dir, "/", split, "-labels-idx1-ubyte"), label_file);
  }
}

// Defect 2: --workers=100000 forked thousands of workers.
TEST(StartUpChecksTest, TooManyProcessesAreRefusedBeforeAnyStarts) {
  const ProcessResult result = RunGradsync(Launch({"--workers=100000"}));
  ExpectRefused(result,
                "--workers=100000 and --servers=0 make 100000 processes");
  EXPECT_THAT(result.output, HasSubstr("--max_processes"));
  EXPECT_THAT(result.output, Not(HasSubstr("[worker 0]")));
}

// Defect 5: a data file that blocks (a FIFO) hung the worker forever.
TEST(StartUpChecksTest, DataLoadingHasADeadlineNamingTheFile) {
  const std::string dir = Dir("fifo_data");
  WriteIdxDataSet(dir, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  const std::string fifo = dir + "/train-images-idx3-ubyte";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const absl::Time start = absl::Now();
  const ProcessResult result =
      RunGradsync({"train", "--data=fashion-mnist", "--data_dir=" + dir,
                   "--layers=16,8,10", "--epochs=1", "--timeout_s=2"},
                  {}, absl::Seconds(60));
  ExpectRefused(result, "loading the data did not finish within 2s");
  EXPECT_THAT(result.output, HasSubstr(fifo));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// Defect 3: --checkpoint=<a directory> --resume aborted with an uncaught
// std::ios_failure (exit 134), under every strategy.
TEST(StartUpChecksTest, CheckpointThatIsADirectoryIsRefused) {
  const std::string dir = Dir("checkpoint_dir");
  ExpectRefused(RunGradsync(Train({"--checkpoint=" + dir, "--resume"})),
                "is a directory");
  ExpectRefused(
      RunGradsync(Launch({"--workers=2"},
                         {"--sync=ring", "--checkpoint=" + dir, "--resume"})),
      "is a directory");
}

// Defect 4: a PS shard checkpoint path that is a directory made the job
// wait --timeout_s and end with "Deadline Exceeded".
TEST(StartUpChecksTest, ServerShardCheckpointThatIsADirectoryIsRefused) {
  const std::string path = Dir("shard") + "/model.ckpt";
  mkdir((path + ".server0").c_str(), 0755);
  const absl::Time start = absl::Now();
  const ProcessResult result = RunGradsync(
      Launch({"--workers=1", "--servers=1"},
             {"--sync=ps", "--ps_update=server", "--checkpoint=" + path}));
  ExpectRefused(result, path + ".server0 is a directory");
  EXPECT_THAT(result.output, Not(HasSubstr("Deadline Exceeded")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

// Defect 7: a missing folder was found after --checkpoint_every steps.
TEST(StartUpChecksTest, CheckpointFolderIsCheckedAtStart) {
  const std::string metrics = Dir("missing_folder_metrics");
  const ProcessResult result = RunGradsync(
      Train({"--checkpoint=" + TestTempDir() + "/nowhere/model.ckpt",
             "--checkpoint_every=1", "--metrics_dir=" + metrics}));
  ExpectRefused(result, "/nowhere does not exist");
  EXPECT_FALSE(Exists(metrics + "/summary.json"));
  EXPECT_THAT(result.output, Not(HasSubstr("done:")));
}

// Defect 8: without --resume an existing checkpoint was overwritten.
TEST(StartUpChecksTest, ExistingCheckpointNeedsResumeOrOverwrite) {
  const std::string path = Dir("existing") + "/model.ckpt";
  ASSERT_EQ(RunGradsync(Train({"--checkpoint=" + path})).exit_code, 0);
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  ExpectRefused(RunGradsync(Train({"--checkpoint=" + path})),
                "already exists: pass --resume");
  ExpectRefused(RunGradsync(Launch({"--workers=2"},
                                   {"--sync=ring", "--checkpoint=" + path})),
                "already exists: pass --resume");
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec)
      << "the saved checkpoint was rewritten";
  const ProcessResult over =
      RunGradsync(Train({"--checkpoint=" + path, "--overwrite_checkpoint"}));
  EXPECT_EQ(over.exit_code, 0) << over.output;
}

// Defect 9: a writer killed mid-write left <ckpt>.tmp.<pid> for good.
TEST(StartUpChecksTest, StaleTemporaryCheckpointIsRemoved) {
  const std::string path = Dir("stale") + "/model.ckpt";
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  waitpid(gone, nullptr, 0);
  const std::string stale = absl::StrCat(path, ".tmp.", gone);
  WriteBytes(stale, {1, 2, 3});
  const ProcessResult result = RunGradsync(Train({"--checkpoint=" + path}));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(path));
}

// Defect 6: a reused run folder kept the previous run's summary beside a
// later failed run's logs.
// Every output path is checked when the worker starts, before the data is
// loaded (the data folder here does not exist, so a later check would name
// the data instead), and nothing of the run is written: not even the
// metrics folder it would have created.
TEST(StartUpChecksTest, OutputPathsAreCheckedBeforeTheDataIsLoaded) {
  const std::string dir = TestTempDir() + "/outputs";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/taken.worker0").c_str(), 0755), 0);
  const std::string plain = dir + "/plain";
  std::ofstream(plain) << "x";
  const std::string metrics = dir + "/metrics";
  struct Bad {
    std::string flag;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {"--dump_params=" + plain + "/params",
       "--dump_params=" + plain + "/params.worker0 cannot be written: " +
           plain + " is a file, not a folder"},
      {"--dump_params=" + dir + "/taken", "it is a folder"},
      {"--trace=" + plain + "/t.json",
       "--trace=" + plain + "/t.worker0.json cannot be written"},
      {"--metrics_dir=" + plain + "/run", plain + " is a file, not a folder"},
  };
  for (const Bad& bad : cases) {
    std::vector<std::string> args = {"train", "--data_dir=" + dir + "/no_data",
                                     "--epochs=1", bad.flag};
    if (bad.flag.rfind("--metrics_dir", 0) != 0)
      args.push_back("--metrics_dir=" + metrics);
    const ProcessResult result = RunGradsync(args);
    ExpectRefused(result, bad.message);
    EXPECT_THAT(result.output, Not(HasSubstr("no_data"))) << bad.flag;
    struct stat st;
    EXPECT_NE(stat(metrics.c_str(), &st), 0)
        << bad.flag << ": the refused run created " << metrics;
  }
  // `launch` checks every worker's paths once, before it starts any.
  const ProcessResult launched =
      RunGradsync({"launch", "--workers=2", "--run_dir=" + dir + "/run", "--",
                   "--data_dir=" + dir + "/no_data", "--epochs=1",
                   "--dump_params=" + plain + "/params"});
  ExpectRefused(launched,
                "--dump_params=" + plain + "/params.worker0 cannot be written");
  EXPECT_THAT(launched.output, Not(HasSubstr("[worker")))
      << "a worker was started";
}

TEST(StartUpChecksTest, ReusedRunFolderShowsNoEarlierSummary) {
  const std::string run = Dir("reused_run");
  const ProcessResult first =
      RunGradsync(Launch({"--workers=2", "--run_dir=" + run}, {"--sync=ring"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(Exists(run + "/summary.json"));
  const ProcessResult failed = RunGradsync(Launch(
      {"--workers=2", "--run_dir=" + run},
      {"--sync=ring", "--fault_rank=1", "--fault_step=2", "--fault=exit"}));
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_FALSE(Exists(run + "/summary.json"))
      << "the failed run's folder shows the earlier run's summary";
}

// Defect 11: --bucket_mb=0 and 1e-9 meant one bucket; 1e300 overflowed.
// 0 is now the default, a cap derived from the model (issue 25).
TEST(StartUpChecksTest, BucketCapIsValidated) {
  for (const char* cap : {"1e-9", "1e300", "-1", "nan"}) {
    ExpectRefused(RunGradsync(Train({absl::StrCat("--bucket_mb=", cap)})),
                  "is not a bucket cap");
  }
  EXPECT_EQ(RunGradsync(Train({"--bucket_mb=0.0001"})).exit_code, 0);
  EXPECT_EQ(RunGradsync(Train({"--bucket_mb=0"})).exit_code, 0);
}

// Defect 10: a local launch's parameter servers listened on every interface.
TEST(StartUpChecksTest, LocalLaunchBindsServersToLoopback) {
  const std::string run = Dir("loopback_servers");
  const ProcessResult result = RunGradsync(Launch(
      {"--workers=1", "--servers=1", "--run_dir=" + run}, {"--sync=ps"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string summary = ReadWholeFile(run + "/summary.json");
  EXPECT_THAT(summary, HasSubstr("127.0.0.1:0"));
  EXPECT_THAT(summary, Not(HasSubstr("0.0.0.0:0")));
}

// Defect 10, env-launched: a server whose job is on loopback listens there.
TEST(StartUpChecksTest, EnvLaunchedLocalServerListensOnLoopback) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  const Env common = {{"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", absl::StrCat(*port)},
                      {"WORLD_SIZE", "1"},
                      {"GRADSYNC_NUM_SERVERS", "1"}};
  ProcessSpec worker;
  worker.name = "worker 0";
  worker.argv = {GradsyncBinary(), "train"};
  for (const std::string& flag : Small({"--sync=ps"})) {
    worker.argv.push_back(flag);
  }
  worker.env = common;
  worker.env.push_back({"RANK", "0"});
  ProcessSpec server;
  server.name = "server 0";
  server.argv = {GradsyncBinary(), "server", "--timeout_s=30"};
  server.env = common;
  server.env.push_back({"GRADSYNC_ROLE", "server"});
  server.env.push_back({"GRADSYNC_SERVER_RANK", "0"});
  const LaunchResult result =
      RunGroup({worker, server}, /*stop_on_failure=*/true, absl::Seconds(60));
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
  EXPECT_THAT(result.processes[1].output,
              HasSubstr("(listening on 127.0.0.1:0)"));
}

// Defect 12, message by message.
TEST(StartUpChecksTest, MessagesNameTheRealCauseOnce) {
  // Every model, not only the synthetic ones.
  ProcessResult result = RunGradsync(Train({"--model=foo"}));
  ExpectRefused(result, "--model=foo is not a model");
  EXPECT_THAT(result.output, HasSubstr("mlp, cnn, resnet18"));

  // One corrupt label byte: no advice to build a model of 201 classes.
  const std::string corrupt = Dir("corrupt_label");
  WriteIdxDataSet(corrupt, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 200});
  result =
      RunGradsync({"train", "--data=fashion-mnist", "--data_dir=" + corrupt,
                   "--layers=16,8,10", "--epochs=1"});
  ExpectRefused(result, "label 200 at item 10");
  EXPECT_THAT(result.output, HasSubstr("looks corrupt"));
  EXPECT_THAT(result.output, Not(HasSubstr("201")));

  // A data file that is a directory is not "missing".
  const std::string with_dir = Dir("data_file_dir");
  WriteIdxDataSet(with_dir, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  const std::string images = with_dir + "/t10k-images-idx3-ubyte";
  unlink(images.c_str());
  mkdir(images.c_str(), 0755);
  result = RunGradsync({"train", "--data=fashion-mnist",
                        "--data_dir=" + with_dir, "--layers=16,8,10"});
  ExpectRefused(result, images + " is a directory");
  EXPECT_THAT(result.output, Not(HasSubstr("neither")));

  // Servers for a strategy that uses none: refused before the job runs.
  result = RunGradsync(Launch({"--workers=2", "--servers=1"}, {"--sync=ring"}));
  ExpectRefused(result,
                "--servers=1 starts parameter servers, but --sync=ring");
  EXPECT_THAT(result.output, Not(HasSubstr("[worker 0]")));

  // A port that is no port: refused by launch itself.
  result = RunGradsync(Launch({"--master_port=70000"}));
  ExpectRefused(result, "--master_port=70000 is not a TCP port");
  EXPECT_THAT(result.output, Not(HasSubstr("[worker 0]")));

  // A training-flag mistake is reported once, by launch, before any fork.
  result = RunGradsync(Launch({"--workers=2"}, {"--lr_scaling=bogus"}));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("--lr_scaling"));
  EXPECT_THAT(result.output, Not(HasSubstr("[worker")));
}

// Defect 12, last item: a worker refused for a wrong token left worker 0
// with only "timed out waiting for worker 1 to join".
TEST(StartUpChecksTest, JoinTimeoutNamesTheTokenRefusal) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  auto worker = [&](int rank, const std::string& token) {
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", rank);
    spec.argv = {GradsyncBinary(), "train"};
    for (const std::string& flag : Small({"--sync=ring", "--timeout_s=3"})) {
      spec.argv.push_back(flag);
    }
    spec.env = {{"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", absl::StrCat(*port)},
                {"WORLD_SIZE", "2"},
                {"RANK", absl::StrCat(rank)},
                {"GRADSYNC_JOB_TOKEN", token}};
    return spec;
  };
  const LaunchResult result =
      RunGroup({worker(0, "right-token-0123456789abcdef"),
                worker(1, "wrong-token-0123456789abcdef")},
               /*stop_on_failure=*/false, absl::Seconds(60));
  ASSERT_EQ(result.processes.size(), 2u);
  const ProcessResult& refused = result.processes[1];
  ExpectRefused(refused, "wrong job token");
  const ProcessResult& first = result.processes[0];
  ExpectRefused(first, "waiting for worker 1 to join");
  // The error itself, not only the coordinator's warning line before it.
  std::string timeout_line;
  for (absl::string_view line : absl::StrSplit(first.output, '\n')) {
    if (absl::StrContains(line, "waiting for worker 1 to join")) {
      timeout_line = std::string(line);
    }
  }
  EXPECT_THAT(timeout_line, HasSubstr("wrong job token"))
      << GroupOutputs(result);
}

// Defect 10: env-launched processes of a tokenless job across hosts said
// nothing. Worker 0 listens beyond loopback; worker 1 reaches it at this
// host's own address and warns.
TEST(StartUpChecksTest, TokenlessJobAcrossHostsIsWarnedOfOnEveryProcess) {
  auto host = LocalAddressToward("10.255.255.1", 9);
  if (!host.ok() || absl::StartsWith(*host, "127.")) {
    GTEST_SKIP() << "this machine has no address beside loopback";
  }
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < 2; ++rank) {
    ProcessSpec spec;
    spec.name = absl::StrCat("worker ", rank);
    spec.argv = {GradsyncBinary(), "train"};
    for (const std::string& flag : Small({"--sync=ring"})) {
      spec.argv.push_back(flag);
    }
    spec.env = {{"MASTER_ADDR", *host},
                {"MASTER_PORT", absl::StrCat(*port)},
                {"GRADSYNC_ADVERTISE_HOST", *host},
                {"WORLD_SIZE", "2"},
                {"RANK", absl::StrCat(rank)}};
    specs.push_back(spec);
  }
  const LaunchResult result =
      RunGroup(specs, /*stop_on_failure=*/true, absl::Seconds(60));
  ASSERT_EQ(result.exit_code, 0) << GroupOutputs(result);
  EXPECT_THAT(result.processes[0].output, HasSubstr("without a job token"));
  EXPECT_THAT(result.processes[1].output, HasSubstr("worker 1: no job token"));
}

}  // namespace
}  // namespace gradsync
