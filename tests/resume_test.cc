// Checkpoint and resume, with real processes for every strategy: a run
// stopped at step 20 (by --max_steps, or by SIGKILL of a worker through the
// fault injection) and resumed with --resume ends at step 30 with exactly the
// parameters of an uninterrupted 30-step run, on every worker, and with
// worker 0's model buffers (batch norm's running statistics, which every
// worker takes before it evaluates) of that run; and a damaged or missing
// checkpoint is refused with an error naming the file, without touching it.
//
// Bitwise equality is expected, not a tolerance: the arithmetic of a step is
// deterministic for a fixed world size (the ring reduces in a fixed order;
// with 2 workers a server's sum a + b is the same whichever push arrives
// first, since float addition is commutative; one BLAS thread per worker),
// so a resume that restores the parameters, the optimizer state (momentum,
// Adam moments and step count) and the data order exactly reproduces it.
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/optim/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kSteps = 30;     // the whole run
constexpr int kStopStep = 20;  // where the interrupted run stops
constexpr int kEvery = 10;     // --checkpoint_every
constexpr int kKillStep = 25;  // where the fault injection kills a worker

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

struct Case {
  std::string name;
  int workers = 1;
  int servers = 0;
  int batch_size = 0;  // per worker
  std::vector<std::string> flags;
  bool kill = false;  // also the variant stopped by SIGKILL
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// 1000 samples: 25 steps per epoch with 40 samples per step in all (local,
// and 2 workers x 20), 21 with 3 workers x 16, so every case crosses an
// epoch boundary between the checkpoint at step 20 and the end at step 30,
// and the ring case also resumes mid-epoch right before it.
std::vector<std::string> ModelFlags(const Case& c) {
  std::vector<std::string> flags = {
      "--data=synthetic",
      "--synthetic_size=1000",
      "--layers=32,24,10",
      "--epochs=2",
      "--eval=false",
      "--progress=false",
      "--bucket_mb=0.001",
      "--ps_chunk_kb=1",
      "--lr=0.05",
      "--momentum=0.9",
      "--weight_decay=0.0001",
      "--seed=3",
      "--threads=1",
      "--timeout_s=30",
      absl::StrCat("--batch_size=", c.batch_size)};
  flags.insert(flags.end(), c.flags.begin(), c.flags.end());
  return flags;
}

// One job: `gradsync train` for a single worker without servers, else
// `gradsync launch`. `tag` names its run folder.
ProcessResult RunJob(const Case& c, const std::string& dir,
                     const std::string& tag,
                     const std::vector<std::string>& extra) {
  std::vector<std::string> args;
  if (c.workers == 1 && c.servers == 0) {
    args = {"train"};
  } else {
    args = {"launch",
            absl::StrCat("--workers=", c.workers),
            absl::StrCat("--servers=", c.servers),
            "--run_dir=" + dir + "/" + tag,
            "--job_deadline_s=100",
            "--"};
  }
  for (const std::string& f : ModelFlags(c)) args.push_back(f);
  args.insert(args.end(), extra.begin(), extra.end());
  return RunGradsync(args, {{"OPENBLAS_NUM_THREADS", "1"}}, absl::Seconds(120));
}

// Every worker's --dump_params file under `prefix` equals `expected` bit
// for bit.
void ExpectParamsEqual(const Case& c, const std::string& expected,
                       const std::string& prefix, const std::string& what) {
  for (int r = 0; r < c.workers; ++r) {
    const std::string got = ReadBytes(absl::StrCat(prefix, ".worker", r));
    ASSERT_EQ(got.size(), expected.size()) << what << ", worker " << r;
    if (got == expected) continue;
    std::vector<float> a(expected.size() / 4), b(got.size() / 4);
    std::memcpy(a.data(), expected.data(), expected.size());
    std::memcpy(b.data(), got.data(), got.size());
    size_t first = 0;
    while (first < a.size() && std::memcmp(&a[first], &b[first], 4) == 0)
      ++first;
    ADD_FAILURE() << what << ": worker " << r
                  << "'s parameters differ from the "
                  << "uninterrupted run's, first at parameter " << first << ": "
                  << b[first] << " vs " << a[first];
  }
}

// Each server's shard next to `checkpoint` holds keys at kStopStep
// (servers running the optimizer write them).
void ExpectShardsAtStopStep(const Case& c, const std::string& checkpoint) {
  for (int k = 0; k < c.servers; ++k) {
    absl::StatusOr<Checkpoint> shard =
        ReadCheckpoint(absl::StrCat(checkpoint, ".server", k));
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->step, kStopStep);
    EXPECT_FALSE(shard->keys.empty());
  }
}

// Resumes the run that stopped at kStopStep with `checkpoints` (reading
// `checkpoint`) and runs it to kSteps, every worker dumping its parameters
// to <dir>/resumed.worker<r>.
void ResumeToTheEnd(const Case& c, const std::string& dir,
                    const std::vector<std::string>& checkpoints,
                    const std::string& checkpoint) {
  std::vector<std::string> resume = checkpoints;
  resume.insert(resume.end(), {"--resume", absl::StrCat("--max_steps=", kSteps),
                               "--dump_params=" + dir + "/resumed"});
  ProcessResult cont = RunJob(c, dir, "c", resume);
  ASSERT_EQ(cont.exit_code, 0) << cont.output;
  EXPECT_THAT(cont.output, HasSubstr(absl::StrCat("resuming from ", checkpoint,
                                                  " at step ", kStopStep)));
}

// Worker 0's checkpoints of the last step, the uninterrupted run's and the
// resumed run's, hold the same parameters and the same model buffers, bit
// for bit. Where the model has buffers, they moved after the stop
// (`at_stop`), so the resumed steps' updates are compared, not only the copy.
void ExpectLastCheckpointsEqual(const std::string& uninterrupted,
                                const std::string& resumed,
                                const std::vector<float>& at_stop) {
  absl::StatusOr<Checkpoint> expected = ReadCheckpoint(uninterrupted);
  absl::StatusOr<Checkpoint> got = ReadCheckpoint(resumed);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(expected->step, kSteps);
  EXPECT_EQ(got->step, kSteps);
  EXPECT_TRUE(got->params == expected->params)
      << "worker 0's last checkpoints hold different parameters";
  ASSERT_EQ(got->buffers.size(), expected->buffers.size());
  EXPECT_TRUE(got->buffers == expected->buffers)
      << "worker 0's running statistics differ from the uninterrupted run's";
  if (!expected->buffers.empty()) {
    EXPECT_FALSE(at_stop == expected->buffers)
        << "the running statistics did not move after the stop";
  }
}

class ResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeTest, InterruptedAndResumedEqualsUninterrupted) {
  const Case& c = GetParam();
  const std::string dir = absl::StrCat(TestTempDir(), "/", c.name);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;

  // Its checkpoint of the last step holds worker 0's model buffers (batch
  // norm's running statistics) beside the parameters.
  const std::string uninterrupted_checkpoint = dir + "/uninterrupted.ckpt";
  ProcessResult a = RunJob(c, dir, "a",
                           {absl::StrCat("--max_steps=", kSteps),
                            "--dump_params=" + dir + "/uninterrupted",
                            "--checkpoint=" + uninterrupted_checkpoint});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string expected = ReadBytes(dir + "/uninterrupted.worker0");
  ASSERT_FALSE(expected.empty());

  // Stopped by --max_steps at a checkpoint step.
  const std::string checkpoint = dir + "/stopped.ckpt";
  const std::vector<std::string> checkpoints = {
      "--checkpoint=" + checkpoint,
      absl::StrCat("--checkpoint_every=", kEvery)};
  std::vector<std::string> stop = checkpoints;
  stop.push_back(absl::StrCat("--max_steps=", kStopStep));
  ProcessResult b = RunJob(c, dir, "b", stop);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  absl::StatusOr<Checkpoint> written = ReadCheckpoint(checkpoint);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->step, kStopStep);
  if (c.servers > 0 &&
      absl::StrContains(absl::StrJoin(c.flags, " "), "server")) {
    ExpectShardsAtStopStep(c, checkpoint);
  }

  ASSERT_NO_FATAL_FAILURE(ResumeToTheEnd(c, dir, checkpoints, checkpoint));
  ExpectParamsEqual(c, expected, dir + "/resumed",
                    "stopped at step 20 and resumed");
  ExpectLastCheckpointsEqual(uninterrupted_checkpoint, checkpoint,
                             written->buffers);

  if (!c.kill) return;
  // A worker dies by SIGKILL at the start of step 25: the checkpoint of step
  // 20 (or of the epoch's end, when rank 0 got to it) is intact and enough.
  const std::string killed_checkpoint = dir + "/killed.ckpt";
  ProcessResult killed =
      RunJob(c, dir, "killed",
             {"--checkpoint=" + killed_checkpoint,
              absl::StrCat("--checkpoint_every=", kEvery),
              absl::StrCat("--max_steps=", kSteps),
              absl::StrCat("--fault_rank=", c.workers - 1),
              absl::StrCat("--fault_step=", kKillStep), "--fault=kill"});
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  absl::StatusOr<Checkpoint> survived = ReadCheckpoint(killed_checkpoint);
  ASSERT_TRUE(survived.ok()) << survived.status();
  EXPECT_GE(survived->step, kStopStep);
  EXPECT_LE(survived->step, kKillStep);
  ProcessResult after_kill =
      RunJob(c, dir, "after_kill",
             {"--checkpoint=" + killed_checkpoint,
              absl::StrCat("--checkpoint_every=", kEvery), "--resume",
              absl::StrCat("--max_steps=", kSteps),
              "--dump_params=" + dir + "/after_kill"});
  ASSERT_EQ(after_kill.exit_code, 0) << after_kill.output;
  ExpectParamsEqual(
      c, expected, dir + "/after_kill",
      absl::StrCat("killed at step 25, resumed from step ", survived->step));
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ResumeTest,
    ::testing::Values(
        Case{"local", 1, 0, 40, {"--sync=local"}, true},
        Case{"local_adam",
             1,
             0,
             40,
             {"--sync=local", "--optimizer=adam", "--lr=0.001"}},
        Case{"ring_3", 3, 0, 16, {"--sync=ring"}, true},
        // Error feedback: each worker's residual is saved beside the
        // checkpoint (core/sync/error_feedback.h) and restored, so a
        // compressed run resumes exactly too, also from what a SIGKILL
        // leaves (a residual may then be a step ahead of the checkpoint:
        // its ".previous" copy is the one taken).
        Case{"local_topk",
             1,
             0,
             40,
             {"--sync=local", "--compression=topk:0.1"}},
        Case{"ring_2_topk",
             2,
             0,
             20,
             {"--sync=ring", "--compression=topk:0.1"},
             true},
        Case{"ps_worker_update_2x2",
             2,
             2,
             20,
             {"--sync=ps", "--ps_update=worker"}},
        Case{"ps_server_update_2x2",
             2,
             2,
             20,
             {"--sync=ps", "--ps_update=server"},
             true},
        Case{"ps_server_update_adam_2x2",
             2,
             2,
             20,
             {"--sync=ps", "--ps_update=server", "--optimizer=adam",
              "--lr=0.001"}},
        // The small CNN on 8x8 images (about 52,000 parameters; it has no
        // batch norm): convolutions, pooling and their buckets resume like
        // the MLP's.
        Case{"cnn_local",
             1,
             0,
             40,
             {"--sync=local", "--model=cnn", "--synthetic_shape=1x8x8"}},
        Case{"cnn_ring_2",
             2,
             0,
             20,
             {"--sync=ring", "--model=cnn", "--synthetic_shape=1x8x8"}},
        // ResNet-18 (11.2 M parameters, 20 batch norms) on 3x2x2 images:
        // worker 0's running statistics resume too. Buckets of 4 MiB, not
        // the MLP's 1 KB. About 12 s; a PS case (2 workers, 1 server) also
        // holds, bit for bit, but takes 19 s.
        Case{"resnet18_ring_2",
             2,
             0,
             20,
             {"--sync=ring", "--model=resnet18", "--synthetic_shape=3x2x2",
              "--lr=0.005", "--bucket_mb=4"}}),
    CaseName);

// --- Stale-synchronous and asynchronous parameter servers
// --------------------------------------------------------------------------

// Under SSP and ASP no two runs are alike (who is ahead depends on timing),
// so resume cannot be compared with an uninterrupted run. What holds: every
// checkpoint step and the run's last step are barriers (ps/server/shard.h), so
// the run stopped at step 20 ends with every worker holding the same model,
// worker 0's checkpoint is that model, each server's shard is of step 20, and
// the resumed run continues from it to the same agreement at its end.
class AsyncResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(AsyncResumeTest, StopsAtABarrierAndResumesFromIt) {
  const Case& c = GetParam();
  const std::string dir = absl::StrCat(TestTempDir(), "/", c.name);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  const std::string checkpoint = dir + "/run.ckpt";
  const std::vector<std::string> checkpoints = {
      "--checkpoint=" + checkpoint,
      absl::StrCat("--checkpoint_every=", kEvery)};
  std::vector<std::string> stop = checkpoints;
  stop.push_back(absl::StrCat("--max_steps=", kStopStep));
  stop.push_back("--dump_params=" + dir + "/stopped");
  ProcessResult b = RunJob(c, dir, "b", stop);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  absl::StatusOr<Checkpoint> written = ReadCheckpoint(checkpoint);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->step, kStopStep);
  ExpectShardsAtStopStep(c, checkpoint);
  std::string model(written->params.size() * sizeof(float), '\0');
  std::memcpy(model.data(), written->params.data(), model.size());
  ExpectParamsEqual(c, model, dir + "/stopped",
                    "at the barrier of step 20 (worker 0's checkpoint)");

  ASSERT_NO_FATAL_FAILURE(ResumeToTheEnd(c, dir, checkpoints, checkpoint));
  const std::string end = ReadBytes(dir + "/resumed.worker0");
  ExpectParamsEqual(c, end, dir + "/resumed", "at the run's last step");
  EXPECT_NE(end, model) << "the resumed run did not train";
}

INSTANTIATE_TEST_SUITE_P(
    Consistency, AsyncResumeTest,
    ::testing::Values(Case{"ps_ssp_2x2",
                           2,
                           2,
                           20,
                           {"--sync=ps", "--ps_update=server",
                            "--ps_consistency=ssp", "--ps_staleness=2"}},
                      Case{"ps_asp_2x1",
                           2,
                           1,
                           20,
                           {"--sync=ps", "--ps_update=server",
                            "--ps_consistency=asp"}}),
    CaseName);

// --- Damaged and missing checkpoints
// ------------------------------------------

const Case kLocal{"local", 1, 0, 40, {"--sync=local"}};

// A resume from `path` with checkpoints on: it must fail before writing any.
ProcessResult ResumeFrom(const Case& c, const std::string& dir,
                         const std::string& path) {
  return RunJob(c, dir, "refused",
                {"--checkpoint=" + path, "--checkpoint_every=1", "--resume",
                 absl::StrCat("--max_steps=", kSteps)});
}

class DamagedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(
        TestTempDir(), "/damaged_",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << dir_;
    ProcessResult run =
        RunJob(kLocal, dir_, "good",
               {"--checkpoint=" + dir_ + "/good.ckpt", "--max_steps=10"});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    good_ = ReadBytes(dir_ + "/good.ckpt");
    ASSERT_GT(good_.size(), 100u);
  }

  // Writes `bytes` to `name`, resumes from it, and checks the refusal: a
  // non-zero exit, one error naming the file and `what`, the file's bytes
  // unchanged.
  void ExpectRefused(const std::string& name, const std::string& bytes,
                     const std::string& what) {
    const std::string path = dir_ + "/" + name;
    WriteBytes(path, bytes);
    ProcessResult run = ResumeFrom(kLocal, dir_, path);
    EXPECT_NE(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output,
                AllOf(HasSubstr("--resume"), HasSubstr(path), HasSubstr(what)))
        << run.output;
    EXPECT_EQ(ReadBytes(path), bytes)
        << path << " was changed by the refused run";
  }

  std::string dir_;
  std::string good_;
};

TEST_F(DamagedCheckpointTest, TruncatedIsRefusedAndKept) {
  ExpectRefused("truncated.ckpt", good_.substr(0, good_.size() / 2),
                "is truncated");
}

TEST_F(DamagedCheckpointTest, FlippedByteIsRefusedAndKept) {
  std::string flipped = good_;
  flipped[flipped.size() / 2] ^= 0x01;
  ExpectRefused("flipped.ckpt", flipped, "is corrupt: CRC-32 mismatch");
}

TEST_F(DamagedCheckpointTest, MissingIsAnErrorNamingThePath) {
  const std::string path = dir_ + "/absent.ckpt";
  ProcessResult run = ResumeFrom(kLocal, dir_, path);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("no checkpoint at --checkpoint=" + path))
      << run.output;
  EXPECT_FALSE(Exists(path))
      << "a refused resume must not start afresh and write " << path;
}

// A resume whose flags would change the continuation (another seed, batch,
// optimizer or model) is refused, naming the flag and both values, and the
// checkpoint stays as it was.
TEST_F(DamagedCheckpointTest, ChangedFlagsAreRefusedAndKept) {
  const std::string path = dir_ + "/good.ckpt";
  struct Change {
    std::vector<std::string> flags;
    std::string what;
  };
  const std::vector<Change> changes = {
      {{"--seed=4"}, "was written with --seed 3 but this run has 4"},
      {{"--optimizer=adam", "--lr=0.001"}, "was written with --optimizer sgd"},
      {{"--layers=32,16,10"}, "resume with the same --model and --layers"},
      {{"--compression=fp16"},
       "was written with --compression none but this run has fp16; resume "
       "with --compression=none, or start over without --resume"},
  };
  for (const Change& change : changes) {
    std::vector<std::string> extra = {"--checkpoint=" + path,
                                      "--checkpoint_every=1", "--resume",
                                      absl::StrCat("--max_steps=", kSteps)};
    extra.insert(extra.end(), change.flags.begin(), change.flags.end());
    ProcessResult run = RunJob(kLocal, dir_, "changed", extra);
    const std::string what = absl::StrJoin(change.flags, " ");
    EXPECT_NE(run.exit_code, 0) << what << "\n" << run.output;
    EXPECT_THAT(run.output, AllOf(HasSubstr("--resume"), HasSubstr(path),
                                  HasSubstr(change.what)))
        << what << "\n"
        << run.output;
    EXPECT_EQ(ReadBytes(path), good_)
        << path << " was changed by the refused run (" << what << ")";
  }
  // With a batch of its own, the same data order cannot be kept.
  Case other = kLocal;
  other.batch_size = 20;
  ProcessResult run = ResumeFrom(other, dir_, path);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("was written with --batch_size 40 but this run has 20"))
      << run.output;
  EXPECT_EQ(ReadBytes(path), good_)
      << path << " was changed by the refused --batch_size run";
  // Nor with another number of workers: each would see another shard.
  const Case ring{"ring", 2, 0, 40, {"--sync=ring"}};
  run = ResumeFrom(ring, dir_, path);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(
      run.output,
      HasSubstr(
          "was written with a world size of 1 but this run has 2 workers"))
      << run.output;
  EXPECT_EQ(ReadBytes(path), good_)
      << path << " was changed by the refused 2-worker run";
  // A worker-side optimizer's checkpoint cannot seed servers that hold the
  // parameters (their shards were never written).
  const Case on_servers{
      "ps_server", 1, 1, 40, {"--sync=ps", "--ps_update=server"}};
  run = ResumeFrom(on_servers, dir_, path);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(
      run.output,
      HasSubstr(
          "was written with the optimizer on the workers but this run has"))
      << run.output;
  EXPECT_EQ(ReadBytes(path), good_)
      << path << " was changed by the refused --ps_update=server run";
}

// A checkpoint of a compressed run is not continued under another
// compression: without its error-feedback residuals (or with none where it
// kept some) the continuation would be another run's, reported as this one.
TEST_F(DamagedCheckpointTest, OtherCompressionIsRefusedNamingBoth) {
  const std::string path = dir_ + "/topk.ckpt";
  Case topk = kLocal;
  topk.flags.push_back("--compression=topk:0.1");
  ProcessResult run =
      RunJob(topk, dir_, "topk", {"--checkpoint=" + path, "--max_steps=10"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string written = ReadBytes(path);
  for (const std::string other : {"none", "topk:0.2"}) {
    Case changed = kLocal;
    changed.flags.push_back("--compression=" + other);
    run = ResumeFrom(changed, dir_, path);
    EXPECT_NE(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output,
                HasSubstr(absl::StrCat(
                    "checkpoint ", path,
                    " was written with --compression topk:0.1 but this run "
                    "has ",
                    other, "; resume with --compression=topk:0.1")))
        << run.output;
    EXPECT_EQ(ReadBytes(path), written)
        << path << " was changed by the refused --compression=" << other
        << " run";
  }
}

// A server's shard is checked like worker 0's file: a flipped byte in it
// stops the job with an error naming the shard, which stays as it was.
TEST(DamagedServerShardTest, FlippedByteIsRefusedAndKept) {
  const Case c{"ps_server", 2, 2, 20, {"--sync=ps", "--ps_update=server"}};
  const std::string dir = absl::StrCat(TestTempDir(), "/damaged_shard");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  const std::string checkpoint = dir + "/job.ckpt";
  ProcessResult run =
      RunJob(c, dir, "good", {"--checkpoint=" + checkpoint, "--max_steps=10"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string shard = checkpoint + ".server1";
  std::string bytes = ReadBytes(shard);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 0x01;
  WriteBytes(shard, bytes);
  run = ResumeFrom(c, dir, checkpoint);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, AllOf(HasSubstr("server 1"), HasSubstr(shard),
                                HasSubstr("is corrupt: CRC-32 mismatch")))
      << run.output;
  EXPECT_EQ(ReadBytes(shard), bytes)
      << shard << " was changed by the refused run";
}

}  // namespace
}  // namespace gradsync
