// Every all-reduce of the family (halving-doubling, double binary tree,
// hierarchical, the α–β selector, and the ring beside them) over real
// loopback TCP, one thread per rank: exact sums for every N from 2 to 9 and
// buffers from one float to a few MiB, bitwise identical results on every
// rank, symmetric peer sets, and a lost rank named in the others' errors.
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/halving_doubling_allreduce.h"
#include "allreduce/algorithms/hierarchical_allreduce.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/algorithms/selecting_allreduce.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "allreduce/allreduce_table.h"
#include "allreduce/transport/test_cluster.h"
#include "core/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Small integers: every partial sum is exact in float, in any order.
float InputValue(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % 23 - 11);
}

// Ranks per node for the hierarchical cases: real two-level groupings where N
// allows one, one node of N ranks otherwise.
int RanksPerNode(int n) { return n % 2 == 0 ? 2 : (n % 3 == 0 ? 3 : n); }

using PeersOf = std::function<std::vector<int>(int rank, int world_size)>;
using Factory = std::function<std::unique_ptr<AllReduceAlgorithm>(
    PeerTransport* transport)>;

struct Algorithm {
  std::string name;
  PeersOf peers;
  Factory create;
};

constexpr int64_t kChunk = 64 << 10;
constexpr int64_t kTestEagerBytes = 8 << 10;

Algorithm ByName(const std::string& name, int n) {
  if (name == "ring") {
    return {name, nullptr, [](PeerTransport* t) {
              return std::make_unique<RingAllReduce>(t, kChunk);
            }};
  }
  if (name == "halving_doubling") {
    return {name, HalvingDoublingAllReduce::Peers, [](PeerTransport* t) {
              return std::make_unique<HalvingDoublingAllReduce>(t, kChunk);
            }};
  }
  if (name == "tree") {
    return {name, TreeAllReduce::Peers, [](PeerTransport* t) {
              return std::make_unique<TreeAllReduce>(t, kChunk);
            }};
  }
  if (name == "tree_gated") {
    // Told a link, the tree gates each reduce slice on a broadcast slice
    // (tree_allreduce.h); 4 KiB slices put tens of them in every buffer from
    // 70001 floats up, so the gates hold at every N.
    return {name, TreeAllReduce::Peers, [](PeerTransport* t) {
              auto tree = std::make_unique<TreeAllReduce>(t, 4096);
              tree->SetLink(LinkCost{1e-6, 1.25e8});
              return tree;
            }};
  }
  if (name == "hierarchical") {
    const int r = RanksPerNode(n);
    return {name,
            [r](int rank, int world) {
              return HierarchicalAllReduce::Peers(rank, world, r);
            },
            [r](PeerTransport* t) {
              return std::make_unique<HierarchicalAllReduce>(t, kChunk, r);
            }};
  }
  // The selector with a fixed link, so that both small (latency-bound) and
  // large (bandwidth-bound) buffers pick different algorithms in one run.
  return {
      name,
      [](int rank, int world) {
        return AllReduceEntryOf(AllReduceKind::kSelecting)
            .peers(rank, world, AlgorithmOptions());
      },
      [](PeerTransport* t) {
        AlgorithmOptions options;
        options.chunk_bytes = kChunk;
        options.link = LinkCost{100e-6, 1.25e8};
        auto selector =
            SelectingAllReduce::Create(t, options, SelectorCandidates());
        return std::unique_ptr<AllReduceAlgorithm>(std::move(selector).value());
      }};
}

struct FamilyCase {
  std::string algorithm;
  int world_size;
};

std::string CaseName(const testing::TestParamInfo<FamilyCase>& info) {
  return absl::StrCat(info.param.algorithm, "_N", info.param.world_size);
}

class AllReduceFamily : public testing::TestWithParam<FamilyCase> {};

// All sizes back to back on one set of connections, so consecutive
// all-reduces must stay in step too.
TEST_P(AllReduceFamily, SumIsExactAndIdenticalOnEveryRank) {
  const int n = GetParam().world_size;
  const Algorithm algorithm = ByName(GetParam().algorithm, n);
  std::vector<int64_t> counts = {1, 3, n - 1, n + 1, 4099, 70001};
  // Several MiB only for a few N, to keep the test to seconds on two cores.
  if (n == 3 || n == 4 || n == 8) counts.push_back((3 << 20) / 4 + 5);

  auto cluster = TransportTestCluster::Start(n);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::function<std::vector<int>(int)> peers_of;
  if (algorithm.peers) {
    peers_of = [&](int rank) { return algorithm.peers(rank, n); };
  }
  auto transports = (*cluster)->ConnectPeers(PeerTransportOptions(), peers_of);
  ASSERT_TRUE(transports.ok()) << transports.status();

  std::vector<std::vector<std::vector<float>>> results(n);
  std::vector<absl::Status> statuses =
      (*cluster)->RunOnEveryRank([&](int rank) {
        std::unique_ptr<AllReduceAlgorithm> instance =
            algorithm.create((*transports)[rank].get());
        // An eager prefix far below the default, so that the clear to send
        // (peer_exchange.h) gates every step above a few thousand floats at
        // every N, folds and trees included.
        instance->SetEagerBytes(kTestEagerBytes);
        uint32_t tag = 0;
        for (int64_t count : counts) {
          std::vector<float> data(count);
          for (int64_t i = 0; i < count; ++i) data[i] = InputValue(rank, i);
          // Averaging by 1/2 keeps the values exact.
          RETURN_IF_ERROR(
              Annotate(instance->Run(data.data(), count, 0.5f, tag++),
                       absl::StrCat(count, " floats")));
          results[rank].push_back(std::move(data));
        }
        return absl::OkStatus();
      });
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_TRUE(statuses[rank].ok())
        << "rank " << rank << ": " << statuses[rank];
  }
  for (size_t c = 0; c < counts.size(); ++c) {
    int64_t wrong = 0;
    int64_t first_wrong = -1;
    for (int64_t i = 0; i < counts[c]; ++i) {
      int sum = 0;
      for (int rank = 0; rank < n; ++rank) sum += InputValue(rank, i);
      if (results[0][c][i] != 0.5f * sum) {
        if (first_wrong < 0) first_wrong = i;
        ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << counts[c] << " floats, first wrong at "
                        << first_wrong;
    for (int rank = 1; rank < n; ++rank) {
      EXPECT_EQ(std::memcmp(results[rank][c].data(), results[0][c].data(),
                            counts[c] * 4),
                0)
          << "rank " << rank << " differs from rank 0 at " << counts[c]
          << " floats";
    }
  }
}

std::vector<FamilyCase> AllCases() {
  std::vector<FamilyCase> cases;
  for (const char* name : {"halving_doubling", "tree", "tree_gated",
                           "hierarchical", "allreduce"}) {
    for (int n = 2; n <= 9; ++n) cases.push_back({name, n});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AlgorithmsByWorldSize, AllReduceFamily,
                         testing::ValuesIn(AllCases()), CaseName);

TEST(AllReduceFamilyPeers, PeerSetsAreSymmetric) {
  for (int n = 1; n <= 17; ++n) {
    for (const std::string name : {"halving_doubling", "tree", "tree_gated",
                                   "hierarchical", "allreduce"}) {
      const Algorithm algorithm = ByName(name, n);
      std::vector<std::set<int>> peers(n);
      for (int rank = 0; rank < n; ++rank) {
        for (int peer : algorithm.peers(rank, n)) peers[rank].insert(peer);
      }
      for (int rank = 0; rank < n; ++rank) {
        for (int peer : peers[rank]) {
          EXPECT_NE(peer, rank) << name << " N=" << n;
          EXPECT_EQ(peers[peer].count(rank), 1)
              << name << " N=" << n << ": " << rank << " -> " << peer;
        }
      }
    }
  }
}

TEST(DoubleBinaryTree, EveryRankIsInBothTreesWithConsistentEdges) {
  for (int n = 1; n <= 17; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      int roots = 0;
      for (int rank = 0; rank < n; ++rank) {
        const TreeNode node = DoubleBinaryTreeNode(n, rank, tree);
        if (node.parent < 0) ++roots;
        EXPECT_LE(node.children.size(), 2u);
        for (int child : node.children) {
          EXPECT_EQ(DoubleBinaryTreeNode(n, child, tree).parent, rank)
              << "N=" << n << " tree " << tree;
        }
      }
      EXPECT_EQ(roots, 1) << "N=" << n << " tree " << tree;
    }
  }
}

TEST(DoubleBinaryTree, AtMostFourEdgesARankAndLogDepth) {
  for (int n = 2; n <= 17; ++n) {
    int depth = 0;
    while ((2 << depth) <= n) ++depth;  // floor(log2 n)
    EXPECT_EQ(DoubleBinaryTreeDepth(n), depth) << "N=" << n;
    for (int rank = 0; rank < n; ++rank) {
      int edges = 0;
      for (int tree = 0; tree < 2; ++tree) {
        const TreeNode node = DoubleBinaryTreeNode(n, rank, tree);
        edges += (node.parent >= 0) + static_cast<int>(node.children.size());
        int up = 0;
        for (int x = rank; DoubleBinaryTreeNode(n, x, tree).parent >= 0;
             x = DoubleBinaryTreeNode(n, x, tree).parent) {
          ++up;
        }
        EXPECT_LE(up, depth) << "N=" << n << " rank " << rank;
      }
      // Internal in one tree (3 edges), a leaf in the other (1).
      EXPECT_LE(edges, 4) << "N=" << n << " rank " << rank;
    }
  }
  // Which construction: N = 4, 5 the midpoint trees (one rank with 4 edges
  // against the bit trees' two), N = 8 the bit trees (the midpoint's busiest
  // rank has 5), N = 6 a tie (the same degrees): the bit trees.
  EXPECT_STREQ(BuildDoubleBinaryTrees(4).shape, "midpoint");
  EXPECT_STREQ(BuildDoubleBinaryTrees(5).shape, "midpoint");
  EXPECT_STREQ(BuildDoubleBinaryTrees(6).shape, "bit");
  EXPECT_STREQ(BuildDoubleBinaryTrees(8).shape, "bit");
  EXPECT_STREQ(BuildDoubleBinaryTrees(16).shape, "bit");
  EXPECT_EQ(DoubleBinaryTreeNode(4, 2, 0).children, std::vector<int>({1, 3}));
  EXPECT_EQ(DoubleBinaryTreeNode(4, 3, 1).children, std::vector<int>({2, 0}));
  // N = 8 by hand: tree 0 is the bit tree over positions 1..8 at rank p-1
  // (root 8 -> 4 -> {2, 6}, ...), tree 1 its mirror.
  EXPECT_EQ(DoubleBinaryTreeNode(8, 7, 0).parent, -1);
  EXPECT_EQ(DoubleBinaryTreeNode(8, 7, 0).children, std::vector<int>({3}));
  EXPECT_EQ(DoubleBinaryTreeNode(8, 3, 0).children, std::vector<int>({1, 5}));
  EXPECT_EQ(DoubleBinaryTreeNode(8, 0, 1).parent, -1);
  EXPECT_EQ(DoubleBinaryTreeNode(8, 4, 1).children, std::vector<int>({6, 2}));
}

TEST(DoubleBinaryTree, SlicesOnePerChunkUpToTheCap) {
  EXPECT_EQ(TreeSlices(4096, 256 << 10), 1);
  EXPECT_EQ(TreeSlices(512 << 10, 256 << 10), 2);
  EXPECT_EQ(TreeSlices(8 << 20, 256 << 10), 32);
  EXPECT_EQ(TreeSlices(int64_t{1} << 30, 256 << 10), kMaxTreeSlices);
  // The family test's sizes: 70001 floats in 2 slices, 3 MiB in 24; the
  // gated tree's 4 KiB slices: 34, and the cap.
  EXPECT_EQ(TreeSlices(35001 * 4, kChunk), 2);
  EXPECT_EQ(TreeSlices((3 << 20) / 2, kChunk), 24);
  EXPECT_EQ(TreeSlices(35001 * 4, 4096), 34);
  EXPECT_EQ(TreeSlices((3 << 20) / 2, 4096), kMaxTreeSlices);
}

// The run summary names the trees and what the lead was sized by.
TEST(DoubleBinaryTree, SummaryRecordsTheShapeAndTheLeadsLink) {
  PeerTransportOptions options;
  options.world_size = 1;
  auto transport = PeerTransport::Create(options, nullptr);
  ASSERT_TRUE(transport.ok()) << transport.status();
  TreeAllReduce tree(transport->get(), 256 << 10);
  EXPECT_EQ(tree.SummaryJson(),
            "{\"tree_shape\":\"bit\",\"tree_busiest_edges\":0,"
            "\"tree_slice_min_bytes\":262144,\"tree_lead\":\"none\"}");
  tree.SetLink(LinkCost{5e-3, 1.25e8});
  EXPECT_EQ(tree.SummaryJson(),
            "{\"tree_shape\":\"bit\",\"tree_busiest_edges\":0,"
            "\"tree_slice_min_bytes\":1250000,\"tree_lead\":\"round trip\","
            "\"tree_link_alpha_us\":5000,\"tree_link_GBps\":0.125}");
}

// A slice covers twice a hop's bandwidth-delay product at the busiest
// rank's share of the link: 2·α·B/E.
TEST(DoubleBinaryTree, StepBytesAreTwiceTheShareOfAHopsBandwidthDelay) {
  // 1 ms, 1 Gbit/s, 4 edges: 2 · 1e-3 · 1.25e8 / 4.
  EXPECT_EQ(TreeStepBytes(LinkCost{1e-3, 1.25e8}, 4), 62500);
  // 5 ms, N = 2 (2 edges): 625 000 bytes, more than a 256 KiB chunk.
  EXPECT_EQ(TreeStepBytes(LinkCost{5e-3, 1.25e8}, 2), 625000);
  EXPECT_EQ(TreeStepBytes(LinkCost{0, 1.25e8}, 4), 0);
  EXPECT_EQ(TreeStepBytes(LinkCost{1e-3, 0}, 4), 0);
}

TEST(SelectingAllReduce, PicksTheLowestPrediction) {
  const LinkCost link{1e-3, 1.25e8};
  // Latency-bound at N = 8: the tree's and halving-doubling's 6 latencies
  // against the ring's 14; halving-doubling moves 1.75·64 KiB, the tree's
  // busiest rank 4 halves (2·64 KiB) before its last byte's 6 hops.
  EXPECT_EQ(ChooseAllReduce(8, 65536, link), AllReduceKind::kHalvingDoubling);
  // 1 MiB: the ring's segments (131 KiB, 1.05 ms) outlast α, so it streams
  // (15.7 ms) where the others pay their latencies and more bytes.
  EXPECT_EQ(ChooseAllReduce(8, 1 << 20, link), AllReduceKind::kRing);
  EXPECT_EQ(ChooseAllReduce(8, 64 << 20, link), AllReduceKind::kRing);
  // N = 6: halving-doubling folds (two more latencies); the tree's 4 hops
  // make it the latency pick.
  EXPECT_EQ(ChooseAllReduce(6, 4096, link), AllReduceKind::kTree);
  // A tie goes to the ring: N = 2, where all three send S both ways once.
  EXPECT_EQ(ChooseAllReduce(2, 64 << 20, LinkCost{0, 1.25e8}),
            AllReduceKind::kRing);
  // Each candidate with its own α: a tree whose hops cost 2 ms loses the
  // latency-bound buffer to halving-doubling's 1 ms rounds.
  CandidateLinks slow_tree = CandidateLinks::Uniform(link);
  slow_tree[AllReduceKind::kTree].alpha_s = 2e-3;
  EXPECT_EQ(ChooseAllReduce(6, 4096, slow_tree),
            AllReduceKind::kHalvingDoubling);
  EXPECT_NEAR(PredictAllReduce(AllReduceKind::kTree, 6, 4096,
                               slow_tree.For(AllReduceKind::kTree)),
              3 * 2048 / 1.25e8 + 8e-3, 1e-12);
}

TEST(SelectingAllReduce, CalibrationTakesTheMedianRun) {
  // Eight runs of a tiny buffer at 1 ms hops, one stalled by 70 ms: the
  // mean would charge 9.75 ms, twice the others.
  std::vector<double> runs(7, 1.0e-3 * 6);
  runs.push_back(70e-3);
  EXPECT_DOUBLE_EQ(CalibrationSeconds(runs), 6e-3);
  EXPECT_DOUBLE_EQ(CalibrationSeconds({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(CalibrationSeconds({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(CalibrationSeconds({}), 0);
}

TEST(HierarchicalAllReduce, RefusesNodesThatDoNotDivideTheJob) {
  const absl::Status status = HierarchicalAllReduce::Check(6, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("4 ranks per node do not divide 6"));
  EXPECT_TRUE(HierarchicalAllReduce::Check(6, 3).ok());
}

// A rank that goes away mid-job: every other rank fails (none hangs), and
// the ones that talk to it name it.
TEST(AllReduceFamilyFailure, LostRankIsNamed) {
  for (const std::string name : {"halving_doubling", "tree"}) {
    const int n = 5;
    const int lost = 3;
    const Algorithm algorithm = ByName(name, n);
    auto cluster =
        TransportTestCluster::Start(n, "family-loss", absl::Seconds(20));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto transports = (*cluster)->ConnectPeers(
        PeerTransportOptions(),
        [&](int rank) { return algorithm.peers(rank, n); });
    ASSERT_TRUE(transports.ok()) << transports.status();
    std::vector<absl::Status> statuses =
        (*cluster)->RunOnEveryRank([&](int rank) {
          if (rank == lost) {
            (*transports)[rank]->Close();
            return absl::OkStatus();
          }
          std::unique_ptr<AllReduceAlgorithm> instance =
              algorithm.create((*transports)[rank].get());
          std::vector<float> data(10000, 1.0f);
          return instance->Run(data.data(), data.size(), 1.0f, 0);
        });
    bool named = false;
    for (int rank = 0; rank < n; ++rank) {
      if (rank == lost) continue;
      EXPECT_FALSE(statuses[rank].ok()) << name << " rank " << rank;
      named = named || absl::StrContains(statuses[rank].message(),
                                         absl::StrCat("rank ", lost));
    }
    EXPECT_TRUE(named) << name << ": nobody named rank " << lost
                       << "; rank 0 said " << statuses[0];
  }
}

}  // namespace
}  // namespace gradsync
