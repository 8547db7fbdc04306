// The step engine's clear to send (peer_exchange.h): a send to a peer that
// also sends to this rank in the round stops at the eager prefix until that
// peer has entered the round; a send to a peer that only receives never
// waits. Two ranks over loopback TCP; the receiving side counts what has
// reached its socket (FIONREAD) before it enters the round.
#include "allreduce/peer_exchange.h"

#include <poll.h>
#include <sys/ioctl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "allreduce/ring_test_cluster.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

constexpr int64_t kChunk = 64 << 10;
constexpr int64_t kEager = 16 << 10;
constexpr int64_t kCount = (128 << 10) / 4;  // 128 KiB, 8 eager prefixes

// Bytes waiting in `fd`'s receive queue.
int64_t Queued(int fd) {
  int bytes = 0;
  if (ioctl(fd, FIONREAD, &bytes) != 0) return -1;
  return bytes;
}

// Waits until `fd` holds at least `bytes` (or `deadline` passes) and returns
// what it holds.
int64_t WaitForQueued(int fd, int64_t bytes, absl::Time deadline) {
  int64_t queued = Queued(fd);
  while (queued >= 0 && queued < bytes && absl::Now() < deadline) {
    pollfd entry{fd, POLLIN, 0};
    poll(&entry, 1, 10);  // new bytes wake it; the loop re-reads the count
    queued = Queued(fd);
  }
  return queued;
}

struct Pair {
  std::unique_ptr<RingTestCluster> cluster;
  std::vector<std::unique_ptr<RingTransport>> transports;
};

Pair ConnectPair() {
  Pair pair;
  auto cluster = RingTestCluster::Start(2, "peer-exchange-test");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  pair.cluster = *std::move(cluster);
  auto transports = pair.cluster->ConnectRing(
      RingTransportOptions(), [](int rank) { return std::vector<int>{1 - rank}; });
  EXPECT_TRUE(transports.ok()) << transports.status();
  pair.transports = *std::move(transports);
  return pair;
}

std::vector<float> Input(int rank) {
  std::vector<float> data(kCount);
  for (int64_t i = 0; i < kCount; ++i) data[i] = (i % 97) + 1000.0f * rank;
  return data;
}

// Rank 0 enters an exchange round first; rank 1 holds back. Only the
// header and the eager prefix may reach rank 1 before it enters.
TEST(PeerExchange, TwoWaySendStopsAtTheEagerPrefixUntilThePeerEnters) {
  Pair pair = ConnectPair();
  ASSERT_EQ(pair.transports.size(), 2u);
  const int64_t prefix = PeerExchange::kHeaderBytes + kEager;
  int64_t before_entering = -1;
  int64_t after_window = -1;
  std::vector<std::vector<float>> received(2, std::vector<float>(kCount));
  std::vector<absl::Status> statuses =
      pair.cluster->RunOnEveryRank([&](int rank) {
        RingTransport* transport = pair.transports[rank].get();
        PeerExchange exchange(transport, kChunk, "test");
        exchange.set_eager_bytes(kEager);
        const std::vector<float> out = Input(rank);
        if (rank == 1) {
          const int fd = transport->peer(0)->fd();
          before_entering =
              WaitForQueued(fd, prefix, absl::Now() + absl::Seconds(20));
          // A sender that ignored the gate would pass the prefix within
          // microseconds; give it far longer before entering.
          WaitForQueued(fd, prefix + 1, absl::Now() + absl::Milliseconds(300));
          after_window = Queued(fd);
        }
        exchange.Send(1 - rank, out.data(), kCount);
        exchange.Receive(1 - rank, received[rank].data(), kCount,
                         /*add=*/false);
        return exchange.Run(RoundLabel{0, 0, 0, "a two-way step"});
      });
  ASSERT_TRUE(statuses[0].ok()) << statuses[0];
  ASSERT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(before_entering, prefix);
  EXPECT_EQ(after_window, prefix)
      << "rank 0 sent past its eager prefix before rank 1 entered the round";
  EXPECT_EQ(received[1], Input(0));
  EXPECT_EQ(received[0], Input(1));
}

// A one-way send (halving-doubling's fold of an extra rank) has no clear to
// wait for: all of it reaches the peer before the peer enters.
TEST(PeerExchange, OneWaySendDoesNotWait) {
  Pair pair = ConnectPair();
  ASSERT_EQ(pair.transports.size(), 2u);
  const int64_t whole = PeerExchange::kHeaderBytes + kCount * 4;
  int64_t before_entering = -1;
  std::vector<float> received(kCount);
  std::vector<absl::Status> statuses =
      pair.cluster->RunOnEveryRank([&](int rank) {
        RingTransport* transport = pair.transports[rank].get();
        PeerExchange exchange(transport, kChunk, "test");
        exchange.set_eager_bytes(kEager);
        const std::vector<float> out = Input(rank);
        if (rank == 0) {
          exchange.Send(1, out.data(), kCount);
        } else {
          before_entering = WaitForQueued(transport->peer(0)->fd(), whole,
                                          absl::Now() + absl::Seconds(20));
          exchange.Receive(0, received.data(), kCount, /*add=*/false);
        }
        return exchange.Run(RoundLabel{0, 0, 0, "a fold"});
      });
  ASSERT_TRUE(statuses[0].ok()) << statuses[0];
  ASSERT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(before_entering, whole);
  EXPECT_EQ(received, Input(0));
}

// With the gate off, a two-way send does not wait either.
TEST(PeerExchange, ZeroEagerBytesTurnsTheGateOff) {
  Pair pair = ConnectPair();
  ASSERT_EQ(pair.transports.size(), 2u);
  const int64_t whole = PeerExchange::kHeaderBytes + kCount * 4;
  int64_t before_entering = -1;
  std::vector<std::vector<float>> received(2, std::vector<float>(kCount));
  std::vector<absl::Status> statuses =
      pair.cluster->RunOnEveryRank([&](int rank) {
        RingTransport* transport = pair.transports[rank].get();
        PeerExchange exchange(transport, kChunk, "test");
        exchange.set_eager_bytes(0);
        const std::vector<float> out = Input(rank);
        if (rank == 1) {
          before_entering = WaitForQueued(transport->peer(0)->fd(), whole,
                                          absl::Now() + absl::Seconds(20));
        }
        exchange.Send(1 - rank, out.data(), kCount);
        exchange.Receive(1 - rank, received[rank].data(), kCount,
                         /*add=*/false);
        return exchange.Run(RoundLabel{0, 0, 0, "a two-way step"});
      });
  ASSERT_TRUE(statuses[0].ok()) << statuses[0];
  ASSERT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(before_entering, whole);
  EXPECT_EQ(received[1], Input(0));
}

}  // namespace
}  // namespace gradsync
