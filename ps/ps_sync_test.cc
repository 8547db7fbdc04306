// --sync=ps end to end over real gRPC on 127.0.0.1: a coordinator, K
// parameter servers and N workers as threads of this process. Gradients are
// small integers, so every sum is exact and the average must equal sum / N
// computed in float, bit for bit, on every worker.
#include "ps/ps_sync.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/optim/optimizer.h"
#include "core/telemetry/trace.h"
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
  // JobSpec::wait_buckets: each bucket's range as it stood right after its
  // own WaitBucket, before the step's Finish (the next forward's view).
  std::vector<std::vector<float>> per_step_early;
  std::vector<double> staleness;  // SSP/ASP: per step
  std::string summary;
};

struct JobSpec {
  int workers = 1;
  int servers = 1;
  ps::UpdateMode mode = ps::UPDATE_WORKER;
  bool colocate = false;
  int colocated_servers = 0;  // beside `servers` separate ones
  PartitionPolicy partition = PartitionPolicy::kEqual;
  int steps = 3;
  std::vector<ParamSpec> specs = TestSpecs();
  absl::Duration timeout = absl::Seconds(20);
  // Worker that joins and registers but never pushes (-1: none).
  int silent_worker = -1;
  ConsistencyOptions consistency;
  // > 0: from step 1 on, the buckets of this cap (GradientSync::Rebucket).
  int64_t rebucket_bytes = 0;
  // Called by each worker before it starts a step and after it finished one.
  std::function<void(int rank, int step)> before_step;
  std::function<void(int rank, int step)> after_step;
  // Hands a step's buckets over; unset: BucketReady for each, in the
  // layout's order (backward's). A failure ends the worker's job.
  std::function<absl::Status(int rank, GradientSync& sync,
                             const ParamLayout& layout)>
      hand_over;
  // --schedule, --partition_kb, --credit_kb (SyncContext::schedule).
  ScheduleOptions schedule;
  // Wait for each bucket on its own, in the next forward's order (the last
  // bucket, the first layers, first), before Finish: the trainer's
  // --overlap_next_forward.
  bool wait_buckets = false;
};

// --schedule=priority with `credit_bytes` (0: derived) and the keys of
// options.chunk_bytes.
ScheduleOptions Priority(int64_t credit_bytes) {
  ScheduleOptions schedule;
  schedule.kind = ScheduleKind::kPriority;
  schedule.credit_bytes = credit_bytes;
  return schedule;
}

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
  context->schedule = job.schedule;
  PsSyncOptions options;
  options.update_mode = job.mode;
  options.chunk_bytes = kChunkBytes;
  options.message_bytes = kMessageBytes;
  options.optimizer = TestOptimizer();
  options.colocate = job.colocate;
  options.colocated_servers = job.colocated_servers;
  options.partition = job.partition;
  options.consistency = job.consistency;
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
      if (job.before_step) job.before_step(rank, step);
      if (step == 1 && job.rebucket_bytes > 0) {
        layout = ParamLayout::Create(job.specs, job.rebucket_bytes);
        if (!layout.ok()) return fail(layout.status());
        status = (*sync)->Rebucket(*layout);
        if (!status.ok()) return fail(status);
      }
      for (size_t i = 0; i < grads.size(); ++i)
        grads[i] = Gradient(rank, step, i);
      if (job.hand_over) {
        status = job.hand_over(rank, **sync, *layout);
        if (!status.ok()) {
          result.status = status;
          break;
        }
      } else {
        for (const Bucket& bucket : layout->buckets())
          (*sync)->BucketReady(bucket.index);
      }
      if (job.wait_buckets) {
        const std::vector<float>& buffer =
            job.mode == ps::UPDATE_SERVER ? params : grads;
        std::vector<float> early(buffer.size());
        for (int b = static_cast<int>(layout->buckets().size()) - 1; b >= 0;
             --b) {
          status = (*sync)->WaitBucket(b);
          if (!status.ok()) break;
          const Bucket& bucket = layout->buckets()[b];
          std::copy(buffer.begin() + bucket.offset,
                    buffer.begin() + bucket.offset + bucket.numel,
                    early.begin() + bucket.offset);
        }
        if (!status.ok()) {
          result.status = status;
          break;
        }
        result.per_step_early.push_back(std::move(early));
      }
      StepStats stats;
      status = (*sync)->Finish(stats);
      if (!status.ok()) {
        result.status = status;
        break;
      }
      EXPECT_GT(stats.bytes_sent, 0);
      result.per_step.push_back(job.mode == ps::UPDATE_SERVER ? params : grads);
      for (const auto& [name, value] : stats.extra) {
        if (name == "staleness") result.staleness.push_back(value);
      }
      if (job.after_step) job.after_step(rank, step);
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
  options.colocated_servers = job.colocated_servers;
  options.job_id = "ps-sync-test";
  options.timeout = job.timeout;
  options.message_bytes = kMessageBytes;
  auto cluster = LoopbackCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  std::vector<WorkerResult> results = (*cluster)->RunEveryWorker(
      [&](int rank) { return RunWorker(**cluster, job, rank); });
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
      // Each bucket was already final when its own wait returned.
      if (job.wait_buckets) {
        ASSERT_EQ(results[r].per_step_early.at(step), expected[step])
            << "worker " << r << " step " << step << ", per bucket";
      }
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

// With a --trace recorder published, the client records each push (to a
// server, until the server took all of it) and each key's result (from the
// pull's start to its last float) for every step: the timeline that shows
// which server's key a worker waited for.
TEST(PsSyncTest, TraceShowsEveryPushAndEveryKeysResult) {
  TraceRecorder trace(0, "test");
  SetCurrentTrace(&trace);
  JobSpec job;
  job.workers = 2;
  job.servers = 2;
  job.specs = {{"w", {64}}};  // 4 keys of 16 floats (kChunkBytes), 2 a server
  CheckJob(job);
  SetCurrentTrace(nullptr);
  const nlohmann::json document = nlohmann::json::parse(trace.ToJson());
  std::map<std::string, int> begun;
  for (const auto& event : document["traceEvents"]) {
    if (event.value("ph", "") == "b") ++begun[event.value("name", "")];
  }
  for (int step = 0; step < job.steps; ++step) {
    for (int server = 0; server < 2; ++server) {
      EXPECT_EQ(begun[absl::StrCat("push to server ", server, ", step ", step)],
                job.workers)
          << "step " << step << " server " << server;
    }
    int results = 0;
    for (const auto& [name, count] : begun) {
      if (absl::StrContains(name, " from server ") &&
          absl::EndsWith(name, absl::StrCat(", step ", step))) {
        results += count;
      }
    }
    EXPECT_EQ(results, 4 * job.workers) << "step " << step;
  }
}

// One one-float parameter over four servers: three servers hold no key, get
// no push or pull, and still see every worker register and shut down.
// --autotune's regrouping: the servers' keys stay, only the workers' buckets
// change, and the results stay exact.
TEST(PsSyncTest, RebucketedWorkersKeepTheExactResult) {
  for (int64_t bytes : {int64_t{64}, int64_t{1} << 20}) {
    JobSpec job;
    job.workers = 3;
    job.servers = 2;
    job.rebucket_bytes = bytes;
    CheckJob(job);
  }
}

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

// `job` with each (colocated, separate) server layout, in both update modes.
void CheckPlacements(JobSpec job,
                     const std::vector<std::pair<int, int>>& layouts) {
  for (const auto& [colocated, separate] : layouts) {
    SCOPED_TRACE(absl::StrCat(colocated, " colocated + ", separate,
                              " separate servers"));
    job.colocated_servers = colocated;
    job.servers = separate;
    for (ps::UpdateMode mode : {ps::UPDATE_WORKER, ps::UPDATE_SERVER}) {
      job.mode = mode;
      CheckJob(job);
    }
  }
}

// BytePS's placement spectrum: the first k workers serve, beside K - k
// separate servers; keys over all K, the same exact results.
TEST(PsSyncTest, SomeWorkersServeBesideSeparateServers) {
  JobSpec job;
  job.workers = 4;
  CheckPlacements(job, {{2, 1}, {1, 3}, {2, 0}, {4, 2}});
}

// Balanced shares (--ps_partition=balanced) move keys between servers, not
// their sums: the same exact results, and the serving workers hold less.
TEST(PsSyncTest, BalancedPartitionGivesTheSameResults) {
  JobSpec job;
  job.workers = 4;
  job.partition = PartitionPolicy::kBalanced;
  CheckPlacements(job, {{2, 2}, {4, 2}, {1, 3}});
  job.colocated_servers = 4;
  job.servers = 2;
  job.mode = ps::UPDATE_WORKER;
  absl::Status cluster_status;
  std::vector<WorkerResult> results = RunJob(job, &cluster_status);
  ASSERT_EQ(results.size(), 4u);
  ASSERT_TRUE(results[0].status.ok()) << results[0].status;
  const nlohmann::json summary = nlohmann::json::parse(results[0].summary);
  EXPECT_EQ(summary.value("partition", ""), "balanced");
  const std::vector<double> shares = summary["server_shares"];
  ASSERT_EQ(shares.size(), 6u);
  EXPECT_NEAR(shares[0], 0.1, 1e-12);
  EXPECT_NEAR(shares[5], 0.3, 1e-12);
  const std::vector<int64_t> bytes = summary["server_key_bytes"];
  EXPECT_LT(bytes[0], bytes[5]);
}

TEST(PsSyncTest, RefusesMoreColocatedServersThanWorkers) {
  JobSpec job;
  job.workers = 2;
  job.servers = 0;
  job.colocated_servers = 3;
  absl::Status cluster_status;
  std::vector<WorkerResult> results = RunJob(job, &cluster_status);
  ASSERT_EQ(results.size(), 2u);
  for (const WorkerResult& result : results) {
    EXPECT_THAT(std::string(result.status.message()),
                HasSubstr("3 colocated servers in a job of 2 workers"));
  }
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

// Steps finished by one worker, which another waits on (with a deadline, so
// a strategy that is stricter than it should be fails instead of hanging).
class StepGate {
 public:
  void Finished(int step) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = step + 1;
    changed_.notify_all();
  }
  bool WaitFor(int steps) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(30),
                             [&] { return done_ >= steps; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int done_ = 0;
};

// SSP over real gRPC: worker 1 starts step t only once worker 0 finished
// step t + s - 1, so worker 0 is always as far ahead as the bound allows.
// Its parameters then lack exactly s of worker 1's steps, never more; a
// stricter server would deadlock the gate (and fail at the deadline), a
// looser one would show a larger staleness.
// Under --schedule=priority too: the per-key pulls keep SSP's bound.
TEST(PsSyncTest, SspWorkerRunsExactlyStalenessAhead) {
  for (const auto& entry : std::vector<std::pair<int, ScheduleOptions>>{
           {1, ScheduleOptions()},
           {3, ScheduleOptions()},
           {2, Priority(kChunkBytes)}}) {
    // Named copies: C++17 lambdas cannot capture structured bindings.
    const int bound = entry.first;
    const ScheduleOptions& schedule = entry.second;
    SCOPED_TRACE(
        absl::StrCat("bound ", bound, ", ", ScheduleKindName(schedule.kind)));
    JobSpec job;
    job.schedule = schedule;
    job.workers = 2;
    job.servers = 2;
    job.mode = ps::UPDATE_SERVER;
    job.steps = 8;
    job.consistency = {ps::CONSISTENCY_SSP, bound};
    StepGate fast;
    job.after_step = [&](int rank, int step) {
      if (rank == 0) fast.Finished(step);
    };
    job.before_step = [&](int rank, int step) {
      if (rank == 1) {
        EXPECT_TRUE(fast.WaitFor(std::min(step + bound, job.steps)))
            << "worker 0 never got " << bound << " steps ahead of step "
            << step;
      }
    };
    absl::Status cluster_status;
    std::vector<WorkerResult> results = RunJob(job, &cluster_status);
    ASSERT_EQ(results.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(results[r].status.ok()) << r << ": " << results[r].status;
      ASSERT_EQ(results[r].staleness.size(), 8u);
      for (double staleness : results[r].staleness) {
        EXPECT_LE(staleness, bound) << "worker " << r;
      }
    }
    EXPECT_EQ(*std::max_element(results[0].staleness.begin(),
                                results[0].staleness.end()),
              bound);
    const nlohmann::json summary = nlohmann::json::parse(results[0].summary);
    EXPECT_EQ(summary["consistency"], "ssp");
    EXPECT_EQ(summary["staleness_max"], bound);
    EXPECT_TRUE(cluster_status.ok()) << cluster_status;
  }
}

// ASP: worker 0 finishes every step before worker 2 starts its first; the
// job completes, and worker 0's last parameters lack all of worker 2's.
TEST(PsSyncTest, AspNeverWaitsForOthers) {
  JobSpec job;
  job.workers = 3;
  job.servers = 2;
  job.mode = ps::UPDATE_SERVER;
  job.steps = 5;
  job.consistency = {ps::CONSISTENCY_ASP, 0};
  StepGate fast;
  job.after_step = [&](int rank, int step) {
    if (rank == 0) fast.Finished(step);
  };
  job.before_step = [&](int rank, int step) {
    if (rank == 2 && step == 0) {
      EXPECT_TRUE(fast.WaitFor(job.steps));
    }
  };
  absl::Status cluster_status;
  std::vector<WorkerResult> results = RunJob(job, &cluster_status);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].status.ok()) << r << ": " << results[r].status;
  }
  ASSERT_EQ(results[0].staleness.size(), 5u);
  EXPECT_EQ(results[0].staleness.back(), 5);
  EXPECT_TRUE(cluster_status.ok()) << cluster_status;
}

// --schedule=priority: every key its own push and pull, queued per server
// lowest offset first under a credit. The sums do not depend on the order:
// the same exact results as fifo, for N x K x update mode, with a credit of
// one key (every key waits its turn) and the derived one.
class PsSyncPriorityTest
    : public ::testing::TestWithParam<std::tuple<int, int, ps::UpdateMode>> {};

TEST_P(PsSyncPriorityTest, EveryWorkerHoldsTheExactResult) {
  for (int64_t credit : {kChunkBytes, int64_t{0}}) {
    SCOPED_TRACE(absl::StrCat("credit ", credit, " B"));
    JobSpec job;
    job.workers = std::get<0>(GetParam());
    job.servers = std::get<1>(GetParam());
    job.mode = std::get<2>(GetParam());
    job.schedule = Priority(credit);
    CheckJob(job);
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorkersServersModes, PsSyncPriorityTest,
    ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 2, 3),
                       ::testing::Values(ps::UPDATE_WORKER, ps::UPDATE_SERVER)),
    [](const auto& info) {
      return absl::StrCat(
          "N", std::get<0>(info.param), "_K", std::get<1>(info.param), "_",
          std::get<2>(info.param) == ps::UPDATE_SERVER ? "server" : "worker");
    });

// The next step starting early under priority: each bucket, waited for on
// its own in the next forward's order, already holds its exact result;
// colocated, mixed and separate servers, both update modes, and the keys
// set by --partition_kb instead of --ps_chunk_kb.
TEST(PsSyncTest, PriorityBucketsAreFinalWhenTheirWaitReturns) {
  JobSpec job;
  job.workers = 3;
  job.wait_buckets = true;
  job.schedule = Priority(kChunkBytes);
  CheckPlacements(job, {{3, 0}, {1, 2}, {0, 2}});
  job.colocated_servers = 0;
  job.servers = 2;
  job.mode = ps::UPDATE_WORKER;
  job.schedule.partition_bytes = kChunkBytes;
  CheckJob(job);
  // And fifo, which the trainer's per-bucket waits use too.
  job.schedule = ScheduleOptions();
  CheckJob(job);
}

TEST(PsSyncTest, PriorityWithColocatedServersAndRebucketing) {
  JobSpec job;
  job.workers = 3;
  job.colocate = true;
  job.schedule = Priority(0);
  CheckJob(job);
  job.colocate = false;
  job.servers = 2;
  job.rebucket_bytes = 64;
  job.schedule = Priority(kChunkBytes);
  CheckJob(job);
}

// Priority order on the timeline, with a pull credit of one key. Worker 0
// hands over bucket 0 (the last layer, 8 keys) and then bucket 1 (the first
// layer, key 0). On each server the pull of bucket 0's lowest key goes out
// at once and waits for worker 1; the others queue as their pushes start,
// and key 0's the moment its push starts. Worker 1 hands over bucket 1
// first and waits for its result, which needs worker 0's push of key 0:
// only then does it hand over bucket 0, so key 0's pull is queued on worker
// 0 before the pull in flight can complete, however the threads are
// scheduled. The server answers worker 0 in the order the pulls reach it,
// so its result spans must show key 0 right after the pull that was already
// in flight, before every other key of bucket 0, and those in ascending
// order. (PsSync lets a worker wait for a bucket before handing over the
// step's others, which the trainer never does: it checks only that the
// bucket was handed over.)
TEST(PsSyncTest, PriorityTraceShowsALateFirstLayerKeyOvertakingQueuedKeys) {
  TraceRecorder trace(0, "test");
  SetCurrentTrace(&trace);
  JobSpec job;
  job.workers = 2;
  job.colocate = true;  // the servers record into this process's timeline
  job.steps = 1;
  // Forward order "first" (1 key, id 0), "last" (8 keys, ids 1..8); the
  // buckets are in backward order: bucket 0 = "last", bucket 1 = "first".
  job.specs = {{"first", {16}}, {"last", {128}}};
  job.schedule = Priority(kChunkBytes);
  job.hand_over = [](int rank, GradientSync& sync,
                     const ParamLayout& layout) -> absl::Status {
    if (rank == 0) {
      for (const Bucket& bucket : layout.buckets())
        sync.BucketReady(bucket.index);
      return absl::OkStatus();
    }
    sync.BucketReady(1);
    absl::Status first_layer = sync.WaitBucket(1);
    sync.BucketReady(0);
    return first_layer;
  };
  CheckJob(job);
  SetCurrentTrace(nullptr);
  // Each key's result to worker 0: which server, and when it started.
  std::map<int, int> server_of;
  std::map<int, std::vector<std::pair<int64_t, int>>> starts;  // by server
  const nlohmann::json document = nlohmann::json::parse(trace.ToJson());
  for (const auto& event : document["traceEvents"]) {
    if (event.value("ph", "") != "b") continue;
    const std::string name = event.value("name", "");
    int server = -1;
    int key = -1;
    if (std::sscanf(name.c_str(),
                    "server %d: result to worker 0, key %d, step 0", &server,
                    &key) == 2) {
      server_of[key] = server;
      starts[server].push_back({event["ts"].get<int64_t>(), key});
    }
  }
  ASSERT_EQ(server_of.size(), 9u) << "every key's result to worker 0";
  std::vector<std::pair<int64_t, int>> order = starts[server_of[0]];
  std::sort(order.begin(), order.end());
  std::vector<int> keys;
  for (const auto& [ts, key] : order) keys.push_back(key);
  ASSERT_GE(keys.size(), 3u) << "key 0 and at least two of bucket 0's keys";
  // Bucket 0's keys on that server, lowest offset (id) first.
  std::vector<int> bucket0(keys);
  bucket0.erase(std::find(bucket0.begin(), bucket0.end(), 0));
  std::sort(bucket0.begin(), bucket0.end());
  std::vector<int> expected = {bucket0[0], 0};
  expected.insert(expected.end(), bucket0.begin() + 1, bucket0.end());
  EXPECT_EQ(keys, expected);
  // The client's pushes name their keys under priority.
  int pushes_of_key0 = 0;
  for (const auto& event : document["traceEvents"]) {
    if (event.value("ph", "") == "b" &&
        event.value("name", "") == absl::StrCat("push of key 0 to server ",
                                                server_of[0], ", step 0")) {
      ++pushes_of_key0;
    }
  }
  EXPECT_EQ(pushes_of_key0, job.workers);
}

TEST(PsSyncTest, PriorityRefusesConflictingKeySizesAndASmallCredit) {
  for (const auto& [partition, credit, message] :
       std::vector<std::tuple<int64_t, int64_t, std::string>>{
           {2 * kChunkBytes, 0, "disagree; on the PS a partition is a key"},
           {0, kChunkBytes / 2, "is smaller than a key"}}) {
    JobSpec job;
    job.workers = 2;
    job.servers = 1;
    job.steps = 1;
    job.schedule = Priority(credit);
    job.schedule.partition_bytes = partition;
    // The servers wait for registrations that never come: not for long.
    job.timeout = absl::Seconds(2);
    absl::Status cluster_status;
    std::vector<WorkerResult> results = RunJob(job, &cluster_status);
    ASSERT_EQ(results.size(), 2u);
    for (const WorkerResult& result : results) {
      EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument)
          << result.status;
      EXPECT_THAT(std::string(result.status.message()), HasSubstr(message));
    }
  }
}

}  // namespace
}  // namespace gradsync
