// The emulated network: spec parsing everywhere; as root, that set-up builds
// shaped links in both directions that carry traffic, that teardown leaves no
// namespace behind, and that another network's names are never touched.
// Without root the root-only tests skip (tests/netem_job_test.cc covers
// whole jobs under --netem).
#include "core/launch/netem.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/launch/link_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(ParseLinkSpecTest, ReadsRateAndLatency) {
  auto spec = ParseLinkSpec("1gbit,200us");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rate_bits_per_s, 1'000'000'000);
  EXPECT_EQ(spec->latency, absl::Microseconds(200));
  spec = ParseLinkSpec("2.5gbit");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->rate_bits_per_s, 2'500'000'000);
  EXPECT_EQ(spec->latency, absl::ZeroDuration());
  spec = ParseLinkSpec("100mbit,1ms");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->rate_bits_per_s, 100'000'000);
  EXPECT_EQ(spec->latency, absl::Milliseconds(1));
  spec = ParseLinkSpec("none,0");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->rate_bits_per_s, 0);
}

TEST(ParseLinkSpecTest, ReadsTheSwitchModel) {
  auto spec = ParseLinkSpec("100mbit");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(SwitchBufferBytes(*spec), 1 << 20);
  EXPECT_EQ(spec->rto_min, absl::ZeroDuration());
  EXPECT_EQ(spec->congestion_control, "cubic");
  EXPECT_FALSE(spec->ecn);
  spec = ParseLinkSpec("100mbit,200us,buffer=512kb,rto_min=5ms,cc=reno,ecn");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->latency, absl::Microseconds(200));
  EXPECT_EQ(SwitchBufferBytes(*spec), 512 << 10);
  EXPECT_EQ(spec->rto_min, absl::Milliseconds(5));
  EXPECT_EQ(spec->congestion_control, "reno");
  EXPECT_TRUE(spec->ecn);
  spec = ParseLinkSpec("1gbit,buffer=4000000");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->latency, absl::ZeroDuration());
  EXPECT_EQ(SwitchBufferBytes(*spec), 4'000'000);
}

TEST(ParseLinkSpecTest, RejectsNonsense) {
  for (const char* bad :
       {"", "fast", "1gb", "-1gbit", "1gbit,soon", "1gbit,200us,3",
        "1gbit,-5ms", "1000gbit", "1gbit,buffer=1kb", "1gbit,buffer=big",
        "1gbit,rto_min=0", "1gbit,rto_min=5", "1gbit,cc=", "1gbit,cc=a;b",
        "1gbit,depth=3", "1gbit,ecn=1"}) {
    EXPECT_FALSE(ParseLinkSpec(bad).ok()) << bad;
  }
}

class EmulatedNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CheckEmulationPrerequisites().ok()) {
      GTEST_SKIP() << "needs root and iproute2: "
                   << CheckEmulationPrerequisites().message();
    }
    prefix_ = absl::StrCat("gst", getpid() % 100000);
  }
  void TearDown() override {
    if (prefix_.empty()) return;
    // The test's own networks, and those of RemovesTheNetworkOfAGoneMakerOnly.
    for (const char* suffix : {"", "g", "l", "k"}) {
      (void)RemoveNamespaces(prefix_ + suffix);
    }
  }

  std::vector<std::string> Left() {
    auto names = ListNamespaces(prefix_ + "-");
    EXPECT_TRUE(names.ok()) << names.status();
    return names.ok() ? *names : std::vector<std::string>{};
  }

  std::string prefix_;
};

TEST_F(EmulatedNetworkTest,
       ShapesBothEndsCarriesTrafficAndLeavesNothingBehind) {
  EmulatedNetworkOptions options;
  options.nodes = 3;
  options.prefix = prefix_;
  auto link = ParseLinkSpec("1gbit");
  ASSERT_TRUE(link.ok());
  options.link = *link;
  auto network = EmulatedNetwork::Create(options);
  ASSERT_TRUE(network.ok()) << network.status();
  EXPECT_EQ(Left().size(), 4u);  // three nodes and the bridge
  EXPECT_EQ((*network)->NodeAddress(2), "10.213.1.3");
  for (int node = 0; node < 3; ++node) {
    // The node's uplink (its eth0) and its downlink (the bridge's port).
    auto up = RunCommand({"/usr/sbin/tc", "-n", (*network)->NodeNamespace(node),
                          "qdisc", "show", "dev", "eth0"});
    ASSERT_TRUE(up.ok()) << up.status();
    EXPECT_THAT(*up, HasSubstr("tbf"));
    EXPECT_THAT(*up, HasSubstr("rate 1Gbit"));
    auto down = RunCommand({"/usr/sbin/tc", "-n", (*network)->BridgeNamespace(),
                            "qdisc", "show", "dev", absl::StrCat("p", node)});
    ASSERT_TRUE(down.ok()) << down.status();
    EXPECT_THAT(*down, HasSubstr("rate 1Gbit"));
  }
  // Node 0 reaches node 2 across the bridge, both ways (small transfers: this
  // checks connectivity, not speed).
  LinkProbeOptions probe;
  probe.client_namespace = (*network)->NodeNamespace(0);
  probe.server_namespace = (*network)->NodeNamespace(2);
  probe.server_address = (*network)->NodeAddress(2);
  probe.small_round_trips = 5;
  probe.repeats = 1;
  probe.sizes = {64 << 10, 256 << 10};
  auto result = ProbeLink(probe);
  // Reaching the peer is what counts here: a busy machine may make the two
  // sizes take the same time, which the probe refuses as no bandwidth
  // (link_probe_test checks that refusal) after the transfers went through.
  if (!result.ok()) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition)
        << result.status();
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr("did not grow with the size"));
  } else {
    EXPECT_GT(result->bandwidth_bytes_per_s, 0);
    EXPECT_EQ(result->samples.size(), 2u);
  }

  ASSERT_TRUE((*network)->Destroy().ok());
  EXPECT_THAT(Left(), ::testing::IsEmpty());
  EXPECT_TRUE((*network)->Destroy().ok());  // idempotent
}

// The switch model as configured: the port's buffer, a host queue deeper
// than it, the nodes' congestion control and minimum RTO, and queue
// counters that read zero on an idle network.
TEST_F(EmulatedNetworkTest, AppliesTheSwitchModel) {
  EmulatedNetworkOptions options;
  options.nodes = 2;
  options.prefix = prefix_;
  auto link = ParseLinkSpec("100mbit,buffer=512kb,rto_min=5ms");
  ASSERT_TRUE(link.ok()) << link.status();
  options.link = *link;
  auto network = EmulatedNetwork::Create(options);
  ASSERT_TRUE(network.ok()) << network.status();
  auto port = RunCommand({"/usr/sbin/tc", "-n", (*network)->BridgeNamespace(),
                          "qdisc", "show", "dev", "p1"});
  ASSERT_TRUE(port.ok()) << port.status();
  // tc shows the limit as the time it takes to drain past the burst:
  // (512 KiB - 128 KiB) / 100 Mbit/s.
  EXPECT_THAT(*port, HasSubstr("lat 31.5ms"));
  auto host = RunCommand({"/usr/sbin/tc", "-n", (*network)->NodeNamespace(1),
                          "qdisc", "show", "dev", "eth0"});
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_THAT(*host, HasSubstr("lat 1.33s"));  // (16 MiB - 128 KiB) / ...
  auto route = RunCommand({"/usr/sbin/ip", "-n", (*network)->NodeNamespace(1),
                           "route", "show", "10.213.0.0/16"});
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_THAT(*route, HasSubstr("rto_min"));
  auto cc =
      RunCommand({"/usr/sbin/ip", "netns", "exec", (*network)->NodeNamespace(0),
                  "/usr/sbin/sysctl", "-n", "net.ipv4.tcp_congestion_control"});
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_THAT(*cc, HasSubstr((*network)->congestion_control()));
  EXPECT_TRUE((*network)->congestion_control() == "cubic" ||
              (*network)->congestion_control() == "reno")
      << (*network)->congestion_control();
  auto counters = (*network)->QueueCountersJson();
  ASSERT_TRUE(counters.ok()) << counters.status();
  EXPECT_EQ(*counters,
            R"({"port_drops":[0,0],"port_marks":[0,0],"uplink_drops":[0,0]})");
  EXPECT_THAT((*network)->Describe(), HasSubstr("switch ports of 512 KiB"));
}

TEST_F(EmulatedNetworkTest, DestructorRemovesEverything) {
  EmulatedNetworkOptions options;
  options.nodes = 2;
  options.prefix = prefix_;
  {
    auto network = EmulatedNetwork::Create(options);
    ASSERT_TRUE(network.ok()) << network.status();
    EXPECT_EQ(Left().size(), 3u);
  }
  EXPECT_THAT(Left(), ::testing::IsEmpty());
}

TEST_F(EmulatedNetworkTest, RefusesNamesThatAreTakenAndTouchesNothing) {
  EmulatedNetworkOptions options;
  options.nodes = 2;
  options.prefix = prefix_;
  ASSERT_TRUE(
      RunCommand({"/usr/sbin/ip", "netns", "add", prefix_ + "-n1"}).ok());
  auto network = EmulatedNetwork::Create(options);
  EXPECT_FALSE(network.ok());
  EXPECT_THAT(std::string(network.status().message()),
              HasSubstr(prefix_ + "-n1"));
  EXPECT_THAT(Left(), ::testing::ElementsAre(prefix_ + "-n1"));
}

// A job killed before its teardown leaves its network; the next Create
// removes it when its maker is provably gone, and touches neither a live
// job's network nor one `netem up` keeps.
TEST_F(EmulatedNetworkTest, RemovesTheNetworkOfAGoneMakerOnly) {
  const std::string gone = prefix_ + "g", live = prefix_ + "l",
                    kept = prefix_ + "k";
  auto count = [](const std::string& prefix) {
    auto names = ListNamespaces(prefix + "-");
    return names.ok() ? names->size() : size_t{0};
  };
  auto create = [](const std::string& prefix) {
    EmulatedNetworkOptions options;
    options.nodes = 2;
    options.prefix = prefix;
    return EmulatedNetwork::Create(options);
  };
  auto gone_network = create(gone);
  ASSERT_TRUE(gone_network.ok()) << gone_network.status();
  (*gone_network)->Release();
  // Its maker's record names this process's PID with another start time:
  // the PID was reused, the maker is gone.
  char pidns[128];
  const ssize_t n = readlink("/proc/self/ns/pid", pidns, sizeof(pidns) - 1);
  ASSERT_GT(n, 0);
  ASSERT_TRUE(RunCommand({"/usr/sbin/ip", "-n", gone + "-br", "link", "set",
                          "br0", "alias",
                          absl::StrCat("gradsync-owner pid=", getpid(),
                                       " start=1 pidns=", std::string(pidns, n))})
                  .ok());
  auto live_network = create(live);
  ASSERT_TRUE(live_network.ok()) << live_network.status();
  auto kept_network = create(kept);
  ASSERT_TRUE(kept_network.ok()) << kept_network.status();
  (*kept_network)->Release();

  auto leftovers = RemoveLeftoverNetworks();
  ASSERT_TRUE(leftovers.ok()) << leftovers.status();
  EXPECT_EQ(count(gone), 0u);
  EXPECT_EQ(count(live), 3u);
  EXPECT_EQ(count(kept), 3u);
  for (const LeftoverNetwork& leftover : *leftovers) {
    EXPECT_NE(leftover.prefix, live);
    EXPECT_NE(leftover.prefix, kept);
  }
  (void)RemoveNamespaces(kept);
  (void)RemoveNamespaces(gone);
}

}  // namespace
}  // namespace gradsync
