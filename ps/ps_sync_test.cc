// --sync=ps end to end over real gRPC on 127.0.0.1: a coordinator, K
// parameter servers and N workers as threads of this process. Gradients are
// small integers, so every sum is exact and the average must equal sum / N
// computed in float, bit for bit, on every worker.
#include "ps/ps_sync.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/train/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ps/loopback_cluster.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Sizes not divisible by the chunk (16 floats), the message (6 floats) or
// any K; a one-float tensor; three buckets.
std::vector<ParamSpec> TestSpecs() {
  return {{"a", {1}}, {"b", {37}}, {"c", {5, 7}}, {"d", {1030}}};
}
constexpr int64_t kBucketBytes = 160;
constexpr int64_t kChunkBytes = 64;
constexpr int64_t kMessageBytes = 24;

float Gradient(int rank, int step, int64_t i) {
  return static_cast<float>((rank + 1) * (i % 5 + 1) + step - 2);
}

float InitialParam(int64_t i) {
  return 0.01f * static_cast<float>(i % 13) - 0.05f;
}

struct WorkerResult {
  absl::Status status;
  std::vector<std::vector<float>> per_step;  // grads or params after Finish
  std::string summary;
};

struct JobSpec {
  int workers = 1;
  int servers = 1;
  ps::UpdateMode mode = ps::UPDATE_WORKER;
  bool colocate = false;
  int steps = 3;
  std::vector<ParamSpec> specs = TestSpecs();
  absl::Duration timeout = absl::Seconds(20);
  // Worker that joins and registers but never pushes (-1: none).
  int silent_worker = -1;
};

OptimizerOptions TestOptimizer() {
  OptimizerOptions options;
  options.kind = "sgd";
  options.lr = 0.1f;
  options.momentum = 0.9f;
  options.weight_decay = 0.01f;
  return options;
}

WorkerResult RunWorker(LoopbackCluster& cluster, const JobSpec& job, int rank) {
  WorkerResult result;
  auto fail = [&](const absl::Status& status) {
    result.status = status;
    return result;
  };
  absl::StatusOr<SyncContext> context = cluster.JoinWorker(rank);
  if (!context.ok()) return fail(context.status());
  PsSyncOptions options;
  options.update_mode = job.mode;
  options.chunk_bytes = kChunkBytes;
  options.message_bytes = kMessageBytes;
  options.optimizer = TestOptimizer();
  options.colocate = job.colocate;
  auto sync = CreatePsSync(*context, options);
  if (!sync.ok()) return fail(sync.status());
  auto layout = ParamLayout::Create(job.specs, kBucketBytes);
  if (!layout.ok()) return fail(layout.status());
  auto device = CreateDevice(DeviceOptions());
  if (!device.ok()) return fail(device.status());
  std::vector<float> params(layout->total_numel());
  std::vector<float> grads(layout->total_numel());
  for (size_t i = 0; i < params.size(); ++i) params[i] = InitialParam(i);
  absl::Status status =
      (*sync)->Setup(*layout, **device, {grads.data(), params.data()});
  if (!status.ok()) return fail(status);
  EXPECT_EQ((*sync)->UpdatesParameters(), job.mode == ps::UPDATE_SERVER);
  if (rank != job.silent_worker) {
    for (int step = 0; step < job.steps; ++step) {
      for (size_t i = 0; i < grads.size(); ++i)
        grads[i] = Gradient(rank, step, i);
      for (const Bucket& bucket : layout->buckets())
        (*sync)->BucketReady(bucket.index);
      StepStats stats;
      status = (*sync)->Finish(stats);
      if (!status.ok()) {
        result.status = status;
        break;
      }
      EXPECT_GT(stats.bytes_sent, 0);
      result.per_step.push_back(job.mode == ps::UPDATE_SERVER ? params : grads);
    }
  }
  absl::Status shutdown = (*sync)->Shutdown();
  if (result.status.ok()) result.status = shutdown;
  result.summary = (*sync)->SummaryJson();
  return result;
}

// Runs the job; returns each worker's result.
std::vector<WorkerResult> RunJob(const JobSpec& job,
                                 absl::Status* cluster_status) {
  LoopbackClusterOptions options;
  options.num_workers = job.workers;
  options.num_servers = job.colocate ? 0 : job.servers;
  options.job_id = "ps-sync-test";
  options.timeout = job.timeout;
  options.message_bytes = kMessageBytes;
  auto cluster = LoopbackCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  std::vector<WorkerResult> results(job.workers);
  std::vector<std::thread> threads;
  for (int r = 0; r < job.workers; ++r) {
    threads.emplace_back([&, r] { results[r] = RunWorker(**cluster, job, r); });
  }
  for (std::thread& thread : threads) thread.join();
  *cluster_status = (*cluster)->Finish();
  return results;
}

// The averaged gradient (worker mode) or the parameters after the optimizer
// (server mode) that every worker must hold after each step.
std::vector<std::vector<float>> Expected(const JobSpec& job) {
  auto layout = ParamLayout::Create(job.specs, kBucketBytes);
  const int64_t n = layout->total_numel();
  std::vector<float> params(n);
  for (int64_t i = 0; i < n; ++i) params[i] = InitialParam(i);
  auto device = CreateDevice(DeviceOptions());
  auto optimizer = CreateOptimizer(TestOptimizer());
  EXPECT_TRUE((*optimizer)->Bind(**device, n).ok());
  std::vector<std::vector<float>> expected;
  for (int step = 0; step < job.steps; ++step) {
    std::vector<float> average(n);
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < job.workers; ++r) sum += Gradient(r, step, i);
      average[i] = sum / static_cast<float>(job.workers);
    }
    if (job.mode == ps::UPDATE_SERVER) {
      (*optimizer)->Step(params.data(), average.data(), TestOptimizer().lr);
      expected.push_back(params);
    } else {
      expected.push_back(average);
    }
  }
  return expected;
}

void CheckJob(const JobSpec& job) {
  absl::Status cluster_status;
  std::vector<WorkerResult> results = RunJob(job, &cluster_status);
  ASSERT_EQ(results.size(), static_cast<size_t>(job.workers));
  const std::vector<std::vector<float>> expected = Expected(job);
  for (int r = 0; r < job.workers; ++r) {
    ASSERT_TRUE(results[r].status.ok())
        << "worker " << r << ": " << results[r].status;
    ASSERT_EQ(results[r].per_step.size(), expected.size());
    for (size_t step = 0; step < expected.size(); ++step) {
      // Exact: the sums are of small integers, and the server-side optimizer
      // is core's arithmetic on the same floats.
      ASSERT_EQ(results[r].per_step[step], expected[step])
          << "worker " << r << " step " << step;
      // And so every worker holds the same buffer.
      ASSERT_EQ(results[r].per_step[step], results[0].per_step[step]);
    }
    EXPECT_EQ(nlohmann::json::parse(results[r].summary).value("strategy", ""),
              "ps");
  }
  EXPECT_TRUE(cluster_status.ok()) << cluster_status;
}

class PsSyncMatrixTest
    : public ::testing::TestWithParam<std::tuple<int, int, ps::UpdateMode>> {};

TEST_P(PsSyncMatrixTest, EveryWorkerHoldsTheExactResult) {
  JobSpec job;
  job.workers = std::get<0>(GetParam());
  job.servers = std::get<1>(GetParam());
  job.mode = std::get<2>(GetParam());
  CheckJob(job);
}

INSTANTIATE_TEST_SUITE_P(
    WorkersServersModes, PsSyncMatrixTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                       ::testing::Values(1, 2, 3, 4),
                       ::testing::Values(ps::UPDATE_WORKER, ps::UPDATE_SERVER)),
    [](const auto& info) {
      return absl::StrCat(
          "N", std::get<0>(info.param), "_K", std::get<1>(info.param), "_",
          std::get<2>(info.param) == ps::UPDATE_SERVER ? "server" : "worker");
    });

// One one-float parameter over four servers: three servers hold no key, get
// no push or pull, and still see every worker register and shut down.
TEST(PsSyncTest, ServersWithoutKeys) {
  JobSpec job;
  job.workers = 2;
  job.servers = 4;
  job.specs = {{"only", {1}}};
  CheckJob(job);
  job.mode = ps::UPDATE_SERVER;
  CheckJob(job);
}

TEST(PsSyncTest, ColocatedServers) {
  JobSpec job;
  job.workers = 3;
  job.colocate = true;
  CheckJob(job);
  job.mode = ps::UPDATE_SERVER;
  CheckJob(job);
}

// A worker that registers but never pushes: the others fail after the
// deadline with an error that names it, instead of hanging.
TEST(PsSyncTest, SilentWorkerIsNamedAfterTheDeadline) {
  JobSpec job;
  job.workers = 3;
  job.servers = 2;
  job.steps = 1;
  job.silent_worker = 2;
  job.timeout = absl::Seconds(2);
  absl::Status cluster_status;
  std::vector<WorkerResult> results = RunJob(job, &cluster_status);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].status.code(), absl::StatusCode::kDeadlineExceeded)
        << results[r].status;
    EXPECT_THAT(std::string(results[r].status.message()),
                HasSubstr("worker 2 did not push"));
    EXPECT_THAT(std::string(results[r].status.message()),
                HasSubstr(absl::StrCat("worker ", r, ": pull of bucket")));
  }
  EXPECT_TRUE(results[2].status.ok()) << results[2].status;
}

}  // namespace
}  // namespace gradsync
