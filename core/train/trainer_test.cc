// The trainer against a fake GradientSync: what it hands the strategy, in
// which order, what it does with the strategy's answer, and what it checks
// across ranks (two workers as threads over the in-memory rendezvous).
#include "core/train/trainer.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster/in_memory_rendezvous.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/sync/gradient_sync.h"
#include "core/optim/checkpoint.h"
#include "core/model/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Records every call; optionally fails a step or plays a parameter server
// that writes the new parameters itself.
class FakeSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override {
    num_buckets_ = static_cast<int>(layout.buckets().size());
    total_numel_ = layout.total_numel();
    buffers_ = buffers;
    return absl::OkStatus();
  }
  void BucketReady(int bucket) override {
    handed_over.push_back({step_, bucket});
  }
  absl::Status Finish(StepStats&) override {
    finishes.push_back(step_);
    // What the trainer left for the strategy: the step's parameters (not
    // yet stepped) and gradients. The CPU device's buffers are host memory.
    params_seen.assign(buffers_.params, buffers_.params + total_numel_);
    grads_seen.assign(buffers_.grads, buffers_.grads + total_numel_);
    if (step_ == fail_at_step) return absl::InternalError("fake failure");
    if (updates_parameters) {
      for (int64_t i = 0; i < total_numel_; ++i) buffers_.params[i] = 0.5f;
    }
    ++step_;
    return absl::OkStatus();
  }
  bool UpdatesParameters() const override { return updates_parameters; }
  bool ReplicasMayDiffer() const override { return replicas_may_differ; }

  int num_buckets() const { return num_buckets_; }

  std::vector<std::pair<int, int>> handed_over;  // (step, bucket)
  std::vector<int> finishes;
  std::vector<float> params_seen, grads_seen;
  int fail_at_step = -1;
  bool updates_parameters = false;
  bool replicas_may_differ = false;  // as SSP and ASP say

 private:
  int num_buckets_ = 0;
  int64_t total_numel_ = 0;
  SyncBuffers buffers_;
  int step_ = 0;
};

struct Job {
  DatasetPair data;
  std::unique_ptr<Model> model;
  std::unique_ptr<Device> device;
};

// 64 training samples of 8 features, 3 classes.
SyntheticOptions SmallData() {
  SyntheticOptions data_options;
  data_options.train_size = 64;
  data_options.test_size = 16;
  data_options.feature_dim = 8;
  data_options.num_classes = 3;
  return data_options;
}

Job SmallJob() {
  Job job;
  job.data = *MakeSynthetic(SmallData());
  MlpOptions mlp;
  mlp.widths = {8, 6, 5, 3};
  job.model = *CreateMlp(mlp);
  job.device = *CreateDevice(DeviceOptions{});
  return job;
}

TrainerOptions SmallOptions(int64_t steps) {
  TrainerOptions options;
  options.batch_size = 8;
  options.epochs = 1;
  options.max_steps = steps;
  options.evaluate = false;
  options.progress = false;
  options.bucket_mb = 64.0 / (1 << 20);  // 64 bytes: a bucket per tensor or so
  options.timeout = absl::Seconds(10);
  return options;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::vector<float> floats(bytes.size() / sizeof(float));
  std::memcpy(floats.data(), bytes.data(), floats.size() * sizeof(float));
  return floats;
}

TEST(TrainerTest, HandsEveryBucketOverOncePerStepInBackwardOrder) {
  Job job = SmallJob();
  FakeSync sync;
  auto result = RunTraining(SmallOptions(3), ProcessIdentity{}, *job.model,
                            job.data, *job.device, sync, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 3);
  ASSERT_GT(sync.num_buckets(), 2);
  // Buckets are numbered in the order backward finishes them: 0, 1, ... in
  // every step, each once, all before that step's Finish.
  std::vector<std::pair<int, int>> expected;
  for (int step = 0; step < 3; ++step) {
    for (int b = 0; b < sync.num_buckets(); ++b) expected.push_back({step, b});
  }
  EXPECT_EQ(sync.handed_over, expected);
  EXPECT_EQ(sync.finishes, std::vector<int>({0, 1, 2}));
}

TEST(TrainerTest, AnErrorFromFinishEndsTrainingWithIt) {
  Job job = SmallJob();
  FakeSync sync;
  sync.fail_at_step = 1;
  auto result = RunTraining(SmallOptions(5), ProcessIdentity{}, *job.model,
                            job.data, *job.device, sync, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("fake failure"));
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("worker 0 step 1"));
  // Nothing of step 2 was handed over.
  for (const auto& [step, bucket] : sync.handed_over) EXPECT_LE(step, 1);
  EXPECT_EQ(sync.finishes, std::vector<int>({0, 1}));
}

TEST(TrainerTest, ParametersFromTheStrategyAreNotSteppedAgain) {
  Job job = SmallJob();
  FakeSync sync;
  sync.updates_parameters = true;
  TrainerOptions options = SmallOptions(2);
  options.optimizer.lr = 0.5f;
  options.dump_params = absl::StrCat(std::getenv("TEST_TMPDIR"), "/server");
  auto result = RunTraining(options, ProcessIdentity{}, *job.model, job.data,
                            *job.device, sync, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<float> params =
      ReadFloats(options.dump_params + ".worker0");
  ASSERT_FALSE(params.empty());
  // Exactly what the strategy wrote: the trainer's optimizer did not run.
  for (float p : params) ASSERT_EQ(p, 0.5f);
}

TEST(TrainerTest, WithoutTheStrategyUpdatingTheOptimizerStepsOncePerStep) {
  Job job = SmallJob();
  FakeSync sync;
  TrainerOptions options = SmallOptions(1);
  options.optimizer.kind = "sgd";
  options.optimizer.lr = 0.25f;
  options.optimizer.momentum = 0.0f;
  options.optimizer.weight_decay = 0.0f;
  options.dump_params = absl::StrCat(std::getenv("TEST_TMPDIR"), "/worker");
  auto result = RunTraining(options, ProcessIdentity{}, *job.model, job.data,
                            *job.device, sync, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<float> params =
      ReadFloats(options.dump_params + ".worker0");
  ASSERT_EQ(params.size(), sync.params_seen.size());
  int changed = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    // One plain SGD step from what Finish saw: p - lr * g.
    EXPECT_FLOAT_EQ(params[i], sync.params_seen[i] - 0.25f * sync.grads_seen[i])
        << "parameter " << i;
    if (params[i] != sync.params_seen[i]) ++changed;
  }
  EXPECT_GT(changed, 0);
}

TEST(TrainerTest, RanksThatDivergeAreCaughtNamingTheStep) {
  // Two workers over the in-memory rendezvous, with a "strategy" that does
  // not synchronize: they start identical (the start-up check passes) and
  // their parameters differ after the first step, which the per-step check
  // must report on the rank that compares.
  auto rendezvous_job = std::make_shared<InMemoryJob>(2, 0);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Job job = SmallJob();
      FakeSync sync;
      InMemoryRendezvous rendezvous(rendezvous_job, Role::kWorker, rank);
      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = 2;
      TrainerOptions options = SmallOptions(2);
      options.check_params_every = 1;
      options.timeout =
          absl::Seconds(2);  // rank 0 then waits for rank 1 in vain
      results[rank] = RunTraining(options, identity, *job.model, job.data,
                                  *job.device, sync, &rendezvous)
                          .status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_FALSE(results[1].ok());
  EXPECT_THAT(
      std::string(results[1].message()),
      HasSubstr("worker 1's parameters after step 1 differ from worker 0's"));
}

// Two workers whose "strategy" does not synchronize, with no per-step check
// asked for; the status of each.
std::vector<absl::Status> TrainTwoUnsynchronizedRanks(
    bool replicas_may_differ) {
  auto rendezvous_job = std::make_shared<InMemoryJob>(2, 0);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Job job = SmallJob();
      FakeSync sync;
      sync.replicas_may_differ = replicas_may_differ;
      InMemoryRendezvous rendezvous(rendezvous_job, Role::kWorker, rank);
      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = 2;
      TrainerOptions options = SmallOptions(2);
      options.timeout = absl::Seconds(2);
      results[rank] = RunTraining(options, identity, *job.model, job.data,
                                  *job.device, sync, &rendezvous)
                          .status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  return results;
}

// Without --check_params_every the replicas are still compared once, after
// the last step: a silent divergence cannot end in success.
TEST(TrainerTest, RanksThatDivergeAreCaughtAfterTheLastStepByDefault) {
  const std::vector<absl::Status> results =
      TrainTwoUnsynchronizedRanks(/*replicas_may_differ=*/false);
  ASSERT_FALSE(results[1].ok());
  EXPECT_THAT(std::string(results[1].message()),
              HasSubstr("worker 1's parameters after the last step differ "
                        "from worker 0's"));
}

// Where replicas may legitimately differ (SSP, ASP), they are not compared.
TEST(TrainerTest, ReplicasThatMayDifferAreNotComparedAtTheEnd) {
  const std::vector<absl::Status> results =
      TrainTwoUnsynchronizedRanks(/*replicas_may_differ=*/true);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

// Two workers with the same flags whose data gave them other models (here
// rank 1's MLP is one unit wider, as another data set on its host would
// make it): the job fails before the strategy starts, naming both workers
// and what differs, instead of reducing buckets that do not match.
TEST(TrainerTest, WorkersThatDeriveAnotherLayoutFailBeforeTheStrategyStarts) {
  auto rendezvous_job = std::make_shared<InMemoryJob>(2, 0);
  std::vector<absl::Status> results(2);
  std::vector<FakeSync> syncs(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Job job = SmallJob();
      if (rank == 1) {
        MlpOptions wider;
        wider.widths = {8, 7, 5, 3};
        job.model = *CreateMlp(wider);
      }
      InMemoryRendezvous rendezvous(rendezvous_job, Role::kWorker, rank);
      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = 2;
      TrainerOptions options = SmallOptions(2);
      options.timeout = absl::Seconds(2);
      results[rank] = RunTraining(options, identity, *job.model, job.data,
                                  *job.device, syncs[rank], &rendezvous)
                          .status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_FALSE(results[1].ok());
  EXPECT_THAT(std::string(results[1].message()),
              AllOf(HasSubstr("worker 1's derived model=mlp-8-7-5-3 differs "
                              "from worker 0's model=mlp-8-6-5-3"),
                    HasSubstr("give every worker the same data set")));
  EXPECT_EQ(syncs[1].num_buckets(), 0) << "rank 1's strategy was set up";
  EXPECT_FALSE(results[0].ok());
}

// A test-sized ResNet (batch norm, a downsampling block) on 2x2x2 images.
Job SmallResNetJob() {
  SyntheticOptions data_options = SmallData();
  data_options.channels = 2;
  data_options.height = 2;
  data_options.width = 2;
  Job job;
  job.data = *MakeSynthetic(data_options);
  ResNetOptions resnet;
  resnet.input = {2, 2, 2, 3};
  resnet.blocks = {1, 1};
  resnet.widths = {2, 3};
  job.model = *CreateResNet(resnet);
  job.device = *CreateDevice(DeviceOptions{});
  return job;
}

// One worker of SmallResNetJob for `steps` steps (of 8 per epoch, over two
// epochs), checkpointing every 3 steps and at its last to `checkpoint`.
absl::StatusOr<TrainResult> TrainResNet(int64_t steps,
                                        const std::string& checkpoint,
                                        bool resume) {
  Job job = SmallResNetJob();
  TrainerOptions options = SmallOptions(steps);
  options.epochs = 2;
  options.optimizer.momentum = 0.9f;
  options.checkpoint_path = checkpoint;
  options.checkpoint_every = 3;
  options.resume = resume;
  FakeSync sync;  // one worker: nothing to average
  return RunTraining(options, ProcessIdentity{}, *job.model, job.data,
                     *job.device, sync, nullptr);
}

// Checkpoints carry worker 0's batch-norm running statistics: a run stopped
// at step 6 and resumed to step 12 ends with exactly the parameters and the
// running statistics of an uninterrupted 12-step run. Without the statistics
// in the checkpoint the resumed run's would restart from 0 and 1 and differ.
TEST(TrainerTest, ResumedResNetEqualsUninterruptedWithItsRunningStatistics) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string whole = dir + "/whole.ckpt";
  const std::string stopped = dir + "/stopped.ckpt";
  auto uninterrupted = TrainResNet(12, whole, /*resume=*/false);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  auto first = TrainResNet(6, stopped, /*resume=*/false);
  ASSERT_TRUE(first.ok()) << first.status();
  auto at_stop = ReadCheckpoint(stopped);
  ASSERT_TRUE(at_stop.ok()) << at_stop.status();
  EXPECT_EQ(at_stop->step, 6);
  auto resumed = TrainResNet(12, stopped, /*resume=*/true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();

  auto expected = ReadCheckpoint(whole);
  auto got = ReadCheckpoint(stopped);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(expected->step, 12);
  EXPECT_EQ(got->step, 12);
  // Running mean and variance of three batch norms of 2 channels (the stem's
  // and the first block's) and three of 3 (the second block's and its
  // shortcut's).
  ASSERT_EQ(expected->buffers.size(), 2u * (2 + 2 + 2 + 3 + 3 + 3));
  // Bit for bit: the same arithmetic in the same order.
  EXPECT_EQ(got->params, expected->params);
  EXPECT_EQ(got->optimizer_state, expected->optimizer_state);
  EXPECT_EQ(got->buffers, expected->buffers);
  // The statistics moved between the stop and the end, so the comparison
  // above covers the resumed steps' updates, not only the copy.
  EXPECT_NE(at_stop->buffers, expected->buffers);
}

// A checkpoint without the buffers a model keeps (written before checkpoints
// carried them) is refused with the reason rather than resumed with fresh
// running statistics.
TEST(TrainerTest, ResumeRefusesACheckpointWithoutTheModelsBuffers) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/no_buffers.ckpt";
  ASSERT_TRUE(TrainResNet(3, path, /*resume=*/false).ok());
  auto written = ReadCheckpoint(path);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_FALSE(written->buffers.empty());
  Checkpoint without = *written;
  without.buffers.clear();
  ASSERT_TRUE(WriteCheckpoint(path, without).ok());
  auto result = TrainResNet(6, path, /*resume=*/true);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr(path), HasSubstr("carries no model buffers"),
                    HasSubstr("batch-norm running statistics"),
                    HasSubstr("without --resume")));
}

}  // namespace
}  // namespace gradsync
