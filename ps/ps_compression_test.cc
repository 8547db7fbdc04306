// --sync=ps with --compression, --ps_pull and row-sparse tensors, end to end
// over real gRPC on 127.0.0.1 (K servers, N workers as threads). The
// reference is computed here from the codec alone: every worker's encoding
// of every bucket (with its own error-feedback residual), decoded and summed
// in float32, averaged, then what the pull returns (union and dense: that
// average; topk: each key's TopKOf of it; fp16/bf16: it rounded once).
// Gradients are small integers, so the sums are exact whatever order the
// pushes arrive in, and results are compared bit for bit (onebit's scales
// are means, so its sums are compared within float rounding).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/optim/optimizer.h"
#include "core/sync/compression.h"
#include "core/sync/error_feedback.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/key_compression.h"
#include "ps/loopback_cluster.h"
#include "ps/client/partitioner.h"
#include "ps/ps_sync.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBucketBytes = 160;
constexpr int64_t kChunkBytes = 64;
constexpr int64_t kMessageBytes = 24;
constexpr uint64_t kSeed = 42;
constexpr int kSteps = 3;
constexpr int64_t kRowWidth = 6;

struct Job {
  int workers = 2;
  int servers = 1;
  std::string compression = "none";
  PsPull pull = PsPull::kAuto;
  ps::UpdateMode mode = ps::UPDATE_WORKER;
  bool table = false;  // add a row-sparse embedding table
  // Only the table: the layout --sync=hybrid gives the servers.
  bool table_only = false;
  // Steps to run, numbered from schedule.start_step (a resumed run).
  int steps = kSteps;
  TrainingSchedule schedule;
  absl::Duration timeout = absl::Seconds(20);
  // A worker is meant to fail: the servers then never hear every Shutdown.
  bool fails = false;
  // --schedule=priority: every key's encoding its own call, in offset order.
  ScheduleOptions send_schedule;
};

std::vector<ParamSpec> Specs(const Job& job) {
  std::vector<ParamSpec> specs = {{"a", {37}}, {"c", {5, 7}}, {"d", {130}}};
  if (job.table_only) specs.clear();
  if (job.table || job.table_only) {
    ParamSpec table{"embedding", {40, kRowWidth}};
    table.sparse_row_width = kRowWidth;
    specs.push_back(table);
  }
  return specs;
}

OptimizerOptions TestOptimizer() {
  OptimizerOptions options;
  options.kind = "sgd";
  options.lr = 0.1f;
  options.momentum = 0.9f;
  return options;
}

// Dense tensors: small integers, some zero. The table: a few rows per step,
// different per worker, overlapping across workers.
std::vector<float> Gradients(const ParamLayout& layout, int rank, int step) {
  std::vector<float> grads(layout.total_numel());
  for (const ParamInfo& param : layout.params()) {
    for (int64_t i = 0; i < param.numel; ++i) {
      float value = static_cast<float>((rank + 1) * (i % 5) + step - 1);
      if (param.spec.sparse_row_width > 0) {
        const int64_t row = i / param.spec.sparse_row_width;
        if ((row * 3 + rank + step) % 7 != 0) value = 0.0f;
      }
      grads[param.offset + i] = value;
    }
  }
  return grads;
}

struct WorkerResult {
  absl::Status status;
  std::vector<std::vector<float>> per_step;  // grads, or params (server mode)
  std::vector<int64_t> bytes_sent, bytes_recv;
};

WorkerResult RunWorker(LoopbackCluster& cluster, const Job& job, int rank) {
  WorkerResult result;
  absl::StatusOr<SyncContext> context = cluster.JoinWorker(rank);
  if (!context.ok()) return {context.status()};
  context->compression = *CompressionSpec::Parse(job.compression);
  context->compression_seed = kSeed;
  context->schedule = job.send_schedule;
  PsSyncOptions options;
  options.update_mode = job.mode;
  options.chunk_bytes = kChunkBytes;
  options.message_bytes = kMessageBytes;
  options.optimizer = TestOptimizer();
  options.pull = job.pull;
  absl::StatusOr<std::unique_ptr<GradientSync>> sync =
      CreatePsSync(*context, options);
  if (!sync.ok()) return {sync.status()};
  absl::StatusOr<ParamLayout> layout =
      ParamLayout::Create(Specs(job), kBucketBytes);
  if (!layout.ok()) return {layout.status()};
  absl::StatusOr<std::unique_ptr<Device>> device =
      CreateDevice(DeviceOptions());
  if (!device.ok()) return {device.status()};
  std::vector<float> params(layout->total_numel(), 0.5f);
  std::vector<float> grads(layout->total_numel());
  (*sync)->SetTrainingSchedule(job.schedule);
  absl::Status status =
      (*sync)->Setup(*layout, **device, {grads.data(), params.data()});
  if (!status.ok()) return {status};
  for (int step = 0; step < job.steps && status.ok(); ++step) {
    // Into the buffer Setup was given (assigning would replace it).
    const std::vector<float> step_grads = Gradients(
        *layout, rank, static_cast<int>(job.schedule.start_step) + step);
    std::copy(step_grads.begin(), step_grads.end(), grads.begin());
    for (const Bucket& bucket : layout->buckets()) {
      (*sync)->BucketReady(bucket.index);
    }
    StepStats stats;
    status = (*sync)->Finish(stats);
    if (!status.ok()) break;
    result.per_step.push_back(job.mode == ps::UPDATE_SERVER ? params : grads);
    result.bytes_sent.push_back(stats.bytes_sent);
    result.bytes_recv.push_back(stats.bytes_recv);
  }
  absl::Status shutdown = (*sync)->Shutdown();
  result.status = status.ok() ? shutdown : status;
  return result;
}

std::vector<WorkerResult> RunJob(const Job& job) {
  LoopbackClusterOptions options;
  options.num_workers = job.workers;
  options.num_servers = job.servers;
  options.job_id = "ps-compression-test";
  options.timeout = job.timeout;
  options.message_bytes = kMessageBytes;
  absl::StatusOr<std::unique_ptr<LoopbackCluster>> cluster =
      LoopbackCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  std::vector<WorkerResult> results = (*cluster)->RunEveryWorker(
      [&](int rank) { return RunWorker(**cluster, job, rank); });
  const absl::Status finished = (*cluster)->Finish();
  if (!job.fails) EXPECT_TRUE(finished.ok()) << finished;
  return results;
}

// What every worker must hold after each step, and the payload bytes each
// worker sends and receives per step.
struct Reference {
  std::vector<std::vector<float>> per_step;
  std::vector<std::vector<int64_t>> bytes_sent;  // [step][rank]
  std::vector<int64_t> bytes_recv;               // [step], every rank
};

Reference Expected(const Job& job) {
  const ParamLayout layout = *ParamLayout::Create(Specs(job), kBucketBytes);
  const Partition partition =
      *Partition::Create(layout, job.servers, kChunkBytes);
  const CompressionSpec spec = *CompressionSpec::Parse(job.compression);
  const PsPull pull = *ResolvePsPull(job.pull, spec, job.mode);
  const Compressor compressor(spec, kSeed);
  const int64_t n = layout.total_numel();
  std::vector<std::vector<float>> residuals(job.workers,
                                            std::vector<float>(n, 0.0f));
  std::vector<float> params(n, 0.5f);
  std::unique_ptr<Device> device = *CreateDevice(DeviceOptions());
  std::unique_ptr<Optimizer> optimizer = *CreateOptimizer(TestOptimizer());
  EXPECT_TRUE(optimizer->Bind(*device, n).ok());
  Reference reference;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> sum(n, 0.0f);
    std::vector<int64_t> sent(job.workers, 0);
    for (int r = 0; r < job.workers; ++r) {
      const std::vector<float> grads = Gradients(layout, r, step);
      for (const Bucket& bucket : layout.buckets()) {
        const absl::Span<const float> slice(grads.data() + bucket.offset,
                                            bucket.numel);
        EncodedBucket encoded;
        if (bucket.sparse_row_width > 0) {
          encoded = SparseRowsOf(slice, bucket.sparse_row_width);
        } else {
          EXPECT_TRUE(compressor
                          .Encode(slice,
                                  absl::MakeSpan(residuals[r].data() +
                                                     bucket.offset,
                                                 bucket.numel),
                                  step, bucket.index, &encoded)
                          .ok());
        }
        EXPECT_TRUE(AddDecoded(encoded, absl::MakeSpan(sum.data() +
                                                           bucket.offset,
                                                       bucket.numel))
                        .ok());
        for (const PsKey& key : partition.keys()) {
          if (key.bucket != bucket.index) continue;
          const KeyEncoding coding = KeyEncodingOf(spec, pull, job.mode,
                                                   key.row_width, key.numel);
          if (!coding.encoded_push) {
            sent[r] += 4 * key.numel;
            continue;
          }
          sent[r] += static_cast<int64_t>(
              (*SplitIntoKeys(encoded, {{key.offset - bucket.offset,
                                         key.numel}}))[0]
                  .size());
        }
      }
    }
    std::vector<float> average(n);
    for (int64_t i = 0; i < n; ++i) {
      average[i] = sum[i] / static_cast<float>(job.workers);
    }
    std::vector<float> pulled = average;
    int64_t received = 0;
    for (const PsKey& key : partition.keys()) {
      const KeyEncoding coding =
          KeyEncodingOf(spec, pull, job.mode, key.row_width, key.numel);
      if (!coding.encoded_result()) {
        received += 4 * key.numel;
        continue;
      }
      const std::string result = EncodeKeyResult(
          absl::MakeConstSpan(average.data() + key.offset, key.numel), coding);
      received += static_cast<int64_t>(result.size());
      EXPECT_TRUE(DecodeKeyResult(result, absl::MakeSpan(pulled.data() +
                                                             key.offset,
                                                         key.numel))
                      .ok());
    }
    if (job.mode == ps::UPDATE_SERVER) {
      optimizer->Step(params.data(), average.data(), TestOptimizer().lr);
      pulled = params;
    }
    reference.per_step.push_back(pulled);
    reference.bytes_sent.push_back(sent);
    reference.bytes_recv.push_back(received);
  }
  return reference;
}

void CheckJob(const Job& job) {
  SCOPED_TRACE(absl::StrCat(job.compression, " pull ", PsPullName(job.pull),
                            " N=", job.workers, " K=", job.servers,
                            job.mode == ps::UPDATE_SERVER ? " server" : "",
                            job.table ? " table" : "",
                            job.table_only ? " table only" : ""));
  const std::vector<WorkerResult> results = RunJob(job);
  ASSERT_EQ(results.size(), static_cast<size_t>(job.workers));
  const Reference reference = Expected(job);
  const bool exact = job.compression != "onebit";
  for (int r = 0; r < job.workers; ++r) {
    ASSERT_TRUE(results[r].status.ok())
        << "worker " << r << ": " << results[r].status;
    ASSERT_EQ(results[r].per_step.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      const std::vector<float>& got = results[r].per_step[step];
      const std::vector<float>& want = reference.per_step[step];
      if (exact) {
        ASSERT_EQ(got, want) << "worker " << r << " step " << step;
      } else {
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])))
              << "worker " << r << " step " << step << " float " << i;
        }
      }
      ASSERT_EQ(got, results[0].per_step[step]) << "workers differ";
      // Payload counted as sent: the encodings' bytes, exactly.
      EXPECT_EQ(results[r].bytes_sent[step], reference.bytes_sent[step][r])
          << "worker " << r << " step " << step;
      EXPECT_EQ(results[r].bytes_recv[step], reference.bytes_recv[step])
          << "worker " << r << " step " << step;
    }
  }
}

class PsCompressionTest
    : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  Job MakeJob(const std::string& compression, PsPull pull = PsPull::kAuto) {
    Job job;
    job.workers = std::get<0>(GetParam());
    job.servers = std::get<1>(GetParam());
    job.compression = compression;
    job.pull = pull;
    return job;
  }
};

TEST_P(PsCompressionTest, NoneIsFloat32AsBefore) {
  const Job job = MakeJob("none");
  CheckJob(job);
  // Exactly the plain average, 4 bytes a float both ways.
  const Reference reference = Expected(job);
  const int64_t numel = ParamLayout::Create(Specs(job), kBucketBytes)
                            ->total_numel();
  EXPECT_EQ(reference.bytes_sent[0][0], 4 * numel);
  EXPECT_EQ(reference.bytes_recv[0], 4 * numel);
}

TEST_P(PsCompressionTest, TopKUnionIsTheExactSumOfTheEncodings) {
  CheckJob(MakeJob("topk:0.25"));
}

TEST_P(PsCompressionTest, TopKPullIsTopKOfTheSum) {
  CheckJob(MakeJob("topk:0.25", PsPull::kTopK));
}

TEST_P(PsCompressionTest, TopKDensePull) {
  CheckJob(MakeJob("topk:0.25", PsPull::kDense));
}

TEST_P(PsCompressionTest, RandomKUnion) { CheckJob(MakeJob("randomk:0.3")); }

TEST_P(PsCompressionTest, Fp16AndBf16PullTheAverageRoundedOnce) {
  CheckJob(MakeJob("fp16"));
  CheckJob(MakeJob("bf16"));
}

TEST_P(PsCompressionTest, OneBitPullsTheFloat32Sum) {
  CheckJob(MakeJob("onebit"));
}

TEST_P(PsCompressionTest, ServerModeStepsOnTheDecodedSum) {
  Job job = MakeJob("topk:0.25");
  job.mode = ps::UPDATE_SERVER;
  CheckJob(job);
}

// The embedding table moves only its touched rows both ways, and the
// result is the dense reference's (its rows are summed exactly).
TEST_P(PsCompressionTest, RowSparseTableMovesOnlyTouchedRows) {
  for (const char* compression : {"none", "topk:0.25"}) {
    Job job = MakeJob(compression);
    job.table = true;
    CheckJob(job);
    const ParamLayout layout = *ParamLayout::Create(Specs(job), kBucketBytes);
    const Reference reference = Expected(job);
    if (job.compression == "none") {
      // Fewer bytes than the dense table: 240 floats, of which each worker
      // touches at most 6 rows of 6 per step.
      EXPECT_LT(reference.bytes_sent[0][0], 4 * layout.total_numel());
      Job dense = job;
      dense.table = false;
      const int64_t dense_numel =
          ParamLayout::Create(Specs(dense), kBucketBytes)->total_numel();
      const int64_t table_bytes = reference.bytes_sent[0][0] - 4 * dense_numel;
      // Worker 0, step 0: each of the table's keys (2 rows each: 64-byte
      // chunks cut on rows of 6) carries its encoding's 21-byte header, and
      // each touched row its index and 6 floats; untouched rows nothing.
      int64_t touched = 0;
      for (int64_t row = 0; row < 40; ++row) touched += (row * 3) % 7 == 0;
      const int64_t table_keys = 40 / 2;
      EXPECT_EQ(table_bytes, table_keys * 21 + touched * (4 + 4 * kRowWidth));
      EXPECT_LT(table_bytes, 4 * 40 * kRowWidth);
    }
  }
}

// A layout of only row-sparse tensors (what --sync=hybrid hands the PS),
// in both update modes.
TEST_P(PsCompressionTest, LayoutOfOnlyARowSparseTable) {
  for (ps::UpdateMode mode : {ps::UPDATE_WORKER, ps::UPDATE_SERVER}) {
    Job job = MakeJob("none");
    job.table_only = true;
    job.mode = mode;
    CheckJob(job);
  }
}

// --schedule=priority sends each key's encoding on its own, in offset
// order under a credit of one key: the same results and the same bytes.
TEST_P(PsCompressionTest, PriorityMovesTheSameEncodings) {
  for (const char* compression : {"topk:0.25", "fp16", "onebit", "none"}) {
    SCOPED_TRACE(compression);
    Job job = MakeJob(compression);
    job.table = std::string(compression) == "none";
    job.send_schedule.kind = ScheduleKind::kPriority;
    job.send_schedule.credit_bytes = kChunkBytes;
    CheckJob(job);
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersServers, PsCompressionTest,
                         ::testing::Values(std::make_tuple(2, 1),
                                           std::make_tuple(2, 2),
                                           std::make_tuple(3, 1),
                                           std::make_tuple(3, 2)));

// The error-feedback residual is saved beside the trainer's checkpoints by
// every worker and restored on --resume: two steps, a resume, two more give
// the gradients of four straight steps; a lost residual file is refused.
TEST(PsCompressionResumeTest, ResidualSurvivesACheckpointOnEveryWorker) {
  Job straight;
  straight.workers = 2;
  straight.servers = 2;
  straight.compression = "topk:0.2";
  straight.steps = 4;
  const std::vector<WorkerResult> whole = RunJob(straight);
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_TRUE(whole[0].status.ok()) << whole[0].status;

  const std::string path = absl::StrCat(testing::TempDir(), "/ps_resume_",
                                        ::getpid(), ".ckpt");
  Job first = straight;
  first.steps = 2;
  first.schedule.checkpoint_path = path;
  first.schedule.checkpoint_every = 2;
  first.schedule.steps_per_epoch = 100;
  first.schedule.total_steps = 4;
  for (const WorkerResult& result : RunJob(first)) {
    ASSERT_TRUE(result.status.ok()) << result.status;
  }
  Job second = first;
  second.schedule.resume = true;
  second.schedule.start_step = 2;
  const std::vector<WorkerResult> resumed = RunJob(second);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status;
    ASSERT_EQ(resumed[r].per_step.size(), 2u);
    EXPECT_EQ(resumed[r].per_step[0], whole[r].per_step[2]) << "worker " << r;
    EXPECT_EQ(resumed[r].per_step[1], whole[r].per_step[3]) << "worker " << r;
  }
  const std::string lost = ErrorFeedback::PathFor(path, 1);
  ASSERT_EQ(std::remove(lost.c_str()), 0);
  std::remove((lost + ".previous").c_str());
  second.timeout = absl::Seconds(3);  // worker 0 waits for worker 1 in vain
  second.fails = true;
  const std::vector<WorkerResult> refused = RunJob(second);
  ASSERT_EQ(refused.size(), 2u);
  ASSERT_FALSE(refused[1].status.ok());
  EXPECT_THAT(std::string(refused[1].status.message()), HasSubstr(lost));
  for (int r = 0; r < 2; ++r) {
    std::remove(ErrorFeedback::PathFor(path, r).c_str());
    std::remove((ErrorFeedback::PathFor(path, r) + ".previous").c_str());
  }
}

TEST(PsCompressionRefusalTest, TopKPullNeedsSparseCompressionAndWorkerMode) {
  SyncContext context;
  PsSyncOptions options;
  options.pull = PsPull::kTopK;
  absl::StatusOr<std::unique_ptr<GradientSync>> sync =
      CreatePsSync(context, options);
  ASSERT_FALSE(sync.ok());
  EXPECT_THAT(std::string(sync.status().message()),
              HasSubstr("--ps_pull=topk with --compression=none"));
  context.compression = *CompressionSpec::Parse("topk:0.01");
  options.update_mode = ps::UPDATE_SERVER;
  options.optimizer = TestOptimizer();
  sync = CreatePsSync(context, options);
  ASSERT_FALSE(sync.ok());
  EXPECT_THAT(std::string(sync.status().message()),
              HasSubstr("--ps_update=server"));
}

}  // namespace
}  // namespace gradsync
