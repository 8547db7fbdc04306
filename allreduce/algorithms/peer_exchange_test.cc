// The step engine's clear to send (peer_exchange.h): a send to a peer that
// also sends to this rank in the round stops at the eager prefix until that
// peer has entered the round; a send to a peer that only receives never
// waits. Two ranks over loopback TCP; the receiving side counts what has
// reached its socket (FIONREAD) before it enters the round.
#include "allreduce/algorithms/peer_exchange.h"

#include <poll.h>
#include <sys/ioctl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "allreduce/transport/test_cluster.h"
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

std::vector<float> Input(int rank) {
  std::vector<float> data(kCount);
  for (int64_t i = 0; i < kCount; ++i) data[i] = (i % 97) + 1000.0f * rank;
  return data;
}

struct Round {
  std::vector<absl::Status> statuses;
  std::vector<std::vector<float>> received;  // per rank
};

// One round between two ranks with `eager_bytes`: rank 0 sends kCount floats
// to rank 1 and, when `two_way`, rank 1 sends kCount back. Rank 1 first runs
// `before_entering` on its connection from rank 0, then enters the round.
// With `after_exchange`, both ranks first swap one float in an earlier round
// of the same all-reduce (sequence 0).
Round RunRound(int64_t eager_bytes, bool two_way,
               const std::function<void(int fd)>& before_entering,
               bool after_exchange = false) {
  Round round;
  auto cluster = TransportTestCluster::Start(2, "peer-exchange-test");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return round;
  auto transports = (*cluster)->ConnectPeers(
      PeerTransportOptions(),
      [](int rank) { return std::vector<int>{1 - rank}; });
  EXPECT_TRUE(transports.ok()) << transports.status();
  if (!transports.ok()) return round;
  round.received.assign(2, std::vector<float>(kCount));
  round.statuses = (*cluster)->RunOnEveryRank([&](int rank) {
    PeerTransport* transport = (*transports)[rank].get();
    PeerExchange exchange(transport, kChunk, "test");
    exchange.set_eager_bytes(eager_bytes);
    const std::vector<float> out = Input(rank);
    RoundLabel label{0, 0, 0, "a step"};
    if (after_exchange) {
      float token = 1.0f;
      float other = 0.0f;
      exchange.Send(1 - rank, &token, 1);
      exchange.Receive(1 - rank, &other, 1, /*add=*/false);
      absl::Status status = exchange.Run(label);
      if (!status.ok()) return status;
      ++label.round;
    }
    if (rank == 1) before_entering(transport->peer(0)->fd());
    if (rank == 0 || two_way) exchange.Send(1 - rank, out.data(), kCount);
    if (rank == 1 || two_way) {
      exchange.Receive(1 - rank, round.received[rank].data(), kCount,
                       /*add=*/false);
    }
    return exchange.Run(label);
  });
  return round;
}

constexpr int64_t kWhole = PeerExchange::kHeaderBytes + kCount * 4;

// Rank 0 enters an exchange round first; rank 1 holds back. Only the
// header and the eager prefix may reach rank 1 before it enters.
TEST(PeerExchange, TwoWaySendStopsAtTheEagerPrefixUntilThePeerEnters) {
  const int64_t prefix = PeerExchange::kHeaderBytes + kEager;
  int64_t before_entering = -1;
  int64_t after_window = -1;
  const Round round = RunRound(kEager, /*two_way=*/true, [&](int fd) {
    before_entering =
        WaitForQueued(fd, prefix, absl::Now() + absl::Seconds(20));
    // A sender that ignored the gate would pass the prefix within
    // microseconds; give it far longer before entering.
    WaitForQueued(fd, prefix + 1, absl::Now() + absl::Milliseconds(300));
    after_window = Queued(fd);
  });
  ASSERT_EQ(round.statuses.size(), 2u);
  ASSERT_TRUE(round.statuses[0].ok()) << round.statuses[0];
  ASSERT_TRUE(round.statuses[1].ok()) << round.statuses[1];
  EXPECT_EQ(before_entering, prefix);
  EXPECT_EQ(after_window, prefix)
      << "rank 0 sent past its eager prefix before rank 1 entered the round";
  EXPECT_EQ(round.received[1], Input(0));
  EXPECT_EQ(round.received[0], Input(1));
}

// A one-way send (halving-doubling's fold of an extra rank) has no clear to
// wait for; nor has a round whose one peer was the previous round's only
// peer in the same all-reduce (nobody else sends into its link); and with
// the gate off, nothing waits: all of it reaches the peer before the peer
// enters.
TEST(PeerExchange, OneWaySendsTheSamePartnerAndAZeroPrefixDoNotWait) {
  struct Case {
    int64_t eager;
    bool two_way;
    bool after_exchange;
  };
  for (const Case& c : {Case{kEager, false, false}, Case{kEager, true, true},
                        Case{0, true, false}}) {
    int64_t before_entering = -1;
    const Round round = RunRound(
        c.eager, c.two_way,
        [&](int fd) {
          before_entering =
              WaitForQueued(fd, kWhole, absl::Now() + absl::Seconds(20));
        },
        c.after_exchange);
    ASSERT_EQ(round.statuses.size(), 2u);
    ASSERT_TRUE(round.statuses[0].ok()) << round.statuses[0];
    ASSERT_TRUE(round.statuses[1].ok()) << round.statuses[1];
    EXPECT_EQ(before_entering, kWhole)
        << "eager " << c.eager << ", two-way " << c.two_way;
    EXPECT_EQ(round.received[1], Input(0)) << "eager " << c.eager;
  }
}

// A gated send (Send's `gates`) moves its header but no payload until the
// receive it waits on has finished: rank 0 sends to rank 1 gated on a float
// from rank 1, which rank 1 sends only once it enters the round.
TEST(PeerExchange, GatedSendWaitsForItsGateToFinish) {
  auto cluster = TransportTestCluster::Start(2, "peer-exchange-gate-test");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers(
      PeerTransportOptions(),
      [](int rank) { return std::vector<int>{1 - rank}; });
  ASSERT_TRUE(transports.ok()) << transports.status();
  int64_t before_entering = -1;
  std::vector<float> received(kCount);
  float token = 0.0f;
  const std::vector<absl::Status> statuses =
      (*cluster)->RunOnEveryRank([&](int rank) {
        PeerTransport* transport = (*transports)[rank].get();
        PeerExchange exchange(transport, kChunk, "test");
        exchange.set_eager_bytes(0);  // only the gate holds the send back
        const std::vector<float> out = Input(rank);
        const float one = 1.0f;
        if (rank == 0) {
          const int gate = exchange.Receive(1, &token, 1, /*add=*/false);
          exchange.Send(1, out.data(), kCount, {}, {gate});
        } else {
          const int fd = transport->peer(0)->fd();
          WaitForQueued(fd, PeerExchange::kHeaderBytes,
                        absl::Now() + absl::Seconds(20));
          // An ungated sender would pass the header within microseconds.
          WaitForQueued(fd, PeerExchange::kHeaderBytes + 1,
                        absl::Now() + absl::Milliseconds(300));
          before_entering = Queued(fd);
          exchange.Send(0, &one, 1);
          exchange.Receive(0, received.data(), kCount, /*add=*/false);
        }
        return exchange.Run(RoundLabel{0, 0, 0, "a gated step"});
      });
  ASSERT_EQ(statuses.size(), 2u);
  ASSERT_TRUE(statuses[0].ok()) << statuses[0];
  ASSERT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(before_entering, PeerExchange::kHeaderBytes)
      << "rank 0 sent payload before its gate (rank 1's float) arrived";
  EXPECT_EQ(token, 1.0f);
  EXPECT_EQ(received, Input(0));
}

}  // namespace
}  // namespace gradsync
