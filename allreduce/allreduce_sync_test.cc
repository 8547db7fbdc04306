// --sync=ring through the GradientSync seam, as the trainer drives it: one
// thread per worker, buckets marked ready in backward order, Finish, several
// steps; the gradients must come out as the exact average on every worker.
#include "allreduce/allreduce_sync.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/sync_test_context.h"
#include "allreduce/transport/test_cluster.h"
#include "core/base/status_macros.h"
#include "core/device/device.h"
#include "core/device/null_device.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Integer-valued and different per step, rank and element, so sums are exact.
float Gradient(int step, int rank, int64_t i) {
  return static_cast<float>((i * 5 + rank * 11 + step * 3) % 19 - 9);
}

absl::StatusOr<ParamLayout> TestLayout() {
  // Three parameters and a small cap: several buckets, one of them a single
  // parameter larger than the cap.
  return ParamLayout::Create({{"fc1.weight", {300, 7}},
                              {"fc1.bias", {300}},
                              {"fc2.weight", {10, 300}},
                              {"fc2.bias", {10}}},
                             /*bucket_bytes=*/4096);
}

SyncContext ContextFor(TransportTestCluster& cluster, int rank) {
  return TestSyncContext(cluster, rank, absl::Seconds(30));
}

// One rank's --sync=ring over `layout`, set up on its own device with its
// gradient and parameter buffers.
struct RankSync {
  std::unique_ptr<Device> device;
  float* grads = nullptr;
  std::unique_ptr<GradientSync> sync;
};

absl::StatusOr<RankSync> SetUpRing(TransportTestCluster& cluster, int rank,
                                   const ParamLayout& layout) {
  RankSync rank_sync;
  ASSIGN_OR_RETURN(rank_sync.device, CreateDevice(DeviceOptions{}));
  ASSIGN_OR_RETURN(rank_sync.grads,
                   rank_sync.device->Allocate<float>(layout.total_numel()));
  ASSIGN_OR_RETURN(float* params,
                   rank_sync.device->Allocate<float>(layout.total_numel()));
  ASSIGN_OR_RETURN(rank_sync.sync, GradientSyncRegistry::Create(
                                       "ring", ContextFor(cluster, rank)));
  RETURN_IF_ERROR(rank_sync.sync->Setup(
      layout, *rank_sync.device, SyncBuffers{rank_sync.grads, params}));
  return rank_sync;
}

// The first element of `grads` that is not the exact average of step
// `step`'s gradients over `n` ranks, said in words; empty when none.
std::string FirstInexactAverage(const float* grads, int64_t total, int step,
                                int n) {
  for (int64_t i = 0; i < total; ++i) {
    int sum = 0;
    for (int r = 0; r < n; ++r) sum += static_cast<int>(Gradient(step, r, i));
    const float want = static_cast<float>(sum) * (1.0f / n);
    if (grads[i] != want) {
      return absl::StrCat("step ", step, " element ", i, ": ", grads[i],
                          " want ", want);
    }
  }
  return "";
}

void ExpectEveryRankOk(const std::vector<absl::Status>& results,
                       const std::vector<std::string>& problems) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
    EXPECT_EQ(problems[rank], "") << "rank " << rank;
  }
}

class AllReduceSyncTest : public testing::TestWithParam<int> {};

TEST_P(AllReduceSyncTest, EveryWorkerGetsTheExactAverageEveryStep) {
  const int n = GetParam();
  const int steps = 3;
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_GT(layout->buckets().size(), 2u);
  const int64_t total = layout->total_numel();
  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  std::vector<std::string> problems(n);
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    ASSIGN_OR_RETURN(RankSync ring, SetUpRing(**cluster, rank, *layout));
    float* grads = ring.grads;
    GradientSync* sync = ring.sync.get();
    for (int step = 0; step < steps; ++step) {
      for (int64_t i = 0; i < total; ++i) grads[i] = Gradient(step, rank, i);
      // Buckets are numbered in the order backward finishes them.
      for (const Bucket& bucket : layout->buckets())
        sync->BucketReady(bucket.index);
      StepStats stats;
      RETURN_IF_ERROR(sync->Finish(stats));
      const std::string inexact = FirstInexactAverage(grads, total, step, n);
      if (!inexact.empty()) {
        problems[rank] = inexact;
        return absl::OkStatus();
      }
      // Per bucket of c floats cut into N segments: reduce-scatter sends all
      // segments but (r+1), all-gather all but (r+2); received likewise all
      // but r, then all but (r+1). A single worker moves nothing.
      int64_t want_sent = 0;
      int64_t want_received = 0;
      if (n > 1) {
        for (const Bucket& bucket : layout->buckets()) {
          auto segment = [&](int s) {
            return bucket.numel / n + (s % n < bucket.numel % n ? 1 : 0);
          };
          want_sent +=
              4 * (2 * bucket.numel - segment(rank + 1) - segment(rank + 2));
          want_received +=
              4 * (2 * bucket.numel - segment(rank) - segment(rank + 1));
        }
      }
      if (stats.bytes_sent != want_sent || stats.bytes_recv != want_received) {
        problems[rank] = absl::StrCat(
            "step ", step, ": sent ", stats.bytes_sent, " (want ", want_sent,
            "), received ", stats.bytes_recv, " (want ", want_received, ")");
      }
      bool has_allreduce_ms = false;
      for (const auto& entry : stats.extra) {
        if (entry.first == "allreduce_ms") has_allreduce_ms = true;
      }
      if (!has_allreduce_ms) problems[rank] = "no allreduce_ms in StepStats";
    }
    return sync->Shutdown();
  });
  ExpectEveryRankOk(results, problems);
}

// The trainer's next forward waits per bucket, first layers first: each
// bucket's average is in place when its WaitBucket returns, before Finish.
TEST(AllReduceSyncWaitBucketTest, EachBucketIsAveragedWhenItsWaitReturns) {
  const int n = 3;
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int num_buckets = static_cast<int>(layout->buckets().size());
  const int64_t total = layout->total_numel();
  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::string> problems(n);
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                     CreateDevice(DeviceOptions{}));
    ASSIGN_OR_RETURN(float* grads, device->Allocate<float>(total));
    ASSIGN_OR_RETURN(
        std::unique_ptr<GradientSync> sync,
        GradientSyncRegistry::Create("ring", ContextFor(**cluster, rank)));
    RETURN_IF_ERROR(sync->Setup(*layout, *device, SyncBuffers{grads, nullptr}));
    for (int step = 0; step < 2; ++step) {
      for (int64_t i = 0; i < total; ++i) grads[i] = Gradient(step, rank, i);
      for (int b = 0; b < num_buckets; ++b) sync->BucketReady(b);
      for (int b = num_buckets - 1; b >= 0; --b) {
        RETURN_IF_ERROR(sync->WaitBucket(b));
        const Bucket& bucket = layout->buckets()[b];
        for (int64_t i = bucket.offset; i < bucket.offset + bucket.numel;
             ++i) {
          int sum = 0;
          for (int r = 0; r < n; ++r)
            sum += static_cast<int>(Gradient(step, r, i));
          const float want = static_cast<float>(sum) * (1.0f / n);
          if (grads[i] != want && problems[rank].empty()) {
            problems[rank] = absl::StrCat("step ", step, " bucket ", b,
                                          " element ", i, ": ", grads[i],
                                          " want ", want);
          }
        }
      }
      StepStats stats;
      RETURN_IF_ERROR(sync->Finish(stats));
    }
    return sync->Shutdown();
  });
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
    EXPECT_EQ(problems[rank], "") << "rank " << rank;
  }
}

TEST(AllReduceSyncWaitBucketTest, ABucketNotHandedOverIsAnError) {
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<float> grads(layout->total_numel(), 1.0f);
  SyncContext context;  // one worker: no coordinator needed
  auto sync = GradientSyncRegistry::Create("ring", context);
  ASSERT_TRUE(sync.ok()) << sync.status();
  ASSERT_TRUE((*sync)
                  ->Setup(*layout, **device, SyncBuffers{grads.data(), nullptr})
                  .ok());
  (*sync)->BucketReady(0);
  EXPECT_TRUE((*sync)->WaitBucket(0).ok());
  const absl::Status status = (*sync)->WaitBucket(1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("WaitBucket(1)"));
  for (int b = 1; b < static_cast<int>(layout->buckets().size()); ++b)
    (*sync)->BucketReady(b);
  StepStats stats;
  const absl::Status finished = (*sync)->Finish(stats);
  EXPECT_TRUE(finished.ok()) << finished;
}

// --autotune regroups the buckets between steps; the averages stay exact
// and the new buckets are the ones that must be handed over.
TEST(AllReduceSyncRebucketTest, AfterRebucketTheNewBucketsAreAveraged) {
  const int n = 2;
  auto fine = TestLayout();
  ASSERT_TRUE(fine.ok()) << fine.status();
  auto coarse = ParamLayout::Create({{"fc1.weight", {300, 7}},
                                     {"fc1.bias", {300}},
                                     {"fc2.weight", {10, 300}},
                                     {"fc2.bias", {10}}},
                                    /*bucket_bytes=*/1 << 20);
  ASSERT_TRUE(coarse.ok()) << coarse.status();
  ASSERT_EQ(coarse->buckets().size(), 1u);
  const int64_t total = fine->total_numel();
  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::string> problems(n);
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    ASSIGN_OR_RETURN(RankSync ring, SetUpRing(**cluster, rank, *fine));
    float* grads = ring.grads;
    GradientSync* sync = ring.sync.get();
    const ParamLayout* layouts[] = {&*fine, &*coarse, &*fine};
    for (int step = 0; step < 3; ++step) {
      if (step > 0) RETURN_IF_ERROR(sync->Rebucket(*layouts[step]));
      for (int64_t i = 0; i < total; ++i) grads[i] = Gradient(step, rank, i);
      for (const Bucket& bucket : layouts[step]->buckets())
        sync->BucketReady(bucket.index);
      StepStats stats;
      RETURN_IF_ERROR(sync->Finish(stats));
      if (problems[rank].empty()) {
        problems[rank] = FirstInexactAverage(grads, total, step, n);
      }
    }
    // Once a bucket of a step was handed over, the grouping stays.
    sync->BucketReady(static_cast<int>(fine->buckets().size()) - 1);
    StepStats stats;
    RETURN_IF_ERROR(sync->Rebucket(*coarse).ok()
                        ? absl::InternalError("Rebucket mid-step accepted")
                        : absl::OkStatus());
    (void)sync->Finish(stats);  // reports the buckets never handed over
    return sync->Shutdown();
  });
  ExpectEveryRankOk(results, problems);
}

INSTANTIATE_TEST_SUITE_P(Workers, AllReduceSyncTest,
                         testing::Values(1, 2, 3, 4),
                         [](const testing::TestParamInfo<int>& info) {
                           return absl::StrCat("N", info.param);
                         });

TEST(AllReduceSyncErrorsTest, FinishBeforeEveryBucketIsReadyIsAnError) {
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<float> grads(layout->total_numel(), 1.0f);
  SyncContext context;  // one worker: no coordinator needed
  auto sync = GradientSyncRegistry::Create("ring", context);
  ASSERT_TRUE(sync.ok()) << sync.status();
  ASSERT_TRUE((*sync)
                  ->Setup(*layout, **device, SyncBuffers{grads.data(), nullptr})
                  .ok());
  (*sync)->BucketReady(0);
  StepStats stats;
  absl::Status status = (*sync)->Finish(stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("before bucket(s) 1, 2"));
}

// A device that claims to be CUDA but is not gradsync's CudaDevice cannot be
// staged; the error names it rather than touching its memory.
TEST(AllReduceSyncErrorsTest, ForeignGpuDeviceIsRefused) {
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  NullDevice device(DeviceType::kCuda, "cuda:0");
  std::vector<float> grads(layout->total_numel());
  auto sync = GradientSyncRegistry::Create("ring", SyncContext{});
  ASSERT_TRUE(sync.ok()) << sync.status();
  absl::Status status =
      (*sync)->Setup(*layout, device, SyncBuffers{grads.data(), nullptr});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("cuda:0"));
}

TEST(AllReduceSyncErrorsTest, SeveralWorkersNeedACoordinator) {
  SyncContext context;
  context.identity.world_size = 2;
  auto sync = GradientSyncRegistry::Create("ring", context);
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradsync
