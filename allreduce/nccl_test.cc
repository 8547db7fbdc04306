// --sync=nccl. Runs only in CUDA builds (--config=cuda); tests that need a GPU
// skip when none is visible, so the CUDA build can be checked on a machine
// without one.
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
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
class MinimalDevice : public Device {
 public:
  explicit MinimalDevice(DeviceType type) : type_(type) {}
  ~MinimalDevice() override {
    for (void* block : blocks_) cudaFree(block);
  }
  DeviceType type() const override { return type_; }
  std::string name() const override {
    return type_ == DeviceType::kCuda ? "cuda:0" : "cpu";
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
  void CopyOnDevice(float*, const float*, int64_t) override {}
  absl::Status Synchronize() override { return absl::OkStatus(); }
  void Gemm(bool, bool, int, int, int, float, const float*, const float*, float,
            float*) override {}
  void AddRowBias(float*, const float*, int, int) override {}
  void SumRows(const float*, float*, int, int) override {}
  void ReluForward(float*, int64_t) override {}
  void ReluBackward(const float*, float*, int64_t) override {}
  void SoftmaxCrossEntropy(const float*, const int32_t*, int, int, float*,
                           float*) override {}
  void Scale(float*, int64_t, float) override {}
  void Fill(float*, int64_t, float) override {}
  void SgdUpdate(float*, const float*, float*, int64_t, float, float,
                 float) override {}
  void AdamUpdate(float*, const float*, float*, float*, int64_t, float,
                  const AdamState&, float) override {}
  void Im2Col(const float*, const ConvGeometry&, float*) override {}
  void Col2Im(const float*, const ConvGeometry&, float*) override {}
  void BatchNormForwardTraining(const float*, int64_t, int, const float*,
                                const float*, float, float, float*, float*,
                                float*, float*, float*) override {}
  void BatchNormForwardInference(const float*, int64_t, int, const float*,
                                 const float*, const float*, const float*,
                                 float, float*) override {}
  void BatchNormBackward(const float*, const float*, int64_t, int, const float*,
                         const float*, const float*, float*, float*,
                         float*) override {}
  void MaxPoolForward(const float*, const PoolGeometry&, float*,
                      int32_t*) override {}
  void MaxPoolBackward(const float*, const int32_t*, const PoolGeometry&,
                       float*) override {}
  void GlobalAvgPoolForward(const float*, int, int, int, float*) override {}
  void GlobalAvgPoolBackward(const float*, int, int, int, float*) override {}
  void Add(float*, const float*, int64_t) override {}

 private:
  DeviceType type_;
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

#endif  // GRADSYNC_CUDA

}  // namespace
}  // namespace gradsync
