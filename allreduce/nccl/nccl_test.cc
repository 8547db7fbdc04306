// --sync=nccl. Runs only in CUDA builds (--config=cuda); tests that need a GPU
// skip when none is visible, so the CUDA build can be checked on a machine
// without one.
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/device/null_device.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef GRADSYNC_CUDA
#include <cuda_runtime.h>
#endif

namespace gradsync {
namespace {

using ::testing::HasSubstr;

#ifndef GRADSYNC_CUDA

TEST(NcclSyncTest, NeedsACudaBuild) {
  GTEST_SKIP() << "--sync=nccl is only built with --config=cuda";
}

#else

// A Device that claims a type and hands out cudaMalloc'd memory: enough for
// the sync strategy, which only needs type(), name() and device pointers.
class MinimalDevice : public NullDevice {
 public:
  explicit MinimalDevice(DeviceType type)
      : NullDevice(type, type == DeviceType::kCuda ? "cuda:0" : "cpu") {}
  ~MinimalDevice() override {
    for (void* block : blocks_) cudaFree(block);
  }
  absl::StatusOr<void*> AllocateBytes(size_t bytes) override {
    void* block = nullptr;
    const cudaError_t error = cudaMalloc(&block, bytes);
    if (error != cudaSuccess)
      return absl::InternalError(cudaGetErrorString(error));
    blocks_.push_back(block);
    return block;
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess
               ? absl::OkStatus()
               : absl::InternalError("cudaMemcpy");
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess
               ? absl::OkStatus()
               : absl::InternalError("cudaMemcpy");
  }

 private:
  std::vector<void*> blocks_;
};

absl::StatusOr<ParamLayout> TestLayout() {
  return ParamLayout::Create({{"w", {1000, 3}}, {"b", {1000}}}, 4096);
}

TEST(NcclSyncTest, IsRegisteredInCudaBuilds) {
  EXPECT_THAT(GradientSyncRegistry::Names(), testing::Contains("nccl"));
}

TEST(NcclSyncTest, CpuDeviceIsRefused) {
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  MinimalDevice cpu(DeviceType::kCpu);
  auto sync = GradientSyncRegistry::Create("nccl", SyncContext{});
  ASSERT_TRUE(sync.ok()) << sync.status();
  absl::Status status = (*sync)->Setup(*layout, cpu, SyncBuffers{});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("--device=cuda"));
}

// Priority needs the GPU's progress, not the host's enqueue order: refused
// in the factory with the reason, before any CUDA call (nccl_sync.cc).
TEST(NcclSyncTest, PriorityScheduleIsRefused) {
  SyncContext context;
  context.schedule.kind = ScheduleKind::kPriority;
  auto sync = GradientSyncRegistry::Create("nccl", context);
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sync.status().message()),
              HasSubstr("--schedule=priority is not built for --sync=nccl"));
}

class NcclGpuTest : public testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      GTEST_SKIP() << "no CUDA GPU visible: cudaGetDeviceCount: "
                   << cudaGetErrorString(error);
    }
    if (count == 0) GTEST_SKIP() << "no CUDA GPU visible: 0 devices";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto layout = TestLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *std::move(layout);
    const int64_t total = layout_.total_numel();
    auto grads = gpu_.Allocate<float>(total);
    ASSERT_TRUE(grads.ok()) << grads.status();
    grads_ = *grads;
    host_.resize(total);
    for (int64_t i = 0; i < total; ++i) host_[i] = static_cast<float>(i % 97 - 48);
    ASSERT_TRUE(gpu_.CopyToDevice(grads_, host_.data(), total * 4).ok());
    auto sync = GradientSyncRegistry::Create("nccl", SyncContext{});
    ASSERT_TRUE(sync.ok()) << sync.status();
    sync_ = *std::move(sync);
    const absl::Status setup =
        sync_->Setup(layout_, gpu_, SyncBuffers{grads_, nullptr});
    ASSERT_TRUE(setup.ok()) << setup;
  }

  // The gradients after the steps: over one rank, the average is the input.
  void ExpectGradientsUnchanged() {
    std::vector<float> result(host_.size());
    ASSERT_TRUE(
        gpu_.CopyToHost(result.data(), grads_, result.size() * 4).ok());
    EXPECT_EQ(result, host_);
    EXPECT_TRUE(sync_->Shutdown().ok());
  }

  ParamLayout layout_;
  MinimalDevice gpu_{DeviceType::kCuda};
  float* grads_ = nullptr;
  std::vector<float> host_;
  std::unique_ptr<GradientSync> sync_;
};

// One rank: the average over one rank is the input itself, which checks the
// communicator, the stream/event ordering and Finish's wait end to end.
TEST_F(NcclGpuTest, SingleRankAverageLeavesGradientsUnchanged) {
  for (int step = 0; step < 2; ++step) {
    for (const Bucket& bucket : layout_.buckets()) sync_->BucketReady(bucket.index);
    StepStats stats;
    const absl::Status finished = sync_->Finish(stats);
    ASSERT_TRUE(finished.ok()) << finished;
  }
  ExpectGradientsUnchanged();
}

// The next forward's per-bucket wait: WaitBucket for each bucket, last
// first (the order a forward asks), before Finish, in two steps; a bucket not
// handed over is refused.
TEST_F(NcclGpuTest, WaitBucketBeforeFinish) {
  const int buckets = static_cast<int>(layout_.buckets().size());
  ASSERT_GT(buckets, 1);
  for (int step = 0; step < 2; ++step) {
    sync_->BucketReady(0);
    const absl::Status early = sync_->WaitBucket(buckets - 1);
    EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition) << early;
    for (int b = 1; b < buckets; ++b) sync_->BucketReady(b);
    for (int b = buckets - 1; b >= 0; --b) {
      const absl::Status waited = sync_->WaitBucket(b);
      ASSERT_TRUE(waited.ok()) << waited;
    }
    StepStats stats;
    const absl::Status finished = sync_->Finish(stats);
    ASSERT_TRUE(finished.ok()) << finished;
  }
  ExpectGradientsUnchanged();
}

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
