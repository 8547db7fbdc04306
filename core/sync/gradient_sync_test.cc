// The strategy registry (--sync=...): what Create finds, what it says about a
// name it does not know, and that a name can be registered only once; and that
// --sync=local leaves the gradients exactly as backward wrote them.
#include "core/sync/gradient_sync.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/sync/compression.h"
#include "core/sync/param_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// Remembers the context it was created with so the test can see that Create
// called this factory and passed the context through.
class RecordingSync : public GradientSync {
 public:
  explicit RecordingSync(int rank) : rank(rank) {}
  absl::Status Setup(const ParamLayout&, Device&, const SyncBuffers&) override {
    return absl::OkStatus();
  }
  void BucketReady(int) override {}
  absl::Status Finish(StepStats&) override { return absl::OkStatus(); }
  const int rank;
};

absl::StatusOr<std::unique_ptr<GradientSync>> CreateRecordingSync(
    const SyncContext& context) {
  return std::unique_ptr<GradientSync>(
      new RecordingSync(context.identity.rank));
}

// Registered out of alphabetical order on purpose.
GRADSYNC_REGISTER_SYNC(zz_registry_test, CreateRecordingSync);
GRADSYNC_REGISTER_SYNC(aa_registry_test, CreateRecordingSync);

TEST(GradientSyncRegistryTest, CreateFindsARegisteredName) {
  SyncContext context;
  context.identity.rank = 5;
  auto sync = GradientSyncRegistry::Create("zz_registry_test", context);
  ASSERT_TRUE(sync.ok()) << sync.status();
  auto* recording = dynamic_cast<RecordingSync*>(sync->get());
  ASSERT_NE(recording, nullptr);
  EXPECT_EQ(recording->rank, 5);
}

TEST(GradientSyncRegistryTest, AnUnknownNameListsTheRegisteredOnes) {
  auto sync = GradientSyncRegistry::Create("no_such_strategy", SyncContext{});
  ASSERT_FALSE(sync.ok());
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(sync.status().message());
  EXPECT_THAT(message, HasSubstr("unknown --sync=no_such_strategy"));
  EXPECT_THAT(message, HasSubstr("aa_registry_test"));
  EXPECT_THAT(message, HasSubstr("local"));
}

TEST(GradientSyncRegistryTest, NcclInACpuBuildSaysWhichBuildHasIt) {
  if (GradientSyncRegistry::Create("nccl", SyncContext{}).status().code() !=
      absl::StatusCode::kInvalidArgument) {
    GTEST_SKIP() << "nccl is registered in this build";
  }
  auto sync = GradientSyncRegistry::Create("nccl", SyncContext{});
  EXPECT_THAT(std::string(sync.status().message()), HasSubstr("--config=cuda"));
}

TEST(GradientSyncRegistryTest, NamesAreSorted) {
  const std::vector<std::string> names = GradientSyncRegistry::Names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_THAT(names, Contains("aa_registry_test"));
  EXPECT_THAT(names, Contains("zz_registry_test"));
  EXPECT_THAT(names, Contains("local"));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

TEST(GradientSyncRegistryDeathTest, RegisteringANameTwiceDies) {
  EXPECT_DEATH(
      GradientSyncRegistry::Register("zz_registry_test", CreateRecordingSync),
      "'zz_registry_test' registered twice");
}

TEST(LocalSyncTest, RefusesSeveralWorkers) {
  SyncContext context;
  context.identity.world_size = 2;
  auto sync = GradientSyncRegistry::Create("local", context);
  ASSERT_FALSE(sync.ok());
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sync.status().message()), HasSubstr("has 2"));
}

TEST(LocalSyncTest, LeavesGradientsAndParametersUnchanged) {
  auto layout = ParamLayout::Create({{"fc1.weight", {4, 3}},
                                     {"fc1.bias", {4}},
                                     {"fc2.weight", {2, 4}},
                                     {"fc2.bias", {2}}},
                                    /*bucket_bytes=*/32);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_GT(layout->buckets().size(), 1u);
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();

  // The CPU device's memory is host memory.
  const int64_t n = layout->total_numel();
  std::vector<float> grads(n), params(n);
  for (int64_t i = 0; i < n; ++i) {
    grads[i] = 0.25f * i - 3.0f;
    params[i] = 1.0f / (i + 1);
  }
  const std::vector<float> grads_before = grads, params_before = params;

  auto sync = GradientSyncRegistry::Create("local", SyncContext{});
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_FALSE((*sync)->UpdatesParameters());
  ASSERT_TRUE(
      (*sync)
          ->Setup(*layout, **device, SyncBuffers{grads.data(), params.data()})
          .ok());
  for (int step = 0; step < 2; ++step) {
    for (int b = 0; b < static_cast<int>(layout->buckets().size()); ++b) {
      (*sync)->BucketReady(b);
    }
    StepStats stats;
    ASSERT_TRUE((*sync)->Finish(stats).ok());
    EXPECT_EQ(stats.bytes_sent, 0);
    EXPECT_EQ(stats.bytes_recv, 0);
  }
  EXPECT_EQ(grads, grads_before);
  EXPECT_EQ(params, params_before);
  EXPECT_TRUE((*sync)->Shutdown().ok());
}

// With --compression one worker is the compressed reference: each bucket
// becomes D(C(g + e)) with the worker's residual carried to the next step.
TEST(LocalSyncTest, CompressionEncodesAndDecodesWithErrorFeedback) {
  auto layout = ParamLayout::Create({{"fc1.weight", {40, 3}}, {"fc1.bias", {40}}},
                                    /*bucket_bytes=*/256);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  const int64_t n = layout->total_numel();
  SyncContext context;
  context.compression = CompressionSpec::Parse("topk:0.1").value();
  context.compression_seed = 3;
  auto sync = GradientSyncRegistry::Create("local", context);
  ASSERT_TRUE(sync.ok()) << sync.status();
  std::vector<float> grads(n), params(n);
  ASSERT_TRUE(
      (*sync)
          ->Setup(*layout, **device, SyncBuffers{grads.data(), params.data()})
          .ok());
  Compressor reference(context.compression, 3);
  std::vector<float> residual(n, 0.0f);
  for (int step = 0; step < 3; ++step) {
    for (int64_t i = 0; i < n; ++i) grads[i] = std::sin(0.7f * i + step);
    std::vector<float> want(n, 0.0f);
    for (const Bucket& bucket : layout->buckets()) {
      EncodedBucket encoded;
      ASSERT_TRUE(reference
                      .Encode(absl::MakeConstSpan(grads).subspan(bucket.offset,
                                                                 bucket.numel),
                              absl::MakeSpan(residual).subspan(bucket.offset,
                                                               bucket.numel),
                              step, bucket.index, &encoded)
                      .ok());
      ASSERT_TRUE(AddDecoded(encoded, absl::MakeSpan(want).subspan(
                                          bucket.offset, bucket.numel))
                      .ok());
    }
    for (const Bucket& bucket : layout->buckets()) {
      (*sync)->BucketReady(bucket.index);
    }
    StepStats stats;
    ASSERT_TRUE((*sync)->Finish(stats).ok());
    ASSERT_EQ(grads, want) << "step " << step;
  }
  EXPECT_THAT((*sync)->SummaryJson(), HasSubstr("topk:0.1"));
}

}  // namespace
}  // namespace gradsync
