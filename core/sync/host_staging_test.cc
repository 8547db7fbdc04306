// Host staging: the CPU pass-through (every build), and on a GPU the pinned
// mirror's ordering — a download sees work queued before it, the compute
// stream sees uploads after FinishStep — without device-wide synchronization.
#include "core/sync/host_staging.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef GRADSYNC_CUDA
#include <cuda_runtime.h>

#include "core/device/cuda_device.h"
#endif

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Three buckets of different sizes (a 4 KiB cap splits the weights apart).
ParamLayout TestLayout() {
  auto layout = ParamLayout::Create(
      {{"w1", {64, 32}}, {"b1", {64}}, {"w2", {10, 64}}, {"b2", {10}}}, 4096);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return std::move(*layout);
}

TEST(HostStagingTest, CpuDevicePassesTheBufferThrough) {
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  const ParamLayout layout = TestLayout();
  float* buffer = *(*device)->Allocate<float>(layout.total_numel());
  auto staging = CreateHostStaging(**device, layout, buffer, absl::Seconds(5));
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_FALSE((*staging)->is_mirror());
  EXPECT_EQ((*staging)->host_buffer(), buffer);
  EXPECT_EQ((*staging)->host_bucket(1), buffer + layout.buckets()[1].offset);

  // on_host runs inline, before Download returns.
  bool called = false;
  (*staging)->Download(0, [&called](absl::Status status) {
    EXPECT_TRUE(status.ok()) << status;
    called = true;
  });
  EXPECT_TRUE(called);
  absl::Status out_of_range;
  (*staging)->Download(7, [&](absl::Status status) { out_of_range = status; });
  EXPECT_THAT(std::string(out_of_range.message()), HasSubstr("bucket 7"));
  (*staging)->Upload(0);
  EXPECT_TRUE((*staging)->UploadAll().ok());
  EXPECT_TRUE((*staging)->FinishStep().ok());
}

TEST(HostStagingTest, NeedsABuffer) {
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  auto staging =
      CreateHostStaging(**device, TestLayout(), nullptr, absl::Seconds(5));
  EXPECT_EQ(staging.status().code(), absl::StatusCode::kInvalidArgument);
}

#ifdef GRADSYNC_CUDA

class PinnedHostStagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount: "
                   << cudaGetErrorString(error) << ")";
    }
    if (count == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount: 0 devices)";
    }
    auto device = CudaDevice::Create(0);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
  }

  std::unique_ptr<CudaDevice> device_;
};

TEST_F(PinnedHostStagingTest,
       DownloadsFollowQueuedWorkAndUploadsPrecedeLaterWork) {
  const ParamLayout layout = TestLayout();
  const int64_t n = layout.total_numel();
  const int buckets = static_cast<int>(layout.buckets().size());
  ASSERT_GE(buckets, 2);
  float* grads = *device_->Allocate<float>(n);
  auto staging = CreateHostStaging(*device_, layout, grads, absl::Seconds(30));
  ASSERT_TRUE(staging.ok()) << staging.status();
  HostStaging& s = **staging;
  ASSERT_TRUE(s.is_mirror());

  for (int step = 1; step <= 3; ++step) {
    // "Backward": queued, not finished, when Download is called.
    device_->Fill(grads, n, static_cast<float>(step));
    absl::Mutex mu;
    int delivered = 0;  // guarded by mu
    for (int b = 0; b < buckets; ++b) {
      s.Download(b, [&, b](absl::Status status) {
        EXPECT_TRUE(status.ok()) << status;
        // The strategy's reduction, on the host: double the bucket.
        float* host = s.host_bucket(b);
        for (int64_t i = 0; i < layout.buckets()[b].numel; ++i) {
          EXPECT_EQ(host[i], static_cast<float>(step)) << "bucket " << b;
          host[i] *= 2.0f;
        }
        s.Upload(b);
        absl::MutexLock lock(&mu);
        ++delivered;
      });
    }
    {
      absl::MutexLock lock(&mu);
      const auto all_delivered = [&] { return delivered == buckets; };
      ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_delivered),
                                      absl::Seconds(30)))
          << delivered << " of " << buckets << " buckets delivered";
    }
    ASSERT_TRUE(s.FinishStep().ok());
    // The "optimizer", queued after FinishStep on the compute stream.
    device_->Scale(grads, n, 1.0f);
    std::vector<float> result(n);
    ASSERT_TRUE(device_->CopyToHost(result.data(), grads, n * 4).ok());
    EXPECT_EQ(result, std::vector<float>(n, 2.0f * step));
  }
}

TEST_F(PinnedHostStagingTest, UploadAllWaitsForQueuedComputeWork) {
  const ParamLayout layout = TestLayout();
  const int64_t n = layout.total_numel();
  float* params = *device_->Allocate<float>(n);
  auto staging = CreateHostStaging(*device_, layout, params, absl::Seconds(30));
  ASSERT_TRUE(staging.ok()) << staging.status();
  for (int64_t i = 0; i < n; ++i) (*staging)->host_buffer()[i] = 5.0f;
  device_->Fill(params, n, 1.0f);  // queued before: must not win
  ASSERT_TRUE((*staging)->UploadAll().ok());
  ASSERT_TRUE((*staging)->FinishStep().ok());
  std::vector<float> result(n);
  ASSERT_TRUE(device_->CopyToHost(result.data(), params, n * 4).ok());
  EXPECT_EQ(result, std::vector<float>(n, 5.0f));
}

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
