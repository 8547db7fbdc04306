// The link the launcher emulates, as the edge reads it for the parameter
// server's window rule: the --netem text, and the latency left out where the
// kernel could not add it; without --netem, the job's link (GRADSYNC_LINK)
// a job script gives, and the windows the PS derives from it.
#include "tools/emulated_link.h"

#include <cstdlib>

#include "core/launch/netem.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/settings.h"

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

// Without --netem the job's link (GRADSYNC_LINK, as a job script gives it) sizes
// the PS's windows, on the servers' side and the workers' alike, where it
// fell back to the unknown link's 4 MiB before.
TEST(EmulatedLinkTest, TheJobsLinkSizesThePsWindowsWithoutNetem) {
  unsetenv("GRADSYNC_NETEM");
  unsetenv(kJobLinkEnv);
  const PsStreamSettings unknown = ResolveStreamSettings(
      0, 0, LinkFiguresOfThisProcess(), /*num_workers=*/8, /*num_servers=*/8);
  EXPECT_EQ(unknown.push_window.bytes, kUnknownLinkStreamWindowBytes);

  setenv(kJobLinkEnv, "10gbit,500us", 1);
  const LinkFigures link = LinkFiguresOfThisProcess();
  EXPECT_DOUBLE_EQ(link.rate_bytes_per_s, 1.25e9);
  EXPECT_DOUBLE_EQ(link.round_trip_s, 1e-3);
  EXPECT_THAT(link.description, HasSubstr(kJobLinkEnv));
  const PsStreamSettings streams =
      ResolveStreamSettings(0, 0, link, /*num_workers=*/8, /*num_servers=*/8);
  // 2 x (1.25 GB/s / 8 streams) x 1 ms = 305 KiB, rounded up to 512 KiB; a
  // stream's share exceeds a connection's fixed window: BDP probing on.
  EXPECT_EQ(streams.push_window.bytes, 512 << 10);
  EXPECT_TRUE(streams.push_window.bdp_probe);
  EXPECT_EQ(streams.pull_window.bytes, 512 << 10);
  EXPECT_THAT(streams.push_window.source, HasSubstr(kJobLinkEnv));
  EXPECT_EQ(streams.pull_message.bytes, 512 << 10);

  setenv(kJobLinkEnv, "fast", 1);
  EXPECT_EQ(LinkFiguresOfThisProcess().rate_bytes_per_s, 0);
  EXPECT_THAT(LinkFiguresOfThisProcess().description,
              HasSubstr("not understood"));
  unsetenv(kJobLinkEnv);
}

// --netem's link wins over the job's: behaviour under --netem is as before.
TEST(EmulatedLinkTest, TheEmulatedLinkWinsOverTheJobsLink) {
  setenv("GRADSYNC_NETEM", "100mbit", 1);
  setenv(kJobLinkEnv, "10gbit,500us", 1);
  const LinkFigures link = LinkFiguresOfThisProcess();
  EXPECT_DOUBLE_EQ(link.rate_bytes_per_s, 12.5e6);
  EXPECT_DOUBLE_EQ(link.round_trip_s, 0);
  EXPECT_THAT(link.description, HasSubstr("--netem"));
  unsetenv(kJobLinkEnv);
  unsetenv("GRADSYNC_NETEM");
}

}  // namespace
}  // namespace gradsync
