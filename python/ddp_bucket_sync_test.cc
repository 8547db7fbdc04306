// DdpBucketSync without Python or a network: a one-worker job (no launcher
// variables) and a recording strategy registered here, which notes every
// BucketReady and on Finish halves the gradients (as an average of two
// workers holding the same gradient would).
#include "python/ddp_bucket_sync.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "python/job_connection.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int>* ready_calls = nullptr;

class RecordingSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout& layout, Device&,
                     const SyncBuffers& buffers) override {
    grads_ = buffers.grads;
    numel_ = layout.total_numel();
    return absl::OkStatus();
  }
  void BucketReady(int bucket) override { ready_calls->push_back(bucket); }
  absl::Status Finish(StepStats&) override {
    for (int64_t i = 0; i < numel_; ++i) grads_[i] *= 0.5f;
    return absl::OkStatus();
  }

 private:
  float* grads_ = nullptr;
  int64_t numel_ = 0;
};

GRADSYNC_REGISTER_SYNC(recording, [](const SyncContext&)
                                      -> absl::StatusOr<
                                          std::unique_ptr<GradientSync>> {
  return std::unique_ptr<GradientSync>(new RecordingSync());
});

// Parameters A (key 1, 2 floats), B (key 2, 3 floats), C (key 3, 1 float),
// in forward order; backward makes C, B, A final.
constexpr DdpParam kA{1, 2}, kB{2, 3}, kC{3, 1};

class DdpBucketSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ready_calls = &ready_;
    JobConnectionOptions options;
    options.sync = "recording";
    absl::StatusOr<std::unique_ptr<JobConnection>> job =
        JobConnection::Join(options);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
    sync_ = std::make_unique<DdpBucketSync>(*job_);
    // Every parameter closes a bucket: three strategy buckets, C, B, A.
    ASSERT_TRUE(sync_->SetCaps({4, 4}).ok());
  }

  DdpBucket Bucket(int index, std::vector<float>& data,
                   std::vector<DdpParam> params, bool is_last) {
    DdpBucket bucket;
    bucket.index = index;
    bucket.data = data.data();
    bucket.numel = static_cast<int64_t>(data.size());
    bucket.params = std::move(params);
    bucket.is_last = is_last;
    return bucket;
  }

  // DDP's first iteration: one bucket, parameters in forward order.
  void FirstStep() {
    std::vector<float> all = {1, 2, 3, 4, 5, 6};
    sync_->SetReadyOrder({kC.key, kB.key, kA.key});
    absl::StatusOr<bool> ended = sync_->Add(Bucket(0, all, {kA, kB, kC}, true));
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_TRUE(*ended);
    EXPECT_THAT(all, ElementsAre(0.5, 1, 1.5, 2, 2.5, 3));
    ready_.clear();
  }

  std::vector<int> ready_;
  std::unique_ptr<JobConnection> job_;
  std::unique_ptr<DdpBucketSync> sync_;
};

TEST_F(DdpBucketSyncTest, FirstStepSetsUpBucketsFromTheReadyOrder) {
  FirstStep();
  EXPECT_THAT(sync_->DescribeLayout(), HasSubstr("bucket 2"));
}

TEST_F(DdpBucketSyncTest, DdpBucketHandsOverItsStrategyBucketAtOnce) {
  FirstStep();
  std::vector<float> c = {10}, b = {20, 30, 40}, a = {50, 60};
  absl::StatusOr<bool> ended = sync_->Add(Bucket(0, c, {kC}, false));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_FALSE(*ended);
  // Communication starts before backward has finished: overlap.
  EXPECT_THAT(ready_, ElementsAre(0));
  ASSERT_TRUE(sync_->Add(Bucket(1, b, {kB}, false)).ok());
  EXPECT_THAT(ready_, ElementsAre(0, 1));
  ended = sync_->Add(Bucket(2, a, {kA}, true));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(*ended);
  EXPECT_THAT(ready_, ElementsAre(0, 1, 2));
  EXPECT_THAT(c, ElementsAre(5));
  EXPECT_THAT(b, ElementsAre(10, 15, 20));
  EXPECT_THAT(a, ElementsAre(25, 30));
  EXPECT_EQ(sync_->last_step().step, 1);
}

TEST_F(DdpBucketSyncTest, RegroupedBucketsAreFilledParameterByParameter) {
  FirstStep();
  // DDP's buckets now group C and B, then A, with B first inside.
  std::vector<float> cb = {20, 30, 40, 10}, a = {50, 60};
  ASSERT_TRUE(sync_->Add(Bucket(0, cb, {kB, kC}, false)).ok());
  EXPECT_THAT(ready_, ElementsAre(1, 0));
  absl::StatusOr<bool> ended = sync_->Add(Bucket(1, a, {kA}, true));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(*ended);
  EXPECT_THAT(cb, ElementsAre(10, 15, 20, 5));
  EXPECT_THAT(a, ElementsAre(25, 30));
}

TEST_F(DdpBucketSyncTest, BucketsOutOfOrderAreOneErrorThenRefused) {
  FirstStep();
  std::vector<float> c = {10}, b = {20, 30, 40};
  ASSERT_TRUE(sync_->Add(Bucket(0, c, {kC}, false)).ok());
  absl::StatusOr<bool> ended = sync_->Add(Bucket(0, c, {kC}, false));
  EXPECT_THAT(ended.status().message(), HasSubstr("serves two hooks"));
  ended = sync_->Add(Bucket(1, b, {kB}, false));
  EXPECT_THAT(ended.status().message(), HasSubstr("failed earlier"));
}

TEST_F(DdpBucketSyncTest, UnknownParameterIsAnError) {
  FirstStep();
  std::vector<float> other = {1};
  absl::StatusOr<bool> ended =
      sync_->Add(Bucket(0, other, {DdpParam{99, 1}}, false));
  EXPECT_THAT(ended.status().message(),
              HasSubstr("not in DDP's buckets of the first step"));
}

TEST_F(DdpBucketSyncTest, StepWithoutSomeParameterIsAnError) {
  FirstStep();
  std::vector<float> c = {10}, b = {20, 30, 40};
  ASSERT_TRUE(sync_->Add(Bucket(0, c, {kC}, false)).ok());
  absl::StatusOr<bool> ended = sync_->Add(Bucket(1, b, {kB}, true));
  EXPECT_THAT(ended.status().message(), HasSubstr("never handed over"));
}

TEST_F(DdpBucketSyncTest, CapsAfterTheFirstBucketAreRefused) {
  std::vector<float> a = {1, 2};
  ASSERT_TRUE(sync_->Add(Bucket(0, a, {kA}, false)).ok());
  EXPECT_FALSE(sync_->SetCaps({4, 4}).ok());
}

}  // namespace
}  // namespace gradsync
