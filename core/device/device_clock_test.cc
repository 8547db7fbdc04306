// The host's DeviceClock, which the CPU device (and any device that runs its
// work on the calling thread) times its work with: marks in recording order,
// elapsed times that agree with each other, and the errors every clock gives.
#include "core/device/device_clock.h"

#include <chrono>
#include <memory>
#include <vector>

#include "core/device/device.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(HostDeviceClockTest, MarksFollowTheWorkBetweenThem) {
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  auto made = (*device)->CreateClock(3);
  ASSERT_TRUE(made.ok()) << made.status();
  DeviceClock& clock = **made;
  EXPECT_EQ(clock.marks(), 3);

  const int n = 256;
  float* a = *(*device)->Allocate<float>(n * n);
  float* c = *(*device)->Allocate<float>(n * n);
  (*device)->Fill(a, n * n, 1.0f);
  const auto host_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(clock.Record(0).ok());
  (*device)->Gemm(false, false, n, n, n, 1.0f, a, a, 0.0f, c);
  ASSERT_TRUE(clock.Record(1).ok());
  (*device)->Gemm(false, true, n, n, n, 1.0f, a, a, 0.0f, c);
  ASSERT_TRUE(clock.Record(2).ok());
  const double host_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - host_start)
                             .count();

  const double first = *clock.ElapsedMs(0, 1);
  const double both = *clock.ElapsedMs(0, 2);
  EXPECT_GT(first, 0.0);
  EXPECT_GE(both, first);
  // The CPU's work ran inside the host's window around it.
  EXPECT_LE(both, host_ms);
  EXPECT_DOUBLE_EQ(*clock.ElapsedMs(2, 0), -both);
  EXPECT_DOUBLE_EQ(*clock.ElapsedMs(1, 1), 0.0);
  EXPECT_NEAR(*clock.ElapsedMs(1, 2), both - first, 1e-9);

  // Recording a mark again moves it.
  ASSERT_TRUE(clock.Record(0).ok());
  EXPECT_LE(*clock.ElapsedMs(0, 2), 0.0);
}

TEST(HostDeviceClockTest, BadIndicesAndUnrecordedMarksAreErrors) {
  HostDeviceClock clock(2);
  EXPECT_EQ(clock.Record(2).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(clock.Record(-1).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(clock.Record(0).ok());
  const absl::StatusOr<double> unrecorded = clock.ElapsedMs(0, 1);
  EXPECT_EQ(unrecorded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unrecorded.status().message().find("mark 1"), std::string::npos)
      << unrecorded.status();
  EXPECT_EQ(clock.ElapsedMs(0, 5).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(HostDeviceClockTest, ANegativeMarkCountIsRefused) {
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->CreateClock(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = (*device)->CreateClock(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->marks(), 0);
}

}  // namespace
}  // namespace gradsync
