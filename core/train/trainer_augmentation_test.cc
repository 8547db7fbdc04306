// The trainer's batches under --augment: every training row a model receives
// is the augmentation of its sample for the current epoch, and two workers
// with batch b receive, step by step, exactly the rows one worker with batch
// 2·b receives (the property that lets strategies be compared bit for bit).
#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "core/cluster/in_memory_rendezvous.h"
#include "core/data/dataset.h"
#include "core/data/image_augmentation.h"
#include "core/device/device.h"
#include "core/sync/gradient_sync.h"
#include "core/model/model.h"
#include "core/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// An MLP that keeps a copy of every training batch it is given (the CPU
// device's buffers are host memory).
class RecordingModel : public Model {
 public:
  explicit RecordingModel(std::unique_ptr<Model> inner)
      : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::vector<ParamSpec> ParamSpecs() const override {
    return inner_->ParamSpecs();
  }
  int input_dim() const override { return inner_->input_dim(); }
  int num_classes() const override { return inner_->num_classes(); }
  absl::Status Bind(Device& device, const ParamLayout& layout, float* params,
                    float* grads, int max_batch) override {
    return inner_->Bind(device, layout, params, grads, max_batch);
  }
  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override {
    inner_->InitParams(seed, layout, host_params);
  }
  absl::Status ForwardBackward(const float* inputs, const int32_t* labels,
                               int batch, float* device_loss,
                               const GradReadyCallback& ready) override {
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < batch; ++i) {
      rows.emplace_back(inputs + int64_t{i} * input_dim(),
                        inputs + int64_t{i + 1} * input_dim());
    }
    batches.push_back(std::move(rows));
    return inner_->ForwardBackward(inputs, labels, batch, device_loss, ready);
  }
  absl::Status Forward(const float* inputs, int batch,
                       const float** logits) override {
    return inner_->Forward(inputs, batch, logits);
  }

  std::vector<std::vector<std::vector<float>>> batches;  // step, row, value

 private:
  std::unique_ptr<Model> inner_;
};

class SilentSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout&, Device&, const SyncBuffers&) override {
    return absl::OkStatus();
  }
  void BucketReady(int) override {}
  absl::Status Finish(StepStats&) override { return absl::OkStatus(); }
  // Nothing is averaged, so the workers' parameters part after the first
  // step: the trainer must not compare them (this test looks at batches).
  bool ReplicasMayDiffer() const override { return true; }
};

constexpr uint64_t kSeed = 5;

// 32 images of 2×4×4: two steps of 16 per epoch.
DatasetPair SmallImages() {
  SyntheticOptions options;
  options.train_size = 32;
  options.test_size = 8;
  options.feature_dim = 32;
  options.channels = 2;
  options.height = 4;
  options.width = 4;
  options.num_classes = 3;
  return *MakeSynthetic(options);
}

TrainerOptions Options(int batch_size, AugmentationMode mode) {
  TrainerOptions options;
  options.batch_size = batch_size;
  options.epochs = 2;
  options.seed = kSeed;
  options.evaluate = false;
  options.progress = false;
  options.timeout = absl::Seconds(10);
  options.augmentation.mode = mode;
  options.augmentation.padding = 1;
  return options;
}

std::unique_ptr<RecordingModel> Model32() {
  MlpOptions mlp;
  mlp.widths = {32, 4, 3};
  return std::make_unique<RecordingModel>(*CreateMlp(mlp));
}

// The batches each of `world_size` workers (threads) receives.
std::vector<std::vector<std::vector<std::vector<float>>>> RunWorkers(
    const DatasetPair& data, int world_size, int batch_size,
    AugmentationMode mode) {
  auto job = std::make_shared<InMemoryJob>(world_size, 0);
  std::vector<std::vector<std::vector<std::vector<float>>>> batches(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<RecordingModel> model = Model32();
      std::unique_ptr<Device> device = *CreateDevice(DeviceOptions{});
      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = world_size;
      InMemoryRendezvous rendezvous(job, Role::kWorker, rank);
      SilentSync sync;
      absl::StatusOr<TrainResult> result =
          RunTraining(Options(batch_size, mode), identity, *model, data,
                      *device, sync, world_size > 1 ? &rendezvous : nullptr);
      EXPECT_TRUE(result.ok()) << "worker " << rank << ": " << result.status();
      batches[rank] = model->batches;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return batches;
}

// Which sample (and so which epoch's augmentation) produced `row`: the one
// whose augmented image for `epoch` it equals.
int64_t FindSample(const DatasetPair& data, const ImageAugmentation& aug,
                   const std::vector<float>& row, int64_t epoch) {
  std::vector<float> candidate(data.train.feature_dim);
  for (int64_t s = 0; s < data.train.size; ++s) {
    aug.Write(s, epoch, candidate.data());
    if (candidate == row) return s;
  }
  return -1;
}

TEST(TrainerAugmentationTest, RowsAreTheSamplesAugmentedForTheirEpoch) {
  const DatasetPair data = SmallImages();
  const auto batches = RunWorkers(data, 1, 16, AugmentationMode::kCropFlip)[0];
  ASSERT_EQ(batches.size(), 4u);  // 2 epochs × 2 steps
  absl::StatusOr<ImageAugmentation> aug = ImageAugmentation::Create(
      {AugmentationMode::kCropFlip, 1}, data.train, kSeed);
  ASSERT_TRUE(aug.ok());
  int changed = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<int64_t> seen;
    for (const std::vector<float>& row : batches[step]) {
      const int64_t sample = FindSample(data, *aug, row, step / 2);
      ASSERT_GE(sample, 0) << "step " << step
                           << ": a row that is no sample augmented for "
                              "epoch "
                           << step / 2;
      seen.push_back(sample);
      changed += !std::equal(row.begin(), row.end(), data.train.row(sample));
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end())
        << "a sample twice in step " << step;
  }
  // 64 rows with 18 equally likely draws, of which one leaves a row as it
  // was: nearly all of them changed.
  EXPECT_GT(changed, 48);
}

TEST(TrainerAugmentationTest, TwoWorkersSeeWhatOneWorkerWithTwiceTheBatchSees) {
  const DatasetPair data = SmallImages();
  const auto one = RunWorkers(data, 1, 16, AugmentationMode::kCropFlip);
  const auto two = RunWorkers(data, 2, 8, AugmentationMode::kCropFlip);
  ASSERT_EQ(one[0].size(), 4u);
  for (int rank = 0; rank < 2; ++rank) ASSERT_EQ(two[rank].size(), 4u);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> single = one[0][step];
    std::vector<std::vector<float>> both = two[0][step];
    both.insert(both.end(), two[1][step].begin(), two[1][step].end());
    std::sort(single.begin(), single.end());
    std::sort(both.begin(), both.end());
    EXPECT_EQ(single, both) << "step " << step;
  }
}

TEST(TrainerAugmentationTest, NoneGivesTheStoredRows) {
  const DatasetPair data = SmallImages();
  const auto batches = RunWorkers(data, 1, 16, AugmentationMode::kNone)[0];
  ASSERT_EQ(batches.size(), 4u);
  for (const auto& batch : batches) {
    for (const std::vector<float>& row : batch) {
      bool found = false;
      for (int64_t s = 0; s < data.train.size && !found; ++s) {
        found = std::equal(row.begin(), row.end(), data.train.row(s));
      }
      EXPECT_TRUE(found);
    }
  }
}

TEST(TrainerAugmentationTest, CropFlipOnFlatDataIsRefusedAtStartUp) {
  SyntheticOptions flat_options;
  flat_options.train_size = 32;
  flat_options.test_size = 8;
  flat_options.feature_dim = 32;
  flat_options.num_classes = 3;
  const DatasetPair flat = *MakeSynthetic(flat_options);
  std::unique_ptr<RecordingModel> model = Model32();
  std::unique_ptr<Device> device = *CreateDevice(DeviceOptions{});
  SilentSync sync;
  absl::StatusOr<TrainResult> result =
      RunTraining(Options(16, AugmentationMode::kCropFlip), ProcessIdentity{},
                  *model, flat, *device, sync, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("needs images"));
  EXPECT_TRUE(model->batches.empty());
}

}  // namespace
}  // namespace gradsync
