// The link probe between two processes' worth of endpoints on loopback, as
// two hosts of a cluster run it (ServeLinkProbe on one, ProbeRemoteLink on
// the other): a measurement that GRADSYNC_LINK's grammar reads back, and one
// clear error for a peer that is not a probe, a peer that never comes and a
// host where nothing listens. No root, no namespaces.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "core/launch/link_probe.h"
#include "core/launch/netem.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

LinkProbeOptions SmallProbe() {
  LinkProbeOptions options;
  options.small_round_trips = 5;
  options.repeats = 1;
  options.sizes = {64 << 10, 256 << 10};
  return options;
}

// Serves one probe on loopback on a thread; port() waits until it listens.
class Server {
 public:
  explicit Server(int wait_for_peer_s = 60) {
    LinkProbeServeOptions options;
    options.bind_address = "127.0.0.1";
    options.max_bytes = 16 << 20;  // the largest size the tests ask for
    options.wait_for_peer_s = wait_for_peer_s;
    thread_ = std::thread([this, options]() mutable {
      bool told = false;  // this thread's own: the port, or -1 on failure
      options.on_listening = [this, &told](int port) {
        told = true;
        port_.set_value(port);
      };
      status_ = ServeLinkProbe(options);
      if (!told) port_.set_value(-1);
    });
    port_number_ = port_.get_future().get();
  }
  int port() const { return port_number_; }
  absl::Status Finish() {
    thread_.join();
    return status_;
  }

 private:
  std::promise<int> port_;
  int port_number_ = -1;
  absl::Status status_;
  std::thread thread_;
};

// A busy machine may make the larger transfers no slower than the smaller
// ones on loopback; the probe then refuses (FitLinkSamples) and what it must
// never do is give that as a link.
bool RefusedForNoise(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StrContains(status.message(), "did not grow with the size");
}

TEST(RemoteLinkProbeTest, MeasuresAndGivesTheJobsLink) {
  Server server;
  ASSERT_GT(server.port(), 0);
  LinkProbeOptions options = SmallProbe();
  options.repeats = 3;
  options.sizes = {1 << 20, 16 << 20};
  absl::StatusOr<LinkProbeResult> result =
      ProbeRemoteLink("127.0.0.1", server.port(), options);
  EXPECT_TRUE(server.Finish().ok());
  if (!result.ok()) {
    ASSERT_TRUE(RefusedForNoise(result.status())) << result.status();
    return;
  }
  EXPECT_GT(result->alpha_us, 0);
  EXPECT_GT(result->bandwidth_bytes_per_s, 0);
  EXPECT_GT(result->reverse_bandwidth_bytes_per_s, 0);
  EXPECT_GT(result->duplex_bytes_per_s, 0);
  ASSERT_EQ(result->samples.size(), 2u);
  // GRADSYNC_LINK reads it back (tools/emulated_link.h parses --netem's
  // grammar).
  const std::string spec = JobLinkSpecFromProbe(*result);
  absl::StatusOr<LinkSpec> parsed = ParseLinkSpec(spec);
  ASSERT_TRUE(parsed.ok()) << spec << ": " << parsed.status();
  EXPECT_GT(parsed->rate_bits_per_s, 0) << spec;
  EXPECT_GT(parsed->latency, absl::ZeroDuration()) << spec;
}

TEST(RemoteLinkProbeTest, FitGivesTheSlopeAndRefusesTimesThatDoNotGrow) {
  LinkProbeResult result;
  // Forward 1 MiB in 1 ms and 3 MiB in 2 ms: a slope of 2 MiB per ms and an
  // intercept of 0.5 ms; reverse 2 ms and 4 ms: 1 MiB per ms.
  result.samples = {{1 << 20, 1.0, 2.0}, {3 << 20, 2.0, 4.0}};
  ASSERT_TRUE(FitLinkSamples(&result).ok());
  EXPECT_NEAR(result.bandwidth_bytes_per_s, 2.0 * (1 << 20) * 1000, 1);
  EXPECT_NEAR(result.reverse_bandwidth_bytes_per_s, 1.0 * (1 << 20) * 1000,
              1);
  EXPECT_NEAR(result.intercept_ms, 0.5, 1e-9);

  // The larger transfer no slower than the smaller, in either direction.
  for (const auto& [forward, reverse] :
       std::vector<std::pair<double, double>>{{1.0, 4.0}, {2.0, 2.0}}) {
    LinkProbeResult noisy;
    noisy.samples = {{64 << 10, 1.0, 2.0}, {256 << 10, forward, reverse}};
    const absl::Status status = FitLinkSamples(&noisy);
    EXPECT_TRUE(RefusedForNoise(status)) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("262144 B: "));
    EXPECT_EQ(noisy.bandwidth_bytes_per_s, 0);  // nothing half-written
  }
  LinkProbeResult one_size;
  one_size.samples = {{1 << 20, 1.0, 1.0}, {1 << 20, 2.0, 2.0}};
  EXPECT_EQ(FitLinkSamples(&one_size).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RemoteLinkProbeTest, JobLinkIsTheSlowestDirectionAndAlpha) {
  LinkProbeResult result;
  result.bandwidth_bytes_per_s = 12.0e6;          // 96 Mbit/s
  result.reverse_bandwidth_bytes_per_s = 11.9e6;  // 95.2
  result.duplex_bytes_per_s = 11.5e6;             // 92: both at once
  result.alpha_us = 17.4;
  EXPECT_EQ(JobLinkSpecFromProbe(result), "92mbit,17us");
  result.duplex_bytes_per_s = 0;  // not measured: the others decide
  EXPECT_EQ(JobLinkSpecFromProbe(result), "95mbit,17us");
}

TEST(RemoteLinkProbeTest, APeerThatIsNotAProbeIsRefused) {
  Server server;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char request[] = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_EQ(write(fd, request, sizeof(request) - 1),
            static_cast<ssize_t>(sizeof(request) - 1));
  const absl::Status status = server.Finish();
  close(fd);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("not a gradsync link probe"));
}

TEST(RemoteLinkProbeTest, APeerThatNeverComesEndsTheWaitNamingThePort) {
  Server server(/*wait_for_peer_s=*/1);
  const absl::Status status = server.Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("port " + std::to_string(server.port())));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--peer="));
}

TEST(RemoteLinkProbeTest, NothingListeningIsSaidWithWhatToRun) {
  // A port bound but not listening: connecting is refused at once.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  absl::StatusOr<LinkProbeResult> result =
      ProbeRemoteLink("127.0.0.1", ntohs(addr.sin_port), SmallProbe());
  close(fd);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("netem probe --listen"));
}

TEST(RemoteLinkProbeTest, BadArgumentsAreRefused) {
  EXPECT_EQ(ProbeRemoteLink("127.0.0.1", 0, SmallProbe()).status().code(),
            absl::StatusCode::kInvalidArgument);
  LinkProbeOptions one_size = SmallProbe();
  one_size.sizes = {1 << 20};
  EXPECT_EQ(ProbeRemoteLink("127.0.0.1", 1, one_size).status().code(),
            absl::StatusCode::kInvalidArgument);
  LinkProbeServeOptions serve;
  serve.bind_address = "not-an-address";
  EXPECT_EQ(ServeLinkProbe(serve).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradsync
