// Two workers as threads over the in-memory rendezvous with a strategy that
// communicates nothing: the trainer's own cross-rank steps (the parameter
// checks at start-up and after the last step, the summary gathered on worker
// 0) work on their own, and
// the start-up check refuses ranks that begin from different parameters.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster/in_memory_rendezvous.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/sync/gradient_sync.h"
#include "core/model/model.h"
#include "core/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// Synchronizes nothing; counts what it was handed. Every rank's gradient
// becomes zero, the same on all ranks, so that the replicas stay identical
// as a real strategy keeps them (the trainer compares them after the last
// step) while each worker still sees its own shard.
class SilentSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout& layout, Device&,
                     const SyncBuffers& buffers) override {
    grads_ = buffers.grads;
    numel_ = layout.total_numel();
    return absl::OkStatus();
  }
  void BucketReady(int) override { ++buckets_handed_over; }
  absl::Status Finish(StepStats&) override {
    ++finishes;
    // The CPU device's buffers are host memory.
    std::fill(grads_, grads_ + numel_, 0.0f);
    return absl::OkStatus();
  }
  int buckets_handed_over = 0;
  int finishes = 0;

 private:
  float* grads_ = nullptr;
  int64_t numel_ = 0;
};

struct WorkerOutcome {
  absl::StatusOr<TrainResult> result = absl::UnknownError("did not run");
  int finishes = 0;
  int buckets_handed_over = 0;
};

// Runs `world_size` workers as threads; worker r trains with seed
// seeds[r] (the seed picks the initial parameters and the data order).
std::vector<WorkerOutcome> RunWorkers(const std::vector<uint64_t>& seeds,
                                      int64_t steps, absl::Duration timeout,
                                      const std::string& metrics_dir) {
  const int world_size = static_cast<int>(seeds.size());
  auto job = std::make_shared<InMemoryJob>(world_size, 0);
  std::vector<WorkerOutcome> outcomes(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      SyntheticOptions data_options;
      data_options.train_size = 64;
      data_options.test_size = 16;
      data_options.feature_dim = 8;
      data_options.num_classes = 3;
      DatasetPair data = *MakeSynthetic(data_options);
      MlpOptions mlp;
      mlp.widths = {8, 6, 3};
      std::unique_ptr<Model> model = *CreateMlp(mlp);
      std::unique_ptr<Device> device = *CreateDevice(DeviceOptions{});

      TrainerOptions options;
      options.batch_size = 8;
      options.epochs = 1;
      options.max_steps = steps;
      options.seed = seeds[rank];
      options.evaluate = false;
      options.progress = false;
      options.timeout = timeout;
      options.metrics_dir = metrics_dir;

      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = world_size;
      InMemoryRendezvous rendezvous(job, Role::kWorker, rank);
      SilentSync sync;
      outcomes[rank].result = RunTraining(options, identity, *model, data,
                                          *device, sync, &rendezvous);
      outcomes[rank].finishes = sync.finishes;
      outcomes[rank].buckets_handed_over = sync.buckets_handed_over;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(TrainerTwoWorkersTest, IdenticalStartsTrainToTheEndOnBothRanks) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/two");
  std::vector<WorkerOutcome> outcomes =
      RunWorkers({7, 7}, /*steps=*/3, absl::Seconds(10), dir);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(outcomes[rank].result.ok())
        << "worker " << rank << ": " << outcomes[rank].result.status();
    EXPECT_EQ(outcomes[rank].result->steps, 3) << "worker " << rank;
    EXPECT_EQ(outcomes[rank].finishes, 3) << "worker " << rank;
    EXPECT_GT(outcomes[rank].buckets_handed_over, 0) << "worker " << rank;
  }
  // Worker 0 gathered both ranks' figures into the summary.
  ASSERT_FALSE(outcomes[0].result->summary_path.empty());
  EXPECT_TRUE(outcomes[1].result->summary_path.empty());
  const Json summary =
      Json::parse(ReadFile(outcomes[0].result->summary_path), nullptr, false);
  ASSERT_FALSE(summary.is_discarded());
  EXPECT_EQ(summary["workers"], 2);
  ASSERT_EQ(summary["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(summary["ranks"][rank]["rank"], rank);
    EXPECT_EQ(summary["ranks"][rank]["steps"], 3);
  }
}

TEST(TrainerTwoWorkersTest, DifferentStartingParametersAreRefusedAtStartUp) {
  // Worker 0 passes its own check and then waits in vain for worker 1 to
  // gather the summary: a short timeout ends it.
  std::vector<WorkerOutcome> outcomes =
      RunWorkers({7, 8}, /*steps=*/3, absl::Seconds(1), "");
  ASSERT_FALSE(outcomes[1].result.ok());
  const std::string message(outcomes[1].result.status().message());
  EXPECT_THAT(message, HasSubstr("worker 1's parameters at start-up differ"));
  EXPECT_THAT(message, HasSubstr("--seed"));
  // Refused before the first step.
  EXPECT_EQ(outcomes[1].buckets_handed_over, 0);
  EXPECT_EQ(outcomes[1].finishes, 0);
}

// Batch norm's running statistics are per worker; before the workers evaluate
// their shards, each takes worker 0's, so one model scores the whole test set.
TEST(TrainerTwoWorkersTest, WorkersEvaluateWithWorkerZerosBatchNormBuffers) {
  const int world_size = 2;
  auto job = std::make_shared<InMemoryJob>(world_size, 0);
  std::vector<std::unique_ptr<Model>> models(world_size);
  std::vector<std::unique_ptr<Device>> devices(world_size);
  std::vector<absl::StatusOr<TrainResult>> results(
      world_size, absl::UnknownError("did not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    ResNetOptions resnet;
    resnet.input = {2, 4, 4, 3};
    resnet.blocks = {1, 1};
    resnet.widths = {3, 4};
    models[rank] = *CreateResNet(resnet);
    devices[rank] = *CreateDevice(DeviceOptions{});
    threads.emplace_back([&, rank] {
      SyntheticOptions data_options;
      data_options.train_size = 32;
      data_options.test_size = 8;
      data_options.feature_dim = 2 * 4 * 4;
      data_options.num_classes = 3;
      DatasetPair data = *MakeSynthetic(data_options);
      for (Dataset* set : {&data.train, &data.test}) {
        set->channels = 2;
        set->height = 4;
        set->width = 4;
      }
      TrainerOptions options;
      options.batch_size = 4;
      options.epochs = 1;
      options.max_steps = 3;
      options.progress = false;
      options.timeout = absl::Seconds(10);
      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = world_size;
      InMemoryRendezvous rendezvous(job, Role::kWorker, rank);
      SilentSync sync;
      results[rank] = RunTraining(options, identity, *models[rank], data,
                                  *devices[rank], sync, &rendezvous);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < world_size; ++rank) {
    ASSERT_TRUE(results[rank].ok())
        << "worker " << rank << ": " << results[rank].status();
  }
  EXPECT_EQ(results[0]->test_accuracy, results[1]->test_accuracy);
  // The workers trained on different shards, so their statistics differed;
  // after the evaluation worker 1 holds worker 0's.
  const int64_t count = models[0]->buffer_count();
  ASSERT_GT(count, 0);
  std::vector<float> buffers[2];
  for (int rank = 0; rank < world_size; ++rank) {
    buffers[rank].resize(count);
    ASSERT_TRUE(devices[rank]
                    ->CopyToHost(buffers[rank].data(), models[rank]->buffers(),
                                 count * sizeof(float))
                    .ok());
  }
  EXPECT_EQ(buffers[0], buffers[1]);
}

}  // namespace
}  // namespace gradsync
