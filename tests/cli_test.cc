// Bad input to the command line: one clear message, a non-zero exit, no crash.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A crash would be a signal (exit code >= 128); bad input must be a clean exit.
void ExpectCleanFailure(const ProcessResult& result,
                        const std::string& message) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(result.exit_code, 128) << "crashed: " << result.output;
  EXPECT_THAT(result.output, HasSubstr(message));
}

TEST(CliTest, UnknownCommandAndFlag) {
  ExpectCleanFailure(RunGradsync({"fly"}), "unknown command 'fly'");
  ExpectCleanFailure(RunGradsync({"train", "--no_such_flag=1"}),
                     "no_such_flag");
  ExpectCleanFailure(RunGradsync({"launch", "--workers=2", "--", "--bogus=3"}),
                     "bogus");
}

TEST(CliTest, HelpListsTheCommandsFlags) {
  ProcessResult train = RunGradsync({"train", "--help"});
  EXPECT_THAT(train.output, HasSubstr("--batch_size"));
  EXPECT_THAT(train.output, HasSubstr("--sync"));
  EXPECT_THAT(train.output, Not(HasSubstr("--workers")));
  // Flags the command line reads for core's libraries (tools/cluster_flags,
  // tools/train_flags) are the worker's too.
  for (const char* flag :
       {"--gpus", "--bind", "--job_token_file", "--tls_ca"}) {
    EXPECT_THAT(train.output, HasSubstr(flag));
  }
  ProcessResult launch = RunGradsync({"launch", "--help"});
  EXPECT_THAT(launch.output, HasSubstr("--workers"));
}

TEST(CliTest, ImpossibleConfigurations) {
  ExpectCleanFailure(RunGradsync({"train", "--batch_size=0"}),
                     "--batch_size=0 must be at least 1");
  ExpectCleanFailure(
      RunGradsync({"train", "--layers=784,0,10", "--data=synthetic"}),
      "width 0");
  ExpectCleanFailure(RunGradsync({"launch", "--workers=0"}),
                     "--workers=0 must be at least 1");
  ExpectCleanFailure(
      RunGradsync({"launch", "--workers=4", "--", "--data=synthetic"},
                  {{"WORLD_SIZE", "2"}}),
      "--workers=4 but the environment says WORLD_SIZE=2");
  ExpectCleanFailure(RunGradsync({"train", "--sync=warp"}),
                     "unknown --sync=warp");
  ExpectCleanFailure(
      RunGradsync({"train"}, {{"RANK", "5"}, {"WORLD_SIZE", "2"}}),
      "rank 5 is outside the world of 2");
}

// Numbers outside their range are refused where they are read, naming the
// flag and what it takes; `launch` refuses them before any process starts.
TEST(CliTest, ValuesOutOfRangeAreRefused) {
  ExpectCleanFailure(
      RunGradsync({"train", "--check_params_every=-1", "--data=synthetic"}),
      "--check_params_every=-1 must be >= 0");
  ExpectCleanFailure(
      RunGradsync({"train", "--warmup_steps=-1", "--data=synthetic"}),
      "--warmup_steps=-1 must be >= 0");
  ExpectCleanFailure(
      RunGradsync({"train", "--autotune_steps=100000", "--data=synthetic"}),
      "--autotune_steps=100000 must be in 1..100");
  ExpectCleanFailure(
      RunGradsync({"launch", "--workers=2", "--", "--warmup_steps=-1",
                   "--data=synthetic"}),
      "--warmup_steps=-1 must be >= 0");
  ExpectCleanFailure(RunGradsync({"launch", "--workers=2",
                                  "--job_deadline_s=-1", "--",
                                  "--data=synthetic"}),
                     "--job_deadline_s=-1 is not a duration");
  ExpectCleanFailure(RunGradsync({"launch", "--workers=2",
                                  "--ranks_per_host=0", "--",
                                  "--data=synthetic"}),
                     "--ranks_per_host=0 must be at least 1");
  ExpectCleanFailure(
      RunGradsync({"train", "--sync=ring", "--allreduce_alpha_us=-5",
                   "--data=synthetic", "--max_steps=1"}),
      "--allreduce_alpha_us=-5 is not a latency");
}

// `launch --trace` before "--" is a worker command's; gradsync's own workers
// would never read it, so it is refused rather than writing no trace.
TEST(CliTest, LauncherTraceForGradsyncWorkersIsRefused) {
  ExpectCleanFailure(RunGradsync({"launch", "--workers=2", "--trace=t.json",
                                  "--", "--data=synthetic"}),
                     "gradsync's workers take it after \"--\"");
}

// A strategy flag the chosen strategy does not read is warned of and recorded
// as ignored, never as a setting the run used.
TEST(CliTest, FlagsTheStrategyIgnoresAreSaidAndRecorded) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ignored";
  ProcessResult result = RunGradsync(
      {"train", "--sync=local", "--ps_consistency=asp", "--data=synthetic",
       "--max_steps=2", "--eval=false", "--metrics_dir=" + dir});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr("--ps_consistency=asp is ignored: a parameter-server "
                        "setting; --sync=local runs no parameter servers"));
  std::ifstream in(dir + "/summary.json");
  ASSERT_TRUE(in.good()) << dir << "/summary.json";
  const nlohmann::json manifest = nlohmann::json::parse(in)["manifest"];
  EXPECT_THAT(manifest["ignored_flags"].value("ps_consistency", ""),
              HasSubstr("asp: a parameter-server setting"));
  EXPECT_FALSE(manifest["settings"].contains("ps_consistency"));
}

// --compression: a method or ratio that does not parse, and a method the
// strategy does not build, each one clear error and a clean exit.
TEST(CliTest, CompressionIsChecked) {
  for (const char* bad : {"topk:0", "topk:2", "zip"}) {
    ExpectCleanFailure(
        RunGradsync({"train", std::string("--compression=") + bad,
                     "--data=synthetic"}),
        std::string("--compression=") + bad);
  }
  ExpectCleanFailure(
      RunGradsync({"launch", "--workers=2", "--", "--sync=tree",
                   "--compression=fp16", "--data=synthetic", "--max_steps=1",
                   "--timeout_s=30"}),
      "--compression=fp16 is not built for --sync=tree; use --sync=ring or "
      "--sync=ps");
}

// A job of several nodes needs node 0's address and port on every node.
TEST(CliTest, MultiNodeLaunchNeedsItsPlacement) {
  ExpectCleanFailure(RunGradsync({"launch", "--nnodes=2"}),
                     "--nnodes=2 needs --master_addr and --master_port");
  ExpectCleanFailure(
      RunGradsync({"launch", "--nnodes=2", "--node_rank=2",
                   "--master_addr=10.213.0.1", "--master_port=29500"}),
      "--node_rank=2 is outside 0..1");
  ExpectCleanFailure(
      RunGradsync({"launch", "--nnodes=2", "--master_addr=10.213.0.1",
                   "--master_port=29500", "--netem=1gbit"}),
      "does not combine with --nnodes");
  ExpectCleanFailure(RunGradsync({"launch", "--master_addr=10.213.0.1"}),
                     "--master_addr is for a job of several nodes");
}

// `gradsync run` becomes what the environment says; a DMLC scheduler has no
// counterpart in gradsync.
TEST(CliTest, RunRefusesAScheduler) {
  ExpectCleanFailure(RunGradsync({"run"}, {{"DMLC_ROLE", "scheduler"}}),
                     "gradsync has no scheduler process");
  ExpectCleanFailure(
      RunGradsync({"train"}, {{"SLURM_PROCID", "2"},
                              {"SLURM_NTASKS", "3"},
                              {"GRADSYNC_NUM_SERVERS", "1"}}),
      "start parameter servers with `gradsync server`, or every task with "
      "`gradsync run`");
}

TEST(CliTest, MissingDataSetNamesThePathAndThePackage) {
  ProcessResult result =
      RunGradsync({"train", "--data_dir=/nonexistent/fmnist"});
  ExpectCleanFailure(result, "/nonexistent/fmnist");
  EXPECT_THAT(result.output, HasSubstr("dataset-fashion-mnist"));
}

TEST(CliTest, ModelThatDoesNotFitTheDataIsRefused) {
  struct stat st;
  if (stat("/usr/share/datasets/fashion-mnist", &st) != 0) {
    GTEST_SKIP() << "needs Debian's dataset-fashion-mnist";
  }
  ExpectCleanFailure(RunGradsync({"train", "--layers=100,10"}),
                     "the model takes 100 inputs but fashion-mnist has 784");
}

TEST(CliTest, CorruptDataSetIsRefused) {
  const std::string dir = TestTempDir() + "/corrupt";
  mkdir(dir.c_str(), 0755);
  for (const char* name :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    FILE* f = fopen((dir + "/" + name).c_str(), "wb");
    fputs("garbage, not an IDX file", f);
    fclose(f);
  }
  ExpectCleanFailure(RunGradsync({"train", "--data_dir=" + dir}), dir);
}

TEST(CliTest, CheckpointIntoMissingFolderFailsWithoutPartialFile) {
  const std::string path = TestTempDir() + "/missing/dir/model.ckpt";
  ProcessResult result =
      RunGradsync({"train", "--data=synthetic", "--synthetic_size=256",
                   "--layers=784,16,10", "--epochs=1", "--checkpoint=" + path});
  ExpectCleanFailure(result, "missing/dir");
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);
}

// --ps_consistency, --ps_staleness, --straggler: each mistake named.
TEST(CliTest, ConsistencyAndStragglerFlagsAreChecked) {
  const std::vector<std::string> base = {"train", "--data=synthetic",
                                         "--synthetic_size=256",
                                         "--layers=784,16,10", "--epochs=1"};
  auto train = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = base;
    args.insert(args.end(), flags.begin(), flags.end());
    return RunGradsync(args);
  };
  ExpectCleanFailure(train({"--sync=ps", "--ps_consistency=eventual"}),
                     "unknown --ps_consistency=eventual");
  ExpectCleanFailure(
      train({"--sync=ps", "--ps_update=server", "--ps_consistency=ssp"}),
      "--ps_consistency=ssp needs --ps_staleness");
  ExpectCleanFailure(train({"--sync=ps", "--ps_update=server",
                            "--ps_consistency=ssp", "--ps_staleness=5000"}),
                     "got 5000");
  ExpectCleanFailure(train({"--sync=ps", "--ps_consistency=asp"}),
                     "--ps_consistency=asp needs --ps_update=server");
  ExpectCleanFailure(train({"--sync=ps", "--ps_staleness=2"}),
                     "--ps_staleness=2 is only for --ps_consistency=ssp");
  ExpectCleanFailure(train({"--sync=ps", "--ps_pull=topk"}),
                     "--ps_pull=topk with --compression=none");
  ExpectCleanFailure(train({"--sync=ps", "--ps_update=server",
                            "--compression=topk:0.01", "--ps_pull=topk"}),
                     "and --ps_update=server: the servers run the optimizer");
  ExpectCleanFailure(train({"--sync=ps", "--ps_pull=sparse"}),
                     "unknown --ps_pull=sparse");
  // --schedule=priority on the PS: a partition is a key, and a credit
  // holds at least one.
  ExpectCleanFailure(train({"--sync=ps", "--schedule=priority",
                            "--partition_kb=64", "--ps_chunk_kb=128"}),
                     "--partition_kb=64 and --ps_chunk_kb=128 disagree");
  ExpectCleanFailure(
      train({"--sync=ps", "--ps_colocate", "--schedule=priority",
             "--ps_chunk_kb=128", "--credit_kb=64"}),
      "--credit_kb=64 is smaller than a key (128 KiB, flag)");
  ExpectCleanFailure(train({"--straggler=1"}), "RANK:MS[:EVERY]");
  ExpectCleanFailure(train({"--straggler=3:10"}),
                     "there is no worker 3 in a job of 1 workers");
  ExpectCleanFailure(train({"--sync=ps", "--ps_colocate", "--ps_update=server",
                            "--ps_consistency=asp", "--check_params_every=5"}),
                     "--check_params_every compares the workers' parameters");
}

// Issue 42: a training flag that a worker would refuse only after it has
// joined and loaded its data (the strategy's own flags, --data, --straggler,
// a strategy that runs one worker) is refused by `launch` before it starts
// any process: one line, the launcher's exit code 2, no worker's output.
TEST(CliTest, TrainingFlagErrorsAreSaidOnceBeforeAnyProcessStarts) {
  const std::vector<std::string> base = {
      "launch",           "--workers=3",          "--",
      "--data=synthetic", "--synthetic_size=256", "--layers=784,16,10",
      "--epochs=1",       "--max_steps=2",        "--progress=false"};
  auto launch = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = base;
    args.insert(args.end(), flags.begin(), flags.end());
    return RunGradsync(args);
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--sync=local"}, "--sync=local runs one worker, but the job has 3"},
      {{"--sync=ring", "--straggler=7:10"},
       "there is no worker 7 in a job of 3 workers"},
      {{"--sync=ring", "--data=bogus"}, "unknown --data=bogus"},
      {{"--sync=ring", "--allreduce_eager_kb=-1"}, "--allreduce_eager_kb=-1"},
      {{"--sync=ring", "--ring_row_sparse=bogus"}, "--ring_row_sparse=bogus"},
      {{"--sync=halving_doubling", "--compression=fp16"},
       "is not built for --sync=halving_doubling"},
      {{"--sync=ps", "--ps_colocate", "--ps_consistency=eventual"},
       "unknown --ps_consistency=eventual"},
      {{"--sync=ps", "--ps_colocate", "--ps_update=server",
        "--ps_consistency=asp", "--check_params_every=5"},
       "--check_params_every compares the workers' parameters"},
      {{"--sync=hybrid", "--ps_colocate", "--model=embedding", "--data=zipf",
        "--ps_pull=sparse"},
       "unknown --ps_pull=sparse"}};
  for (const auto& [flags, message] : cases) {
    const ProcessResult result = launch(flags);
    EXPECT_EQ(result.exit_code, 2) << message << "\n" << result.output;
    EXPECT_THAT(result.output, HasSubstr(message));
    // Said once, by the launcher: no worker started to say it again.
    EXPECT_EQ(result.output.find(message), result.output.rfind(message))
        << result.output;
    EXPECT_THAT(result.output, Not(HasSubstr("[worker "))) << result.output;
  }
}

// Where the parameter servers run: refused by `gradsync launch` before any
// process starts, and by a lone `gradsync train` too.
TEST(CliTest, ServerPlacementIsChecked) {
  auto launch = [](std::vector<std::string> args) {
    std::vector<std::string> all = {"launch"};
    all.insert(all.end(), args.begin(), args.end());
    return RunGradsync(all);
  };
  ExpectCleanFailure(launch({"--workers=2", "--servers=1", "--", "--sync=ps",
                             "--ps_colocated_servers=3", "--data=synthetic"}),
                     "--ps_colocated_servers=3 must be in [0, 2]");
  ExpectCleanFailure(launch({"--workers=2", "--servers=1", "--", "--sync=ps",
                             "--ps_colocated_servers=-1", "--data=synthetic"}),
                     "--ps_colocated_servers=-1 must be in [0, 2]");
  ExpectCleanFailure(
      launch({"--workers=2", "--", "--sync=ps", "--ps_colocate",
              "--ps_colocated_servers=1", "--data=synthetic"}),
      "--ps_colocate and --ps_colocated_servers=1 both say which workers "
      "serve");
  ExpectCleanFailure(launch({"--workers=2", "--servers=2", "--", "--sync=ps",
                             "--ps_colocate", "--data=synthetic"}),
                     "but the job has 2 of them (--servers)");
  ExpectCleanFailure(launch({"--workers=2", "--", "--sync=ps",
                             "--ps_colocated_servers=0", "--data=synthetic"}),
                     "--sync=ps needs parameter servers");
  ExpectCleanFailure(launch({"--workers=2", "--servers=1", "--", "--sync=ps",
                             "--ps_colocated_servers=2",
                             "--ps_partition=weighted", "--data=synthetic"}),
                     "unknown --ps_partition=weighted; choose equal");
  ExpectCleanFailure(
      RunGradsync({"train", "--sync=ps", "--ps_colocate",
                   "--ps_partition=weighted", "--data=synthetic",
                   "--synthetic_size=256", "--layers=784,16,10", "--epochs=1"}),
      "unknown --ps_partition=weighted; choose equal");
  ExpectCleanFailure(
      RunGradsync({"train", "--sync=ps", "--ps_colocated_servers=2",
                   "--data=synthetic", "--synthetic_size=256",
                   "--layers=784,16,10", "--epochs=1"}),
      "--ps_colocated_servers=2 must be in [0, 1]");
}

TEST(CliTest, EmbeddingModelAndHybridBadInput) {
  const std::vector<std::string> embedding = {
      "--model=embedding",     "--data=zipf",       "--synthetic_size=64",
      "--embedding_rows=1000", "--embedding_dim=4", "--epochs=1"};
  auto with = [&](std::vector<std::string> args,
                  const std::vector<std::string>& more) {
    args.insert(args.end(), embedding.begin(), embedding.end());
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  ExpectCleanFailure(RunGradsync(with({"train"}, {"--embedding_rows=0"})),
                     "vocabulary of 0 ids");
  ExpectCleanFailure(RunGradsync(with({"train"}, {"--embedding_dim=0"})),
                     "must be at least 1 (--embedding_dim)");
  ExpectCleanFailure(
      RunGradsync({"train", "--model=embedding", "--data=synthetic"}),
      "pass --data=zipf");
  ExpectCleanFailure(RunGradsync({"train", "--data=zipf"}),
                     "--data=zipf gives bags of ids for --model=embedding");
  ExpectCleanFailure(RunGradsync(with({"train"}, {"--device=cuda"})),
                     "--model=embedding runs on the CPU only");
  // The launcher refuses hybrid without servers before starting anything.
  ExpectCleanFailure(
      RunGradsync(with({"launch", "--workers=2", "--"}, {"--sync=hybrid"})),
      "--sync=hybrid sends the row-sparse tensors");
  // And starts servers for it.
  ProcessResult hybrid =
      RunGradsync(with({"launch", "--workers=2", "--servers=1", "--"},
                       {"--sync=hybrid", "--max_steps=2", "--momentum=0"}));
  EXPECT_EQ(hybrid.exit_code, 0) << hybrid.output;
  EXPECT_THAT(hybrid.output,
              HasSubstr("--sync=hybrid, 2 worker(s), 1 server(s)"));
}

TEST(CliTest, DoctorListsTheStrategies) {
  ProcessResult result = RunGradsync({"doctor"});
  EXPECT_THAT(result.output, HasSubstr("strategies"));
  EXPECT_THAT(result.output, HasSubstr("local"));
}

}  // namespace
}  // namespace gradsync
