// A shard's checkpoints on their own: the schedule, the file written only
// when the last key is in, the previous shard kept, and a resume that refuses
// a checkpoint of another shard. KeyParameters is exercised through them.
#include "ps/server/shard_checkpoint.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/server/key_parameters.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBlock = 4;

ps::CheckpointConfig Schedule(const std::string& path, int64_t start_step) {
  ps::CheckpointConfig config;
  config.set_path(path);
  config.set_every(3);
  config.set_steps_per_epoch(5);
  config.set_total_steps(7);
  config.set_start_step(start_step);
  return config;
}

class ShardCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Device>> device =
        CreateDevice(DeviceOptions());
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    path_ = ::testing::TempDir() + "/shard_checkpoint_test.ckpt";
    std::remove((path_ + ".server1").c_str());
    std::remove((path_ + ".server1.previous").c_str());
  }

  // Key `key` of `numel` floats, its initial parameters i * `scale`.
  std::unique_ptr<KeyParameters> Key(int64_t key, int64_t numel, float scale) {
    absl::StatusOr<std::unique_ptr<KeyParameters>> parameters =
        KeyParameters::Create(key, numel, kBlock, *device_, OptimizerOptions(),
                              "test");
    EXPECT_TRUE(parameters.ok()) << parameters.status();
    std::vector<float> initial(numel);
    for (int64_t i = 0; i < numel; ++i) initial[i] = scale * i;
    std::string bytes(reinterpret_cast<const char*>(initial.data()),
                      initial.size() * sizeof(float));
    EXPECT_TRUE((*parameters)->AddInitial(0, bytes, "test").ok());
    return std::move(*parameters);
  }

  std::unique_ptr<Device> device_;
  std::string path_;
};

TEST_F(ShardCheckpointTest, ScheduleIsWorkerZeros) {
  ShardCheckpoint checkpoint("server 1", 1, 2, Schedule(path_, 0), "sgd", {},
                             0);
  // Every 3 steps, at each epoch's end (5) and at the run's end (7).
  std::vector<int64_t> steps;
  for (int64_t s = 1; s <= 10; ++s) {
    if (checkpoint.IsCheckpointStep(s)) steps.push_back(s);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 5, 6, 7, 9, 10}));
  EXPECT_TRUE(checkpoint.IsBarrierStep(7));
  EXPECT_FALSE(checkpoint.IsBarrierStep(8));

  // Without a path nothing is a checkpoint step, but the run's end is still
  // a barrier.
  ShardCheckpoint none("server 1", 1, 2, Schedule("", 0), "sgd", {}, 0);
  EXPECT_FALSE(none.IsCheckpointStep(3));
  EXPECT_TRUE(none.IsBarrierStep(7));
}

TEST_F(ShardCheckpointTest, WritesWhenTheLastKeyIsInAndResumesFromIt) {
  std::unique_ptr<KeyParameters> a = Key(10, 6, 1.0f);
  std::unique_ptr<KeyParameters> b = Key(11, 3, -2.0f);
  const std::vector<CheckpointKey> keys = {{10, 6}, {11, 3}};
  ShardCheckpoint checkpoint("server 1", 1, 2, Schedule(path_, 0), "sgd", keys,
                             a->state_buffers());
  const std::string shard = path_ + ".server1";

  checkpoint.TakeKey(0, *a, 3);
  EXPECT_FALSE(std::ifstream(shard).good())
      << "written before every key was in";
  checkpoint.TakeKey(1, *b, 3);
  EXPECT_TRUE(checkpoint.status().ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint.written(), 1);

  // A barrier read of step 3 sees the snapshot.
  std::vector<float> read(2);
  ASSERT_TRUE(checkpoint
                  .ReadSnapshot(1, 3, 1, 2,
                                [&](int64_t floats) {
                                  return reinterpret_cast<char*>(read.data());
                                })
                  .ok());
  EXPECT_EQ(read, (std::vector<float>{-2.0f, -4.0f}));
  EXPECT_FALSE(checkpoint
                   .ReadSnapshot(1, 6, 0, 1,
                                 [&](int64_t floats) {
                                   ADD_FAILURE() << "placed for a wrong step";
                                   return reinterpret_cast<char*>(read.data());
                                 })
                   .ok());

  // The next checkpoint keeps this one as .previous.
  checkpoint.TakeKey(0, *a, 5);
  checkpoint.TakeKey(1, *b, 5);
  EXPECT_EQ(checkpoint.written(), 2);
  absl::StatusOr<Checkpoint> previous = ReadCheckpoint(shard + ".previous");
  ASSERT_TRUE(previous.ok()) << previous.status();
  EXPECT_EQ(previous->step, 3);

  // A resume at step 5 fills fresh parameters with the saved ones.
  ShardCheckpoint resumed("server 1", 1, 2, Schedule(path_, 5), "sgd", keys,
                          a->state_buffers());
  std::unique_ptr<KeyParameters> a2 = Key(10, 6, 0.0f);
  std::unique_ptr<KeyParameters> b2 = Key(11, 3, 0.0f);
  ASSERT_TRUE(resumed.Load({a2.get(), b2.get()}, "resume").ok());
  EXPECT_EQ(std::vector<float>(a2->data(), a2->data() + 6),
            std::vector<float>(a->data(), a->data() + 6));
  EXPECT_EQ(b2->data()[2], -4.0f);

  // Another shard's key table is refused, naming both.
  ShardCheckpoint other("server 1", 1, 2, Schedule(path_, 5), "sgd",
                        {{10, 6}, {12, 3}}, a->state_buffers());
  absl::Status refused = other.Load({a2.get(), b2.get()}, "resume");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("12: 3 floats"));
  // So is a step the file does not hold (neither it nor .previous).
  ShardCheckpoint later("server 1", 1, 2, Schedule(path_, 6), "sgd", keys,
                        a->state_buffers());
  EXPECT_THAT(std::string(later.Load({a2.get(), b2.get()}, "resume").message()),
              HasSubstr("holds step 5"));
}

TEST_F(ShardCheckpointTest, InitialParametersComeInOrder) {
  absl::StatusOr<std::unique_ptr<KeyParameters>> parameters =
      KeyParameters::Create(7, 8, kBlock, *device_, OptimizerOptions(), "test");
  ASSERT_TRUE(parameters.ok()) << parameters.status();
  const std::string four_floats(16, '\0');
  EXPECT_THAT(
      std::string((*parameters)->AddInitial(4, four_floats, "ctx").message()),
      HasSubstr("does not continue the 0 of 8"));
  EXPECT_TRUE((*parameters)->AddInitial(0, four_floats, "ctx").ok());
  EXPECT_FALSE((*parameters)->initialized());
  EXPECT_TRUE((*parameters)->AddInitial(4, four_floats, "ctx").ok());
  EXPECT_TRUE((*parameters)->initialized());
  EXPECT_FALSE((*parameters)->AddInitial(8, four_floats, "ctx").ok());
}

}  // namespace
}  // namespace gradsync
