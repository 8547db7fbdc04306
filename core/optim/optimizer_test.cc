// Tests of the optimizers (option validation, state, steps through the device)
// and of learning-rate scaling.
#include "core/optim/optimizer.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

std::unique_ptr<Device> Cpu() {
  auto device = CreateDevice(DeviceOptions{});
  EXPECT_TRUE(device.ok()) << device.status();
  return std::move(*device);
}

std::string ErrorOf(const OptimizerOptions& options) {
  auto optimizer = CreateOptimizer(options);
  if (optimizer.ok()) return "";
  return std::string(optimizer.status().message());
}

TEST(CreateOptimizerTest, RejectsBadOptionsWithTheFlagName) {
  OptimizerOptions options;
  options.kind = "foo";
  EXPECT_EQ(ErrorOf(options), "unknown --optimizer=foo; choose sgd or adam");

  options = OptimizerOptions();
  options.lr = 0.0f;
  EXPECT_NE(ErrorOf(options).find("--lr=0"), std::string::npos);
  options.lr = std::nanf("");
  EXPECT_NE(ErrorOf(options).find("--lr"), std::string::npos);

  options = OptimizerOptions();
  options.momentum = 1.0f;
  EXPECT_NE(ErrorOf(options).find("--momentum=1"), std::string::npos);
  options.momentum = -0.1f;
  EXPECT_NE(ErrorOf(options).find("--momentum"), std::string::npos);

  options = OptimizerOptions();
  options.weight_decay = -1.0f;
  EXPECT_NE(ErrorOf(options).find("--weight_decay"), std::string::npos);

  options = OptimizerOptions();
  options.kind = "adam";
  options.beta2 = 1.0f;
  EXPECT_NE(ErrorOf(options).find("beta2"), std::string::npos);
  options.beta2 = 0.999f;
  options.epsilon = 0.0f;
  EXPECT_NE(ErrorOf(options).find("epsilon"), std::string::npos);

  // Momentum is an SGD option: Adam does not look at it.
  options = OptimizerOptions();
  options.kind = "adam";
  options.momentum = 5.0f;
  EXPECT_EQ(ErrorOf(options), "");
}

TEST(SgdOptimizerTest, StepsMatchTheDeviceKernelAndCountSteps) {
  auto device = Cpu();
  OptimizerOptions options;  // sgd, momentum 0.9
  options.weight_decay = 0.01f;
  auto optimizer = CreateOptimizer(options);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  ASSERT_TRUE((*optimizer)->Bind(*device, 1).ok());
  EXPECT_EQ((*optimizer)->name(), "sgd");
  ASSERT_EQ((*optimizer)->StateBuffers().size(), 1u);

  float* p = *device->Allocate<float>(1);
  float* g = *device->Allocate<float>(1);
  *p = 1.0f;  // CPU device memory is host memory
  *g = 0.5f;
  (*optimizer)->Step(p, g, 0.1f);
  (*optimizer)->Step(p, g, 0.1f);
  // Same two steps as the hand-computed kernel test.
  EXPECT_NEAR(*p, 0.852151f, 1e-6);
  EXPECT_NEAR((*optimizer)->StateBuffers()[0][0], 0.96849f, 1e-6);
  EXPECT_EQ((*optimizer)->step(), 2);
}

TEST(SgdOptimizerTest, NoMomentumKeepsNoState) {
  auto device = Cpu();
  OptimizerOptions options;
  options.momentum = 0.0f;
  auto optimizer = CreateOptimizer(options);
  ASSERT_TRUE(optimizer.ok());
  ASSERT_TRUE((*optimizer)->Bind(*device, 4).ok());
  EXPECT_TRUE((*optimizer)->StateBuffers().empty());
  EXPECT_FALSE((*optimizer)->Bind(*device, 0).ok());
}

TEST(AdamOptimizerTest, BiasCorrectionFollowsTheStepCounter) {
  auto device = Cpu();
  OptimizerOptions options;
  options.kind = "adam";
  options.lr = 0.01f;
  auto optimizer = CreateOptimizer(options);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  ASSERT_TRUE((*optimizer)->Bind(*device, 2).ok());
  EXPECT_EQ((*optimizer)->name(), "adam");
  EXPECT_EQ((*optimizer)->StateBuffers().size(), 2u);

  float* p = *device->Allocate<float>(2);
  float* g = *device->Allocate<float>(2);
  p[0] = 1.0f;
  p[1] = 1.0f;
  g[0] = 0.5f;
  g[1] = -3.0f;
  // With bias correction the first step is ±lr whatever the gradient's size.
  (*optimizer)->Step(p, g, 0.01f);
  EXPECT_EQ((*optimizer)->step(), 1);
  EXPECT_NEAR(p[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[1], 1.01f, 1e-6);

  // Restoring a checkpoint: moments and step counter come back together.
  (*optimizer)->set_step(41);
  (*optimizer)->Step(p, g, 0.01f);
  EXPECT_EQ((*optimizer)->step(), 42);
}

TEST(ScaleLearningRateTest, LinearNoneAndErrors) {
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.05f, "linear", 4), 0.2f);
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.05f, "none", 4), 0.05f);
  auto bad = ScaleLearningRate(0.05f, "sqrt", 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("choose linear or none"),
            std::string::npos);
  EXPECT_FALSE(ScaleLearningRate(0.05f, "linear", 0).ok());
}

}  // namespace
}  // namespace gradsync
