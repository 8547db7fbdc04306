// The selector's link probe: every rank ends with the same figures, ranks
// without a partner sit out, and the probe sees latency that is on the path
// (a userspace delay line of 3 ms each way, bench/delay_line.h).
#include "allreduce/algorithms/peer_link_probe.h"

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/transport/test_cluster.h"
#include "bench/delay_line.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kChunk = 64 << 10;
const PeerLinkProbeOptions kQuick{5, 1, 16 << 10, 256 << 10};

TEST(ProbePartner, PairsAcrossTheJobAndIsSymmetric) {
  EXPECT_EQ(ProbePartner(0, 1), -1);
  EXPECT_EQ(ProbePartner(0, 2), 1);
  EXPECT_EQ(ProbePartner(1, 8), 5);
  EXPECT_EQ(ProbePartner(5, 8), 1);
  // N = 6: p = 4, ranks 4 and 5 sit out.
  EXPECT_EQ(ProbePartner(3, 6), 1);
  EXPECT_EQ(ProbePartner(4, 6), -1);
  for (int n = 1; n <= 17; ++n) {
    for (int rank = 0; rank < n; ++rank) {
      const int partner = ProbePartner(rank, n);
      if (partner < 0) continue;
      EXPECT_LT(partner, n);
      EXPECT_NE(partner, rank);
      EXPECT_EQ(ProbePartner(partner, n), rank) << "N=" << n;
    }
  }
}

// Probes a job of `n` ranks whose every connection goes through a delay
// line of `one_way` (none when zero); returns every rank's result.
std::vector<absl::StatusOr<PeerLinkProbeResult>> ProbeJob(
    int n, absl::Duration one_way) {
  auto cluster =
      TransportTestCluster::Start(n, "probe-test", absl::Seconds(30));
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  std::vector<absl::StatusOr<PeerLinkProbeResult>> results(
      n, absl::UnknownError("not run"));
  absl::Mutex mu;
  (*cluster)->RunOnEveryRank([&](int rank) -> absl::Status {
    // Declared before the transport: the relays must outlive it.
    DelayedRendezvous delayed((*cluster)->client(rank), "127.0.0.1", one_way);
    Rendezvous* rendezvous = one_way > absl::ZeroDuration()
                                 ? static_cast<Rendezvous*>(&delayed)
                                 : (*cluster)->client(rank);
    PeerTransportOptions options = (*cluster)->TransportOptions(rank);
    const int partner = ProbePartner(rank, n);
    if (partner >= 0) options.peers = {partner};
    absl::StatusOr<std::unique_ptr<PeerTransport>> transport =
        PeerTransport::Create(options, rendezvous);
    if (!transport.ok()) return transport.status();
    RingAllReduce ring(transport->get(), kChunk);
    absl::StatusOr<PeerLinkProbeResult> result =
        ProbePeerLink(transport->get(), kChunk, ring, kQuick);
    absl::MutexLock lock(&mu);
    results[rank] = result;
    return result.status();
  });
  return results;
}

TEST(ProbePeerLink, EveryRankHoldsTheSameFigures) {
  for (int n : {2, 3, 6}) {
    const auto results = ProbeJob(n, absl::ZeroDuration());
    ASSERT_TRUE(results[0].ok()) << results[0].status();
    EXPECT_EQ(results[0]->pairs, n >= 4 ? 2 : 1) << "N=" << n;
    EXPECT_GT(results[0]->link.alpha_s, 0);
    EXPECT_GT(results[0]->link.bytes_per_s, 0);
    for (int rank = 1; rank < n; ++rank) {
      ASSERT_TRUE(results[rank].ok()) << results[rank].status();
      EXPECT_EQ(results[rank]->link.alpha_s, results[0]->link.alpha_s);
      EXPECT_EQ(results[rank]->link.bytes_per_s, results[0]->link.bytes_per_s);
    }
  }
}

TEST(ProbePeerLink, SeesTheLatencyOnThePath) {
  // 3 ms each way: a round trip crosses two relays, so α >= 3 ms; loopback
  // adds well under a millisecond, the bound above is loose on purpose.
  const auto results = ProbeJob(4, absl::Milliseconds(3));
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->link.alpha_s, 3e-3);
    EXPECT_EQ(result->pairs, 2);
  }
}

TEST(ProbePeerLink, RefusesATransportWithoutThePartner) {
  auto cluster = TransportTestCluster::Start(2, "probe-no-peer");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto transports = (*cluster)->ConnectPeers();  // ring only, no peers
  ASSERT_TRUE(transports.ok()) << transports.status();
  RingAllReduce ring((*transports)[0].get(), kChunk);
  const absl::StatusOr<PeerLinkProbeResult> result =
      ProbePeerLink((*transports)[0].get(), kChunk, ring, kQuick);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(), HasSubstr("partner, rank 1"));
}

}  // namespace
}  // namespace gradsync
