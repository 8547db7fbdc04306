// --autotune with two workers as threads over the in-memory rendezvous and a
// strategy that really averages (through the rendezvous): the trials pick one
// bucket cap for both ranks, log one line per trial, record the choice in the
// manifest, and leave no trace in training — the autotuned run ends with
// exactly the parameters of an untuned run started with the chosen cap.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster/in_memory_rendezvous.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/sync/gradient_sync.h"
#include "core/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::StartsWith;
using Json = nlohmann::json;

// Averages the whole gradient in Finish by an all-gather through the
// rendezvous: bucket-independent results, so a regrouping is always allowed.
class AveragingSync : public GradientSync {
 public:
  AveragingSync(Rendezvous* rendezvous, int rank, int world_size,
                bool can_rebucket)
      : rendezvous_(rendezvous),
        rank_(rank),
        world_size_(world_size),
        can_rebucket_(can_rebucket) {}
  absl::Status Setup(const ParamLayout& layout, Device&,
                     const SyncBuffers& buffers) override {
    grads_ = buffers.grads;
    numel_ = layout.total_numel();
    return absl::OkStatus();
  }
  void BucketReady(int) override {}
  absl::Status Finish(StepStats&) override {
    const std::string mine(reinterpret_cast<const char*>(grads_),
                           numel_ * sizeof(float));
    absl::StatusOr<std::vector<std::string>> all =
        rendezvous_->AllGather(absl::StrCat("average/", finishes_++), rank_,
                               world_size_, mine, absl::Seconds(10));
    if (!all.ok()) return all.status();
    std::vector<float> sum(numel_, 0.0f);
    for (const std::string& value : *all) {
      const float* other = reinterpret_cast<const float*>(value.data());
      for (int64_t i = 0; i < numel_; ++i) sum[i] += other[i];
    }
    for (int64_t i = 0; i < numel_; ++i) grads_[i] = sum[i] / world_size_;
    return absl::OkStatus();
  }
  absl::Status Rebucket(const ParamLayout& layout) override {
    if (!can_rebucket_) return GradientSync::Rebucket(layout);
    ++rebuckets;
    return absl::OkStatus();
  }
  int rebuckets = 0;

 private:
  Rendezvous* rendezvous_;
  const int rank_;
  const int world_size_;
  const bool can_rebucket_;
  float* grads_ = nullptr;
  int64_t numel_ = 0;
  int finishes_ = 0;
};

struct Outcome {
  absl::StatusOr<TrainResult> result = absl::UnknownError("did not run");
  int rebuckets = 0;
  std::vector<float> params;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// Two workers, an MLP of ~0.4 MiB (a 300x300 layer) so the caps around the
// rule's group it differently, momentum SGD so optimizer state matters.
std::vector<Outcome> RunTwoWorkers(const std::string& dir, bool autotune,
                                   double bucket_mb, bool can_rebucket) {
  const int world_size = 2;
  auto job = std::make_shared<InMemoryJob>(world_size, 0);
  std::vector<Outcome> outcomes(world_size);
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
      mlp.widths = {8, 300, 300, 3};
      std::unique_ptr<Model> model = *CreateMlp(mlp);
      std::unique_ptr<Device> device = *CreateDevice(DeviceOptions{});
      TrainerOptions options;
      options.batch_size = 8;
      options.epochs = 1;
      options.max_steps = 4;
      options.seed = 5;
      options.evaluate = false;
      options.progress = false;
      options.timeout = absl::Seconds(10);
      options.metrics_dir = dir;
      options.dump_params = absl::StrCat(dir, "/params");
      options.bucket_mb = bucket_mb;
      options.autotune = autotune;
      options.autotune_steps = 2;
      options.optimizer.momentum = 0.9f;
      ProcessIdentity identity;
      identity.rank = rank;
      identity.world_size = world_size;
      InMemoryRendezvous rendezvous(job, Role::kWorker, rank);
      AveragingSync sync(&rendezvous, rank, world_size, can_rebucket);
      outcomes[rank].result = RunTraining(options, identity, *model, data,
                                          *device, sync, &rendezvous);
      outcomes[rank].rebuckets = sync.rebuckets;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string bytes =
        ReadFile(absl::StrCat(dir, "/params.worker", rank));
    outcomes[rank].params.resize(bytes.size() / sizeof(float));
    std::memcpy(outcomes[rank].params.data(), bytes.data(), bytes.size());
  }
  return outcomes;
}

std::string TestDir(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(TrainerAutotuneTest, TrialsLeaveTheSameParametersAsAnUntunedRun) {
  const std::string tuned_dir = TestDir("tuned");
  std::vector<Outcome> tuned =
      RunTwoWorkers(tuned_dir, /*autotune=*/true, /*bucket_mb=*/0, true);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(tuned[rank].result.ok())
        << "worker " << rank << ": " << tuned[rank].result.status();
    EXPECT_EQ(tuned[rank].result->steps, 4) << "worker " << rank;
    // Every rank regrouped the same way: the trials and the final choice.
    EXPECT_GT(tuned[rank].rebuckets, 0) << "worker " << rank;
    EXPECT_EQ(tuned[rank].rebuckets, tuned[0].rebuckets);
  }

  // One line per trial, both ranks' times in each, exactly one chosen.
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(absl::StrCat(tuned_dir, "/autotune.jsonl")), '\n',
                     absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u);
  double chosen_mb = -1;
  double fastest_ms = 1e300;
  double chosen_ms = -1;
  for (const std::string& text : lines) {
    const Json line = Json::parse(text, nullptr, false);
    ASSERT_FALSE(line.is_discarded()) << text;
    ASSERT_EQ(line["rank_step_ms"].size(), 2u) << text;
    EXPECT_EQ(line["steps"], 2);
    const double step_ms = line["step_ms"];
    EXPECT_EQ(step_ms, std::max(line["rank_step_ms"][0].get<double>(),
                                line["rank_step_ms"][1].get<double>()));
    fastest_ms = std::min(fastest_ms, step_ms);
    if (line["chosen"].get<bool>()) {
      ASSERT_LT(chosen_mb, 0) << "two trials chosen";
      chosen_mb = line["bucket_mb"];
      chosen_ms = step_ms;
    }
  }
  ASSERT_GT(chosen_mb, 0);
  EXPECT_EQ(chosen_ms, fastest_ms);

  // The manifest names the choice and where it came from.
  const Json summary =
      Json::parse(ReadFile(tuned[0].result->summary_path), nullptr, false);
  ASSERT_FALSE(summary.is_discarded());
  const Json& setting = summary["manifest"]["settings"]["bucket_mb"];
  EXPECT_EQ(setting["value"].get<double>(), chosen_mb);
  EXPECT_THAT(setting["source"].get<std::string>(), StartsWith("autotune: "));

  // The same job without --autotune, started with the chosen cap.
  std::vector<Outcome> plain =
      RunTwoWorkers(TestDir("plain"), /*autotune=*/false, chosen_mb, true);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(plain[rank].result.ok())
        << "worker " << rank << ": " << plain[rank].result.status();
    EXPECT_EQ(plain[rank].rebuckets, 0);
    ASSERT_FALSE(tuned[rank].params.empty());
    ASSERT_EQ(tuned[rank].params.size(), plain[rank].params.size());
    EXPECT_EQ(std::memcmp(tuned[rank].params.data(), plain[rank].params.data(),
                          plain[rank].params.size() * sizeof(float)),
              0)
        << "worker " << rank << ": the trials changed the training result";
  }
}

TEST(TrainerAutotuneTest, AStrategyThatCannotRegroupKeepsTheRulesCap) {
  const std::string dir = TestDir("fixed");
  std::vector<Outcome> outcomes =
      RunTwoWorkers(dir, /*autotune=*/true, /*bucket_mb=*/0, false);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(outcomes[rank].result.ok())
        << "worker " << rank << ": " << outcomes[rank].result.status();
    EXPECT_EQ(outcomes[rank].result->steps, 4);
  }
  std::ifstream log(absl::StrCat(dir, "/autotune.jsonl"));
  EXPECT_FALSE(log.good()) << "no trials, so no trial log";
  // And the run is the untuned one.
  std::vector<Outcome> plain =
      RunTwoWorkers(TestDir("fixed_plain"), false, 0, false);
  ASSERT_TRUE(plain[0].result.ok()) << plain[0].result.status();
  EXPECT_EQ(outcomes[0].params, plain[0].params);
}

}  // namespace
}  // namespace gradsync
