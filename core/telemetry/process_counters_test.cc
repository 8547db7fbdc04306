// Parsing of the kernel's TCP counters, and this process's own figures.
#include "core/telemetry/process_counters.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr char kSnmp[] =
    "Ip: Forwarding DefaultTTL\n"
    "Ip: 1 64\n"
    "Tcp: RtoAlgorithm ActiveOpens OutSegs RetransSegs InErrs\n"
    "Tcp: 1 12 40000 865 0\n";
constexpr char kNetstat[] =
    "TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes TCPFastRetrans\n"
    "TcpExt: 0 3 7 732\n"
    "IpExt: InNoRoutes\n"
    "IpExt: 0\n";

TEST(ParseTcpCountersTest, ReadsTheCountersByName) {
  auto counters = ParseTcpCounters(kSnmp, kNetstat);
  ASSERT_TRUE(counters.ok()) << counters.status();
  EXPECT_EQ(counters->out_segments, 40000);
  EXPECT_EQ(counters->retrans_segments, 865);
  EXPECT_EQ(counters->timeouts, 3);
  EXPECT_EQ(counters->loss_probes, 7);
  EXPECT_EQ(counters->fast_retrans, 732);
  EXPECT_EQ(counters->spurious_rtos, 0);  // this kernel's file lacks it
}

TEST(ParseTcpCountersTest, RefusesMismatchedLines) {
  auto counters = ParseTcpCounters("Tcp: OutSegs RetransSegs\nTcp: 1\n", "");
  EXPECT_FALSE(counters.ok());
  EXPECT_THAT(counters.status().message(), HasSubstr("not a header"));
  counters = ParseTcpCounters("Tcp: OutSegs\nTcp: many\n", "");
  EXPECT_FALSE(counters.ok());
  EXPECT_THAT(counters.status().message(), HasSubstr("not a number"));
  counters = ParseTcpCounters("Tcp: OutSegs\n", "");
  EXPECT_FALSE(counters.ok());
  EXPECT_THAT(counters.status().message(), HasSubstr("no values line"));
}

TEST(ParseInterfaceBytesTest, ReadsReceiveAndTransmitBytes) {
  constexpr char kNetDev[] =
      "Inter-|   Receive                                                |  "
      "Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes"
      "    packets errs drop fifo colls carrier compressed\n"
      "    lo:    1200      10    0    0    0     0          0         0     "
      "1200      10    0    0    0     0       0          0\n"
      "  eth0: 987654321 650000    0    0    0     0          0         0 "
      "123456789 81000    0    0    0     0       0          0\n";
  auto eth0 = ParseInterfaceBytes(kNetDev, "eth0");
  ASSERT_TRUE(eth0.ok()) << eth0.status();
  EXPECT_EQ(eth0->rx_bytes, 987654321);
  EXPECT_EQ(eth0->tx_bytes, 123456789);
  auto missing = ParseInterfaceBytes(kNetDev, "eth1");
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("no interface eth1"));
  auto cut = ParseInterfaceBytes("  eth0: 12 3 0\n", "eth0");
  EXPECT_FALSE(cut.ok());
  EXPECT_THAT(cut.status().message(), HasSubstr("eth0"));
}

TEST(ProcessCountersTest, ReadsThisNamespacesLoopback) {
  // Every network namespace has lo.
  auto lo = ReadNamespaceInterfaceBytes("lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_GE(lo->rx_bytes, 0);
  EXPECT_GE(lo->tx_bytes, 0);
}

TEST(ProcessCountersTest, ReportsThisProcess) {
  // Burn a little CPU so the figure is above zero.
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + i * 0.5;
  EXPECT_GT(ProcessCpuSeconds(), 0);
  const auto j = nlohmann::json::parse(ProcessCountersJson());
  EXPECT_GT(j["cpu_s"].get<double>(), 0);
  EXPECT_EQ(j["tcp_scope"], "namespace");
  // Every Linux has /proc/self/net/snmp; the counters are never negative.
  ASSERT_TRUE(j.contains("tcp")) << j.dump();
  EXPECT_GE(j["tcp"]["retrans_segments"].get<int64_t>(), 0);
  EXPECT_GE(j["tcp"]["out_segments"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace gradsync
