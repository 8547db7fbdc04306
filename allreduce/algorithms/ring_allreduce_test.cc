// Ring all-reduce over real loopback TCP, one thread per rank: exact sums for
// every ring size 1..8 and awkward buffer sizes, identical results on every
// rank, and the errors a broken ring must produce.
#include "allreduce/algorithms/ring_allreduce.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "allreduce/transport/peer_transport.h"
#include "allreduce/transport/test_cluster.h"
#include "core/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Small integers: every partial sum is exact in float, whatever the order of
// additions, so the ring's result must equal the sum exactly.
float InputValue(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % 23 - 11);
}

float ExpectedSum(int world_size, int64_t i) {
  int sum = 0;
  for (int rank = 0; rank < world_size; ++rank) {
    sum += static_cast<int>(InputValue(rank, i));
  }
  return static_cast<float>(sum);
}

// Segment sizes as the ring cuts them, for the byte-count check.
int64_t SegmentCount(int64_t count, int world_size, int segment) {
  return count / world_size + (segment < count % world_size ? 1 : 0);
}

struct RingCase {
  int world_size;
  int64_t chunk_bytes;
};

std::string CaseName(const testing::TestParamInfo<RingCase>& info) {
  return absl::StrCat("N", info.param.world_size, "_chunk",
                      info.param.chunk_bytes / 1024, "KiB");
}

class RingAllReduceSizes : public testing::TestWithParam<RingCase> {};

// All sizes run back to back on one ring, which also checks that consecutive
// all-reduces stay in step (each carries a sequence number).
TEST_P(RingAllReduceSizes, SumIsExactForEverySize) {
  const int n = GetParam().world_size;
  std::vector<int64_t> counts = {0, 1, n - 1, n + 1, 4099};
  // The large size (several MiB, not divisible by small N) only for a few N to
  // keep the test quick on two cores.
  if (n >= 2 && n <= 4) counts.push_back((1 << 20) + 3);

  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();

  std::vector<std::vector<std::string>> mismatches(n);
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    RingAllReduce ring((*transports)[rank].get(), GetParam().chunk_bytes);
    for (int64_t count : counts) {
      std::vector<float> data(count);
      for (int64_t i = 0; i < count; ++i) data[i] = InputValue(rank, i);
      const int64_t sent_before = ring.bytes_sent();
      const int64_t received_before = ring.bytes_received();
      RETURN_IF_ERROR(Annotate(ring.Run(data.data(), count),
                               absl::StrCat("count ", count)));
      int64_t wrong = 0;
      int64_t first_wrong = -1;
      for (int64_t i = 0; i < count; ++i) {
        if (data[i] != ExpectedSum(n, i)) {
          if (wrong++ == 0) first_wrong = i;
        }
      }
      if (wrong > 0) {
        mismatches[rank].push_back(absl::StrCat(
            "count ", count, ": ", wrong, " wrong, first at ", first_wrong,
            " = ", data[first_wrong], " want ", ExpectedSum(n, first_wrong)));
      }
      // Reduce-scatter sends every segment but (r+1), all-gather every
      // segment but (r+2); receiving skips r and (r+1) respectively.
      int64_t want_sent = 0;
      int64_t want_received = 0;
      if (n > 1 && count > 0) {
        want_sent = 4 * (2 * count - SegmentCount(count, n, (rank + 1) % n) -
                         SegmentCount(count, n, (rank + 2) % n));
        want_received = 4 * (2 * count - SegmentCount(count, n, rank) -
                             SegmentCount(count, n, (rank + 1) % n));
      }
      if (ring.bytes_sent() - sent_before != want_sent ||
          ring.bytes_received() - received_before != want_received) {
        mismatches[rank].push_back(absl::StrCat(
            "count ", count, ": sent ", ring.bytes_sent() - sent_before,
            " bytes (want ", want_sent, "), received ",
            ring.bytes_received() - received_before, " (want ", want_received,
            ")"));
      }
    }
    return absl::OkStatus();
  });
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
    EXPECT_THAT(mismatches[rank], testing::IsEmpty()) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rings, RingAllReduceSizes,
    testing::Values(RingCase{1, 256 << 10}, RingCase{2, 256 << 10},
                    RingCase{3, 256 << 10}, RingCase{4, 256 << 10},
                    RingCase{5, 256 << 10}, RingCase{6, 256 << 10},
                    RingCase{7, 256 << 10}, RingCase{8, 256 << 10},
                    // The smallest chunk makes the large buffer cross many
                    // staging-chunk boundaries and partial-float receives.
                    RingCase{2, 4 << 10}, RingCase{3, 4 << 10},
                    RingCase{5, 4 << 10}),
    CaseName);

TEST(RingAllReduceTest, ScaleGivesTheAverageOnEveryRank) {
  const int n = 3;
  const int64_t count = 10007;
  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    for (int64_t i = 0; i < count; ++i) data[rank][i] = InputValue(rank, i);
    RingAllReduce ring((*transports)[rank].get(), 64 << 10);
    return ring.Run(data[rank].data(), count, 1.0f / n);
  });
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << results[rank];
    for (int64_t i = 0; i < count; ++i) {
      // The sum is exact, so the only rounding is the one multiplication.
      ASSERT_EQ(data[rank][i], ExpectedSum(n, i) * (1.0f / n))
          << "rank " << rank << " element " << i;
    }
  }
}

TEST(RingAllReduceTest, RanksEndBitwiseIdenticalOnArbitraryFloats) {
  const int n = 5;
  const int64_t count = 100003;
  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  std::vector<double> exact(count, 0.0);
  for (int rank = 0; rank < n; ++rank) {
    std::mt19937 random(1234 + rank);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < count; ++i) {
      data[rank][i] = normal(random);
      exact[i] += data[rank][i];
    }
  }
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    RingAllReduce ring((*transports)[rank].get(), 16 << 10);
    return ring.Run(data[rank].data(), count);
  });
  for (int rank = 0; rank < n; ++rank)
    ASSERT_TRUE(results[rank].ok()) << results[rank];
  for (int rank = 1; rank < n; ++rank) {
    ASSERT_EQ(std::memcmp(data[rank].data(), data[0].data(), count * 4), 0)
        << "rank " << rank << " differs from rank 0";
  }
  for (int64_t i = 0; i < count; ++i) {
    // Five float additions of N(0,1) values: a few ulps of the largest term.
    ASSERT_NEAR(data[0][i], exact[i], 1e-5 * (1 + std::fabs(exact[i]))) << i;
  }
}

TEST(RingAllReduceTest, DifferentCountsOnTwoRanksFailOnBoth) {
  auto cluster = TransportTestCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();
  std::vector<absl::Status> second(2);
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    RingAllReduce ring((*transports)[rank].get(), 64 << 10);
    std::vector<float> data(11, 1.0f);
    absl::Status status = ring.Run(data.data(), rank == 0 ? 10 : 11);
    second[rank] = ring.Run(data.data(), 10);
    return status;
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kFailedPrecondition)
        << results[rank];
    EXPECT_THAT(std::string(results[rank].message()),
                HasSubstr("every rank must reduce the same buffers"));
    EXPECT_THAT(std::string(results[rank].message()),
                HasSubstr(absl::StrCat("left neighbour rank ", 1 - rank)));
    // A broken ring refuses further work instead of mixing streams.
    EXPECT_THAT(std::string(second[rank].message()),
                HasSubstr("the ring broke in an earlier all-reduce"));
  }
}

// A rank that forwards `bytes` from its left neighbour to its right one, as if
// it were taking part, and then stops: the ring breaks mid-transfer at a
// point the test controls, without sleeps.
absl::Status RelayThenStop(PeerTransport& transport, int64_t bytes) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<char> buffer(bytes);
  RETURN_IF_ERROR(transport.left().RecvAll(buffer.data(), bytes, deadline));
  return transport.right().SendAll(buffer.data(), bytes, deadline);
}

TEST(RingAllReduceFaultTest, DeadRankIsNamedByItsNeighbour) {
  auto cluster = TransportTestCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();
  // 32 MiB segments: more than the socket buffers hold, so rank 0 is still in
  // its first step when rank 1 disappears.
  const int64_t count = 16 << 20;
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    PeerTransport& transport = *(*transports)[rank];
    if (rank == 1) {
      RETURN_IF_ERROR(
          RelayThenStop(transport, RingAllReduce::kHeaderBytes + (1 << 20)));
      transport.Close();  // unread data pending: the kernel resets
      return absl::OkStatus();
    }
    std::vector<float> data(count, 1.0f);
    RingAllReduce ring(&transport, 256 << 10);
    return ring.Run(data.data(), count);
  });
  ASSERT_TRUE(results[1].ok()) << results[1];
  const absl::Status& error = results[0];
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable) << error;
  const std::string message(error.message());
  EXPECT_THAT(message, HasSubstr("ring: "));
  EXPECT_THAT(message, HasSubstr("neighbour rank 1 (127.0.0.1:"));
  EXPECT_THAT(message, HasSubstr("closed the connection"));
  EXPECT_THAT(message, HasSubstr("during reduce-scatter step 1 of 1"));
}

TEST(RingAllReduceFaultTest, DeadRankBreaksTheWholeRingPromptly) {
  const int n = 4;
  const int dead = 2;
  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();
  const int64_t count = 4 << 20;
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    PeerTransport& transport = *(*transports)[rank];
    if (rank == dead) {
      RETURN_IF_ERROR(
          RelayThenStop(transport, RingAllReduce::kHeaderBytes + (1 << 20)));
      transport.Close();
      return absl::OkStatus();
    }
    std::vector<float> data(count, 1.0f);
    RingAllReduce ring(&transport, 256 << 10);
    return ring.Run(data.data(), count);
  });
  ASSERT_TRUE(results[dead].ok()) << results[dead];
  int naming_dead = 0;
  for (int rank = 0; rank < n; ++rank) {
    if (rank == dead) continue;
    // Every survivor fails because a connection closed (the failure travels
    // around the ring), not because it waited out its deadline.
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kUnavailable)
        << "rank " << rank << ": " << results[rank];
    EXPECT_THAT(std::string(results[rank].message()),
                HasSubstr("closed the connection"));
    if (absl::StrContains(results[rank].message(),
                          absl::StrCat("neighbour rank ", dead, " ("))) {
      ++naming_dead;
      EXPECT_TRUE(rank == 1 || rank == 3) << results[rank];
    }
  }
  // The first rank to notice is a neighbour of the dead one; the others may
  // see the neighbour that gave up after it.
  EXPECT_GE(naming_dead, 1);
}

TEST(RingAllReduceFaultTest, SilentRankHitsTheDeadline) {
  auto cluster = TransportTestCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();
  ASSERT_TRUE(transports.ok()) << transports.status();
  // Set-up had the usual generous deadline; the transfer gets a short one.
  (*transports)[0]->set_timeout(absl::Seconds(1));
  const int64_t count = 2 << 20;  // 4 MiB segments: fit in the socket buffers
  absl::Notification rank0_done;
  std::vector<absl::Status> results = (*cluster)->RunOnEveryRank([&](int rank) {
    PeerTransport& transport = *(*transports)[rank];
    if (rank == 1) {
      RETURN_IF_ERROR(
          RelayThenStop(transport, RingAllReduce::kHeaderBytes + (1 << 20)));
      // Stay connected but silent until rank 0 has given up.
      if (!rank0_done.WaitForNotificationWithTimeout(absl::Seconds(30))) {
        return absl::DeadlineExceededError("rank 0 never gave up");
      }
      return absl::OkStatus();
    }
    std::vector<float> data(count, 1.0f);
    RingAllReduce ring(&transport, 256 << 10);
    absl::Status status = ring.Run(data.data(), count);
    rank0_done.Notify();
    return status;
  });
  ASSERT_TRUE(results[1].ok()) << results[1];
  EXPECT_EQ(results[0].code(), absl::StatusCode::kDeadlineExceeded)
      << results[0];
  EXPECT_THAT(
      std::string(results[0].message()),
      HasSubstr("ring: no data from left neighbour rank 1 (127.0.0.1:"));
  EXPECT_THAT(std::string(results[0].message()),
              HasSubstr("during reduce-scatter step 1 of 1 (1048576 of 4194304 "
                        "bytes of this step received)"));
}

}  // namespace
}  // namespace gradsync
