// ProfilingDevice on the CPU device: every operation forwarded with the inner
// device's results, one mark after each, read back in queue order with its
// category and shape; convolutions' three directions timed apart; nothing
// marked outside a step; each operation's host time within its device time
// on the CPU; a step with more operations than the limit refused with the
// number to raise it to.
#include "core/device/profiling_device.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device/convolution_kernel.h"
#include "core/device/device.h"
#include "core/device/layer_geometry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ProfilingDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceOptions options;
    options.cpu_threads = 1;
    auto created = CreateDevice(options);
    ASSERT_TRUE(created.ok()) << created.status();
    cpu_ = std::move(*created);
  }
  float* Upload(const std::vector<float>& host) {
    float* buffer = *cpu_->Allocate<float>(static_cast<int64_t>(host.size()));
    EXPECT_TRUE(cpu_->CopyToDevice(buffer, host.data(), host.size() * 4).ok());
    return buffer;
  }
  std::vector<float> Download(const float* buffer, int64_t count) {
    std::vector<float> host(count);
    EXPECT_TRUE(cpu_->CopyToHost(host.data(), buffer, count * 4).ok());
    return host;
  }
  static std::vector<std::string> Labels(const std::vector<ProfiledOp>& ops) {
    std::vector<std::string> labels;
    for (const ProfiledOp& op : ops) labels.push_back(op.label);
    return labels;
  }

  std::unique_ptr<Device> cpu_;
};

TEST_F(ProfilingDeviceTest, MarksEachOperationOfAStepInOrder) {
  auto profiled = ProfilingDevice::Create(*cpu_, 16);
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  ProfilingDevice& device = **profiled;
  EXPECT_EQ(device.type(), DeviceType::kCpu);
  EXPECT_EQ(device.name(), cpu_->name());

  float* x = Upload({-1.0f, 2.0f, -3.0f, 4.0f});
  float* y = Upload({1.0f, 1.0f, 1.0f, 1.0f});
  float* dot = Upload({0.0f});
  device.ReluForward(x, 4);  // outside a step: run, not marked
  ASSERT_TRUE(device.BeginStep().ok());
  device.Add(y, x, 4);
  device.Gemm(false, true, 1, 1, 4, 1.0f, x, y, 0.0f, dot);
  device.SgdUpdate(x, y, nullptr, 4, 0.5f, 0.0f, 0.0f);
  auto ops = device.EndStep();
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_THAT(Labels(*ops), ElementsAre("element-wise add 4 floats",
                                        "matrix product 1x1x4 b^T",
                                        "optimizer sgd 4 floats"));
  EXPECT_EQ((*ops)[1].category, "matrix product");
  for (const ProfiledOp& op : *ops) {
    EXPECT_GE(op.ms, 0.0) << op.label;
    // The CPU runs an operation before it returns, so the host's time to
    // queue it lies inside its device interval, from which the host time
    // leaves out the marks' own cost: never more than its device time.
    EXPECT_GE(op.host_ms, 0.0) << op.label;
    EXPECT_LE(op.host_ms, op.ms) << op.label;
  }
  // The inner device's arithmetic: relu(x) = [0, 2, 0, 4]; y = 1 + relu(x);
  // dot = relu(x)·y = 2·3 + 4·5 = 26; x -= 0.5·y.
  EXPECT_THAT(Download(y, 4), ElementsAre(1.0f, 3.0f, 1.0f, 5.0f));
  EXPECT_THAT(Download(dot, 1), ElementsAre(26.0f));
  EXPECT_THAT(Download(x, 4), ElementsAre(-0.5f, 0.5f, -0.5f, 1.5f));

  // A second step reuses the marks.
  ASSERT_TRUE(device.BeginStep().ok());
  device.Fill(y, 4, 0.0f);
  auto again = device.EndStep();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(Labels(*again), ElementsAre("element-wise fill 4 floats"));
}

TEST_F(ProfilingDeviceTest, ConvolutionDirectionsAreOperationsOfTheirOwn) {
  auto profiled = ProfilingDevice::Create(*cpu_, 16);
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  ConvGeometry g;
  g.batch = 2;
  g.channels = 3;
  g.height = g.width = 5;
  g.kernel = 3;
  g.stride = 1;
  g.padding = 1;
  g.out_height = g.out_width = 5;
  g.input = NhwcLayout(3, 5, 5);
  auto kernel = (*profiled)->CreateConvolution(g, 4);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_NE(*kernel, nullptr) << "the CPU device convolves with oneDNN";
  ASSERT_EQ((*profiled)->convolutions().size(), 1u);
  EXPECT_EQ((*profiled)->convolutions()[0].shape, "3x3/1 3->4 at 5x5");
  // oneDNN's implementation names, one per direction.
  EXPECT_FALSE((*profiled)->convolutions()[0].library.empty());
  auto plain = cpu_->CreateConvolution(g, 4);
  ASSERT_TRUE(plain.ok()) << plain.status();

  const std::vector<float> x(g.input_count(), 0.25f), weight(4 * 3 * 9, 0.5f),
      dy(g.column_rows() * 4, 1.0f);
  float* device_x = Upload(x);
  float* device_w = Upload(weight);
  float* device_dy = Upload(dy);
  float* outputs[2][3];  // [profiled, plain][y, weight grad, dx]
  for (auto& side : outputs) {
    side[0] = Upload(std::vector<float>(g.column_rows() * 4));
    side[1] = Upload(std::vector<float>(weight.size()));
    side[2] = Upload(std::vector<float>(x.size()));
  }
  ASSERT_TRUE((*profiled)->BeginStep().ok());
  (*kernel)->Forward(device_x, device_w, outputs[0][0]);
  int ready = 0;
  (*kernel)->Backward(device_x, device_dy, device_w, outputs[0][1],
                      outputs[0][2], [&] { ++ready; });
  auto ops = (*profiled)->EndStep();
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(ready, 1);
  EXPECT_THAT(Labels(*ops),
              ElementsAre("conv forward 3x3/1 3->4 at 5x5",
                          "conv weight gradient 3x3/1 3->4 at 5x5",
                          "conv input gradient 3x3/1 3->4 at 5x5"));
  (*plain)->Forward(device_x, device_w, outputs[1][0]);
  (*plain)->Backward(device_x, device_dy, device_w, outputs[1][1],
                     outputs[1][2], [] {});
  EXPECT_EQ(Download(outputs[0][0], g.column_rows() * 4),
            Download(outputs[1][0], g.column_rows() * 4));
  EXPECT_EQ(Download(outputs[0][1], weight.size()),
            Download(outputs[1][1], weight.size()));
  EXPECT_EQ(Download(outputs[0][2], x.size()),
            Download(outputs[1][2], x.size()));
}

TEST_F(ProfilingDeviceTest, TooManyOperationsAndMisuseAreRefused) {
  EXPECT_FALSE(ProfilingDevice::Create(*cpu_, 0).ok());
  auto profiled = ProfilingDevice::Create(*cpu_, 2);
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  ProfilingDevice& device = **profiled;
  EXPECT_FALSE(device.EndStep().ok());  // no step begun
  float* x = Upload({1.0f});
  ASSERT_TRUE(device.BeginStep().ok());
  EXPECT_FALSE(device.BeginStep().ok());  // the step is not ended
  for (int i = 0; i < 3; ++i) device.Scale(x, 1, 2.0f);
  auto ops = device.EndStep();
  ASSERT_FALSE(ops.ok());
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(ops.status().message(), HasSubstr("at least 3"));
  // Every call ran, though only two were marked.
  EXPECT_THAT(Download(x, 1), ElementsAre(8.0f));
  // The device is usable again.
  ASSERT_TRUE(device.BeginStep().ok());
  device.Scale(x, 1, 0.5f);
  EXPECT_TRUE(device.EndStep().ok());
}

}  // namespace
}  // namespace gradsync
