// The embedding model under --sync=ring, ps and hybrid: two workers (as
// threads, over loopback TCP and an in-process parameter server) with batch b
// each end a few SGD steps with the parameters one worker gets with batch 2b
// on the same samples, within float32 rounding; and --sync=hybrid refuses a
// model without a row-sparse tensor and a job without servers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/data/zipf_bags.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "core/sync/schedule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/loopback_cluster.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 4;
constexpr int kBatchPerWorker = 8;
constexpr float kLearningRate = 0.5f;
// Small enough that the head gets several dense buckets beside the table's.
constexpr int64_t kBucketBytes = 256;

EmbeddingModelOptions ModelOptions() {
  EmbeddingModelOptions o;
  o.vocabulary = 500;
  o.dim = 8;
  o.bag_size = 4;
  o.hidden = 8;
  o.num_classes = 2;
  return o;
}

const DatasetPair& Data() {
  static const DatasetPair* data = [] {
    ZipfBagsOptions o;
    o.vocabulary = ModelOptions().vocabulary;
    o.bag_size = ModelOptions().bag_size;
    o.train_size = kSteps * 2 * kBatchPerWorker;
    o.test_size = 1;
    return new DatasetPair(*MakeZipfBags(o));
  }();
  return *data;
}

// One worker's model on the CPU, its buffers, and its own copy of the data.
struct Worker {
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamLayout> layout;
  float* params = nullptr;
  float* grads = nullptr;
  float* loss = nullptr;
  float* inputs = nullptr;
  int32_t* labels = nullptr;

  absl::Status Start(int batch) {
    ASSIGN_OR_RETURN(device, CreateDevice(DeviceOptions{}));
    ASSIGN_OR_RETURN(model, CreateEmbeddingModel(ModelOptions()));
    ASSIGN_OR_RETURN(ParamLayout made,
                     ParamLayout::Create(model->ParamSpecs(), kBucketBytes));
    layout = std::make_unique<ParamLayout>(std::move(made));
    ASSIGN_OR_RETURN(params, device->Allocate<float>(layout->total_numel()));
    ASSIGN_OR_RETURN(grads, device->Allocate<float>(layout->total_numel()));
    ASSIGN_OR_RETURN(loss, device->Allocate<float>(1));
    ASSIGN_OR_RETURN(inputs,
                     device->Allocate<float>(batch * ModelOptions().bag_size));
    ASSIGN_OR_RETURN(labels, device->Allocate<int32_t>(batch));
    model->InitParams(11, *layout, params);
    return model->Bind(*device, *layout, params, grads, batch);
  }

  // Forward and backward on samples [first, first + batch), each bucket
  // handed to `sync` (if any) as soon as its last gradient is final.
  absl::Status Step(int64_t first, int batch, GradientSync* sync) {
    const Dataset& train = Data().train;
    std::memcpy(inputs, train.row(first),
                sizeof(float) * batch * train.feature_dim);
    std::memcpy(labels, train.labels.data() + first, sizeof(int32_t) * batch);
    std::vector<int> waiting;
    for (const Bucket& bucket : layout->buckets()) {
      waiting.push_back(static_cast<int>(bucket.params.size()));
    }
    return model->ForwardBackward(inputs, labels, batch, loss, [&](int param) {
      const int bucket = layout->params()[param].bucket;
      if (--waiting[bucket] == 0 && sync != nullptr) {
        sync->BucketReady(bucket);
      }
    });
  }

  // Plain SGD, so that untouched rows stay untouched.
  void Update() {
    for (int64_t i = 0; i < layout->total_numel(); ++i) {
      params[i] -= kLearningRate * grads[i];
    }
  }

  std::vector<float> Params() const {
    return std::vector<float>(params, params + layout->total_numel());
  }
};

// One worker with the global batch: the reference.
std::vector<float> SingleWorkerParams() {
  Worker worker;
  const int batch = 2 * kBatchPerWorker;
  EXPECT_TRUE(worker.Start(batch).ok());
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_TRUE(worker.Step(int64_t{step} * batch, batch, nullptr).ok());
    worker.Update();
  }
  return worker.Params();
}

// Two workers under --sync=`strategy` with `servers` parameter servers;
// each worker's final parameters, and worker 0's last step's figures in
// `last_stats`.
std::vector<std::vector<float>> TwoWorkerParams(
    const std::string& strategy, int servers, StepStats* last_stats,
    const ScheduleOptions& schedule = ScheduleOptions()) {
  LoopbackClusterOptions options;
  options.num_workers = 2;
  options.num_servers = servers;
  options.job_id = absl::StrCat("embedding-", strategy, "-",
                                ScheduleKindName(schedule.kind));
  auto cluster = LoopbackCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::vector<float>> params(2);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(SyncContext context, (*cluster)->JoinWorker(rank));
        context.schedule = schedule;
        ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> sync,
                         GradientSyncRegistry::Create(strategy, context));
        Worker worker;
        RETURN_IF_ERROR(worker.Start(kBatchPerWorker));
        RETURN_IF_ERROR(sync->Setup(*worker.layout, *worker.device,
                                    {worker.grads, worker.params}));
        for (int step = 0; step < kSteps; ++step) {
          const int64_t first =
              int64_t{step} * 2 * kBatchPerWorker + rank * kBatchPerWorker;
          RETURN_IF_ERROR(worker.Step(first, kBatchPerWorker, sync.get()));
          StepStats stats;
          RETURN_IF_ERROR(sync->Finish(stats));
          if (stats.bytes_sent <= 0) {
            return absl::InternalError("a step sent no bytes");
          }
          worker.Update();
          if (rank == 0) *last_stats = stats;
        }
        params[rank] = worker.Params();
        return sync->Shutdown();
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].ok())
        << "worker " << rank << ": " << results[rank];
  }
  EXPECT_TRUE((*cluster)->Finish().ok());
  return params;
}

double Extra(const StepStats& stats, const std::string& name) {
  for (const auto& [key, value] : stats.extra) {
    if (key == name) return value;
  }
  return -1;
}

StepStats ExpectMatchesReference(
    const std::string& strategy, int servers,
    const ScheduleOptions& schedule = ScheduleOptions()) {
  const std::vector<float> reference = SingleWorkerParams();
  StepStats stats;
  const std::vector<std::vector<float>> workers =
      TwoWorkerParams(strategy, servers, &stats, schedule);
  EXPECT_EQ(workers[0].size(), reference.size());
  if (workers[0].size() != reference.size()) return stats;
  // The workers agree bit for bit: every strategy gives them the same sums.
  EXPECT_EQ(workers[0], workers[1]) << strategy;
  // And match the global batch up to the order of float32 additions.
  int64_t mismatches = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const float tolerance = 1e-5f + 1e-5f * std::abs(reference[i]);
    if (std::abs(workers[0][i] - reference[i]) > tolerance &&
        ++mismatches < 5) {
      ADD_FAILURE() << strategy << ": parameter " << i << " is "
                    << workers[0][i] << ", the single worker's "
                    << reference[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << strategy;
  // Training moved the table: the comparison is not of initial values.
  Worker fresh;
  EXPECT_TRUE(fresh.Start(1).ok());
  EXPECT_NE(fresh.Params(), reference);
  return stats;
}

TEST(EmbeddingStrategiesTest, RingMatchesOneWorker) {
  ExpectMatchesReference("ring", /*servers=*/0);
}

// --schedule=priority on the ring family's side: the dense buckets cut into
// 1 KiB partitions, the table's row-sparse bucket whole (core/sync/
// schedule.h), run in priority order; in hybrid, the ring part only.
ScheduleOptions PriorityInKiBPartitions() {
  ScheduleOptions schedule;
  schedule.kind = ScheduleKind::kPriority;
  schedule.partition_bytes = 1024;
  return schedule;
}

TEST(EmbeddingStrategiesTest, RingWithPriorityMatchesOneWorker) {
  ExpectMatchesReference("ring", /*servers=*/0, PriorityInKiBPartitions());
}

TEST(EmbeddingStrategiesTest, HybridWithPriorityMatchesOneWorker) {
  ExpectMatchesReference("hybrid", /*servers=*/1, PriorityInKiBPartitions());
}

TEST(EmbeddingStrategiesTest, ParameterServerMatchesOneWorker) {
  ExpectMatchesReference("ps", /*servers=*/1);
}

TEST(EmbeddingStrategiesTest, HybridMatchesOneWorker) {
  const StepStats stats = ExpectMatchesReference("hybrid", /*servers=*/1);
  // Both parts moved bytes, and the step's total is theirs.
  const double ps = Extra(stats, "ps_bytes_sent");
  const double ring = Extra(stats, "ring_bytes_sent");
  EXPECT_GT(ps, 0);
  EXPECT_GT(ring, 0);
  EXPECT_EQ(stats.bytes_sent, static_cast<int64_t>(ps + ring));
}

// --sync=hybrid's Setup on one worker of a job with a server, for `specs`.
absl::Status HybridSetup(const std::vector<ParamSpec>& specs,
                         const std::string& job_id) {
  LoopbackClusterOptions options;
  options.num_servers = 1;
  options.job_id = job_id;
  ASSIGN_OR_RETURN(std::unique_ptr<LoopbackCluster> cluster,
                   LoopbackCluster::Start(options));
  ASSIGN_OR_RETURN(SyncContext context, cluster->JoinWorker(0));
  ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> sync,
                   GradientSyncRegistry::Create("hybrid", context));
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                   CreateDevice(DeviceOptions{}));
  ASSIGN_OR_RETURN(const ParamLayout layout, ParamLayout::Create(specs, 0));
  ASSIGN_OR_RETURN(float* grads, device->Allocate<float>(layout.total_numel()));
  ASSIGN_OR_RETURN(float* params,
                   device->Allocate<float>(layout.total_numel()));
  return sync->Setup(layout, *device, {grads, params});
}

TEST(EmbeddingStrategiesTest, HybridNeedsARowSparseTensorBesideDenseOnes) {
  absl::Status status =
      HybridSetup({{"fc.weight", {4, 4}}, {"fc.bias", {4}}}, "hybrid-mlp");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("no row-sparse tensor"));
  status = HybridSetup({{"table", {10, 4}, 4}}, "hybrid-table-only");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("use --sync=ps"));
  // A table between dense tensors would split the dense part in two.
  status = HybridSetup({{"a", {4}}, {"table", {10, 4}, 4}, {"b", {4}}},
                       "hybrid-middle");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(),
              HasSubstr("consecutive at the start or the end"));
}

TEST(EmbeddingStrategiesTest, HybridNeedsServers) {
  LoopbackClusterOptions options;
  options.num_servers = 0;
  options.job_id = "hybrid-no-servers";
  auto cluster = LoopbackCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto context = (*cluster)->JoinWorker(0);
  ASSERT_TRUE(context.ok());
  auto sync = GradientSyncRegistry::Create("hybrid", *context);
  ASSERT_TRUE(sync.ok()) << sync.status();
  Worker worker;
  ASSERT_TRUE(worker.Start(1).ok());
  const absl::Status status = (*sync)->Setup(*worker.layout, *worker.device,
                                             {worker.grads, worker.params});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("--sync=hybrid, the row-sparse"));
  EXPECT_THAT(status.message(), HasSubstr("needs parameter servers"));
}

}  // namespace
}  // namespace gradsync
