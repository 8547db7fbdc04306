// The link the launcher emulates, as the edge reads it for the parameter
// server's window rule: the --netem text, and the latency left out where the
// kernel could not add it.
#include "tools/emulated_link.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(EmulatedLinkTest, ReadsTheLaunchersLinkSpec) {
  const LinkFigures link = LinkFiguresFromNetemSpec("1gbit,1ms");
  EXPECT_DOUBLE_EQ(link.rate_bytes_per_s, 125e6);
  EXPECT_DOUBLE_EQ(link.round_trip_s, 2e-3);
  EXPECT_EQ(LinkFiguresFromNetemSpec("fast").rate_bytes_per_s, 0);
  EXPECT_EQ(LinkFiguresFromNetemSpec("none").rate_bytes_per_s, 0);
}

TEST(EmulatedLinkTest, LatencyTheKernelCouldNotAddIsLeftOut) {
  setenv("GRADSYNC_NETEM", "1gbit,1ms", 1);
  EXPECT_DOUBLE_EQ(LinkFiguresOfThisProcess().round_trip_s, 2e-3);
  setenv("GRADSYNC_NETEM_LATENCY_EMULATED", "0", 1);
  const LinkFigures link = LinkFiguresOfThisProcess();
  EXPECT_DOUBLE_EQ(link.round_trip_s, 0);
  EXPECT_DOUBLE_EQ(link.rate_bytes_per_s, 125e6);
  EXPECT_THAT(link.description, HasSubstr("latency not emulated"));
  unsetenv("GRADSYNC_NETEM_LATENCY_EMULATED");
  unsetenv("GRADSYNC_NETEM");
  EXPECT_EQ(LinkFiguresOfThisProcess().rate_bytes_per_s, 0);
}

}  // namespace
}  // namespace gradsync
