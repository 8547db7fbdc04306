// Setting up the ring: strangers are refused with a reason and the real
// neighbour still gets in; a neighbour that never shows up is a deadline error
// naming it.
#include "allreduce/transport/peer_transport.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "allreduce/transport/handshake.h"
#include "allreduce/transport/tcp_connection.h"
#include "allreduce/transport/tcp_listener.h"
#include "allreduce/transport/test_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Rank 1 of a two-rank ring starts first; a stranger connects to it and sends
// `hello` (or raw bytes) before rank 0 even exists, so the stranger is first in
// rank 1's accept queue. Returns the answer the stranger got, after checking
// that the real ring still formed.
absl::Status StrangerBeforeRealNeighbour(
    const std::function<absl::Status(TcpConnection&)>& introduce) {
  auto cluster = TransportTestCluster::Start(2);
  if (!cluster.ok()) return cluster.status();
  std::unique_ptr<PeerTransport> transports[2];
  absl::Status created[2];
  std::thread rank1([&] {
    auto transport = PeerTransport::Create((*cluster)->TransportOptions(1),
                                           (*cluster)->client(1));
    created[1] = transport.status();
    if (transport.ok()) transports[1] = std::move(transport).value();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::Status answer;
  auto address = (*cluster)->client(0)->Get("ring/addr/1", absl::Seconds(30));
  if (address.ok()) {
    auto stranger =
        TcpConnection::Connect(*address, PeerSide::kUnknown, -1, deadline);
    if (stranger.ok()) {
      answer = introduce(**stranger);
      // Only now does the real left neighbour arrive.
      std::thread rank0([&] {
        auto transport = PeerTransport::Create((*cluster)->TransportOptions(0),
                                               (*cluster)->client(0));
        created[0] = transport.status();
        if (transport.ok()) transports[0] = std::move(transport).value();
      });
      if (answer.ok()) answer = ReceivePeerAnswer(**stranger, deadline);
      rank0.join();
    } else {
      answer = stranger.status();
    }
  } else {
    answer = address.status();
  }
  rank1.join();
  EXPECT_TRUE(created[0].ok()) << created[0];
  EXPECT_TRUE(created[1].ok()) << created[1];
  return answer;
}

TEST(PeerTransportTest, HelloFromAnotherJobIsRefused) {
  absl::Status answer =
      StrangerBeforeRealNeighbour([](TcpConnection& stranger) {
        return SendPeerHello(stranger, PeerHello{0, 1, 2, "other-job"},
                             absl::Now() + absl::Seconds(30));
      });
  EXPECT_EQ(answer.code(), absl::StatusCode::kFailedPrecondition) << answer;
  EXPECT_THAT(std::string(answer.message()),
              HasSubstr("refused our hello: job id \"other-job\" is not this "
                        "job's (\"ring-test\")"));
}

TEST(PeerTransportTest, HelloFromTheWrongRankIsRefused) {
  absl::Status answer =
      StrangerBeforeRealNeighbour([](TcpConnection& stranger) {
        return SendPeerHello(stranger, PeerHello{1, 1, 2, "ring-test"},
                             absl::Now() + absl::Seconds(30));
      });
  EXPECT_THAT(
      std::string(answer.message()),
      HasSubstr("rank 1 is not the left neighbour of rank 1 (rank 0 is)"));
}

TEST(PeerTransportTest, HelloForAnotherRingSizeIsRefused) {
  absl::Status answer =
      StrangerBeforeRealNeighbour([](TcpConnection& stranger) {
        return SendPeerHello(stranger, PeerHello{0, 1, 3, "ring-test"},
                             absl::Now() + absl::Seconds(30));
      });
  EXPECT_THAT(std::string(answer.message()),
              HasSubstr("it is in a ring of 3 ranks, this one has 2"));
}

TEST(PeerTransportTest, BytesThatAreNoHelloAreRefused) {
  absl::Status answer =
      StrangerBeforeRealNeighbour([](TcpConnection& stranger) {
        const std::string request = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
        return stranger.SendAll(request.data(), request.size(),
                                absl::Now() + absl::Seconds(30));
      });
  EXPECT_THAT(std::string(answer.message()),
              HasSubstr("it is not a gradsync ring peer"));
}

TEST(PeerTransportTest, LeftNeighbourThatNeverConnectsIsNamed) {
  auto cluster = TransportTestCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Rank 0 "publishes" a port that takes rank 1's connection but never
  // connects to rank 1 in turn.
  auto decoy = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(decoy.ok()) << decoy.status();
  ASSERT_TRUE(
      (*cluster)->client(0)->Set("ring/addr/0", (*decoy)->address()).ok());
  PeerTransportOptions options = (*cluster)->TransportOptions(1);
  options.timeout = absl::Seconds(1);
  auto transport = PeerTransport::Create(options, (*cluster)->client(1));
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kDeadlineExceeded)
      << transport.status();
  EXPECT_THAT(std::string(transport.status().message()),
              HasSubstr("ring rank 1: left neighbour rank 0 did not connect to "
                        "127.0.0.1:"));
}

TEST(PeerTransportTest, MissingRightNeighbourAddressIsNamed) {
  auto cluster = TransportTestCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  PeerTransportOptions options = (*cluster)->TransportOptions(1);
  options.timeout = absl::Seconds(1);
  auto transport = PeerTransport::Create(options, (*cluster)->client(1));
  ASSERT_FALSE(transport.ok());
  EXPECT_THAT(std::string(transport.status().message()),
              HasSubstr("ring rank 1: waiting for the address of right "
                        "neighbour rank 2 (ring/addr/2)"));
}

TEST(PeerTransportTest, SingleRankNeedsNoCoordinator) {
  PeerTransportOptions options;
  options.world_size = 1;
  auto transport = PeerTransport::Create(options, nullptr);
  EXPECT_TRUE(transport.ok()) << transport.status();
}

TEST(PeerTransportTest, RingOfManyNeedsACoordinator) {
  PeerTransportOptions options;
  options.world_size = 2;
  auto transport = PeerTransport::Create(options, nullptr);
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradsync
