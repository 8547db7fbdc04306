// HybridSync over two recording strategies: which slice and sub-span each
// part is given, where each bucket goes, how Finish adds the parts up, and
// that an error in one part still lets the other finish.
#include "hybrid/hybrid_sync.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/device/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// What a part saw.
struct Record {
  int64_t total_numel = -1;
  std::vector<int64_t> bucket_offsets;
  float* grads = nullptr;
  std::vector<int> ready;
  std::vector<int> waited;
  int finishes = 0;
};

class RecordingSync : public GradientSync {
 public:
  RecordingSync(Record* record, int64_t bytes, absl::Status finish)
      : record_(record), bytes_(bytes), finish_(std::move(finish)) {}
  absl::Status Setup(const ParamLayout& layout, Device&,
                     const SyncBuffers& buffers) override {
    record_->total_numel = layout.total_numel();
    for (const Bucket& b : layout.buckets()) {
      record_->bucket_offsets.push_back(b.offset);
    }
    record_->grads = buffers.grads;
    return absl::OkStatus();
  }
  void BucketReady(int bucket) override { record_->ready.push_back(bucket); }
  // The sparse part ("ps", 100 bytes) waits per bucket; the dense one keeps
  // the default.
  absl::Status WaitBucket(int bucket) override {
    if (bytes_ != 100) return GradientSync::WaitBucket(bucket);
    record_->waited.push_back(bucket);
    return absl::OkStatus();
  }
  absl::Status Finish(StepStats& stats) override {
    ++record_->finishes;
    stats.bytes_sent = bytes_;
    stats.extra.emplace_back("push_ms", 1.5);
    return finish_;
  }

 private:
  Record* record_;
  int64_t bytes_;
  absl::Status finish_;
};

// A device is only passed through; the recording parts never use it.
Device& AnyDevice() {
  static Device* device = CreateDevice(DeviceOptions{})->release();
  return *device;
}

struct Hybrid {
  Record sparse, dense;
  std::unique_ptr<HybridSync> sync;
  explicit Hybrid(absl::Status sparse_finish = absl::OkStatus()) {
    sync = std::make_unique<HybridSync>(
        "ps", std::make_unique<RecordingSync>(&sparse, 100, sparse_finish),
        "ring", std::make_unique<RecordingSync>(&dense, 7, absl::OkStatus()));
  }
};

TEST(HybridSyncTest, TableFirstGoesToTheServersFromTheBufferStart) {
  // Cap 64 bytes: the head [4x4], [4] gets two buckets, the table its own.
  const ParamLayout layout = *ParamLayout::Create(
      {{"table", {10, 4}, 4}, {"w", {4, 4}}, {"b", {4}}}, 64);
  ASSERT_EQ(layout.buckets().size(), 3u);
  std::vector<float> grads(layout.total_numel());
  std::vector<float> params(layout.total_numel());
  Hybrid h;
  ASSERT_TRUE(
      h.sync->Setup(layout, AnyDevice(), {grads.data(), params.data()}).ok());
  EXPECT_EQ(h.sparse.total_numel, 40);
  EXPECT_EQ(h.sparse.grads, grads.data());
  EXPECT_EQ(h.dense.total_numel, 20);
  EXPECT_EQ(h.dense.grads, grads.data() + 40);
  EXPECT_THAT(h.dense.bucket_offsets, ElementsAre(16, 0));
  for (int b = 0; b < 3; ++b) h.sync->BucketReady(b);
  EXPECT_THAT(h.dense.ready, ElementsAre(0, 1));
  EXPECT_THAT(h.sparse.ready, ElementsAre(0));
  StepStats stats;
  ASSERT_TRUE(h.sync->Finish(stats).ok());
  EXPECT_EQ(stats.bytes_sent, 107);
  EXPECT_THAT(stats.extra, testing::Contains(Pair("ps_push_ms", 1.5)));
  EXPECT_THAT(stats.extra, testing::Contains(Pair("ring_bytes_sent", 7)));
  EXPECT_THAT(h.sync->SummaryJson(), HasSubstr("\"sparse_strategy\":\"ps\""));
}

TEST(HybridSyncTest, TableLastGoesToTheServersFromItsOffset) {
  const ParamLayout layout = *ParamLayout::Create(
      {{"w", {4, 4}}, {"b", {4}}, {"table", {10, 4}, 4}}, 0);
  ASSERT_EQ(layout.buckets().size(), 2u);
  std::vector<float> grads(layout.total_numel());
  std::vector<float> params(layout.total_numel());
  Hybrid h;
  ASSERT_TRUE(
      h.sync->Setup(layout, AnyDevice(), {grads.data(), params.data()}).ok());
  EXPECT_EQ(h.sparse.grads, grads.data() + 20);
  EXPECT_EQ(h.sparse.total_numel, 40);
  EXPECT_EQ(h.dense.grads, grads.data());
  // The table is the first bucket to be ready: bucket 0.
  h.sync->BucketReady(0);
  h.sync->BucketReady(1);
  EXPECT_THAT(h.sparse.ready, ElementsAre(0));
  EXPECT_THAT(h.dense.ready, ElementsAre(0));
}

// The trainer's next forward waits per bucket: each wait reaches the
// bucket's part, and a part without per-bucket waits says so, naming itself,
// so the trainer falls back to Finish.
TEST(HybridSyncTest, WaitBucketGoesToTheBucketsPart) {
  const ParamLayout layout = *ParamLayout::Create(
      {{"table", {10, 4}, 4}, {"w", {4, 4}}, {"b", {4}}}, 64);
  ASSERT_EQ(layout.buckets().size(), 3u);
  std::vector<float> grads(layout.total_numel());
  std::vector<float> params(layout.total_numel());
  Hybrid h;
  ASSERT_TRUE(
      h.sync->Setup(layout, AnyDevice(), {grads.data(), params.data()}).ok());
  for (int b = 0; b < 3; ++b) h.sync->BucketReady(b);
  // The table, first in forward, is the last bucket.
  EXPECT_TRUE(h.sync->WaitBucket(2).ok());
  EXPECT_THAT(h.sparse.waited, ElementsAre(0));
  const absl::Status dense = h.sync->WaitBucket(0);
  EXPECT_EQ(dense.code(), absl::StatusCode::kUnimplemented) << dense;
  EXPECT_THAT(std::string(dense.message()), HasSubstr("ring part"));
  EXPECT_EQ(h.sync->WaitBucket(3).code(),
            absl::StatusCode::kFailedPrecondition);
  StepStats stats;
  EXPECT_TRUE(h.sync->Finish(stats).ok());
}

TEST(HybridSyncTest, AFailingPartIsNamedAndTheOtherStillFinishes) {
  const ParamLayout layout =
      *ParamLayout::Create({{"table", {10, 4}, 4}, {"w", {4}}}, 0);
  std::vector<float> grads(layout.total_numel());
  std::vector<float> params(layout.total_numel());
  Hybrid h(absl::UnavailableError("server 0 is gone"));
  ASSERT_TRUE(
      h.sync->Setup(layout, AnyDevice(), {grads.data(), params.data()}).ok());
  StepStats stats;
  const absl::Status status = h.sync->Finish(stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("ps part"));
  EXPECT_THAT(status.message(), HasSubstr("server 0 is gone"));
  EXPECT_EQ(h.dense.finishes, 1);
}

}  // namespace
}  // namespace gradsync
