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
  }
};

// One rank: the average over one rank is the input itself, which checks the
// communicator, the stream/event ordering and Finish's wait end to end.
TEST_F(NcclGpuTest, SingleRankAverageLeavesGradientsUnchanged) {
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->total_numel();
  MinimalDevice gpu(DeviceType::kCuda);
  auto grads = gpu.Allocate<float>(total);
  ASSERT_TRUE(grads.ok()) << grads.status();
  std::vector<float> host(total);
  for (int64_t i = 0; i < total; ++i) host[i] = static_cast<float>(i % 97 - 48);
  ASSERT_TRUE(gpu.CopyToDevice(*grads, host.data(), total * 4).ok());

  auto sync = GradientSyncRegistry::Create("nccl", SyncContext{});
  ASSERT_TRUE(sync.ok()) << sync.status();
  absl::Status setup =
      (*sync)->Setup(*layout, gpu, SyncBuffers{*grads, nullptr});
  ASSERT_TRUE(setup.ok()) << setup;
  for (int step = 0; step < 2; ++step) {
    for (const Bucket& bucket : layout->buckets())
      (*sync)->BucketReady(bucket.index);
    StepStats stats;
    absl::Status finished = (*sync)->Finish(stats);
    ASSERT_TRUE(finished.ok()) << finished;
  }
  std::vector<float> result(total);
  ASSERT_TRUE(gpu.CopyToHost(result.data(), *grads, total * 4).ok());
  EXPECT_EQ(result, host);
  EXPECT_TRUE((*sync)->Shutdown().ok());
}

// The next forward's per-bucket wait: WaitBucket for each bucket, last
// first (the order a forward asks), before Finish, in two steps; a bucket not
// handed over is refused.
TEST_F(NcclGpuTest, WaitBucketBeforeFinish) {
  auto layout = TestLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->total_numel();
  MinimalDevice gpu(DeviceType::kCuda);
  auto grads = gpu.Allocate<float>(total);
  ASSERT_TRUE(grads.ok()) << grads.status();
  std::vector<float> host(total);
  for (int64_t i = 0; i < total; ++i) host[i] = static_cast<float>(i % 89 - 44);
  ASSERT_TRUE(gpu.CopyToDevice(*grads, host.data(), total * 4).ok());

  auto sync = GradientSyncRegistry::Create("nccl", SyncContext{});
  ASSERT_TRUE(sync.ok()) << sync.status();
  ASSERT_TRUE((*sync)->Setup(*layout, gpu, SyncBuffers{*grads, nullptr}).ok());
  const int buckets = static_cast<int>(layout->buckets().size());
  for (int step = 0; step < 2; ++step) {
    (*sync)->BucketReady(0);
    if (buckets > 1) {
      absl::Status early = (*sync)->WaitBucket(buckets - 1);
      EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition) << early;
    }
    for (int b = 1; b < buckets; ++b) (*sync)->BucketReady(b);
    for (int b = buckets - 1; b >= 0; --b) {
      absl::Status waited = (*sync)->WaitBucket(b);
      ASSERT_TRUE(waited.ok()) << waited;
    }
    StepStats stats;
    absl::Status finished = (*sync)->Finish(stats);
    ASSERT_TRUE(finished.ok()) << finished;
  }
  std::vector<float> result(total);
  ASSERT_TRUE(gpu.CopyToHost(result.data(), *grads, total * 4).ok());
  EXPECT_EQ(result, host);
  EXPECT_TRUE((*sync)->Shutdown().ok());
}

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
