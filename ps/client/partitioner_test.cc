// Chunking and balancing of keys over parameter servers.
#include "ps/client/partitioner.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

ParamLayout MakeLayout(const std::vector<int64_t>& sizes,
                       int64_t bucket_bytes = 0) {
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    specs.push_back({"p" + std::to_string(i), {sizes[i]}});
  }
  auto layout = ParamLayout::Create(specs, bucket_bytes);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// Keys must tile the flat buffer exactly, in order, each within its
// parameter and no larger than a chunk.
void ExpectKeysTileLayout(const Partition& partition,
                          const ParamLayout& layout) {
  int64_t offset = 0;
  for (size_t i = 0; i < partition.keys().size(); ++i) {
    const PsKey& key = partition.keys()[i];
    EXPECT_EQ(key.id, static_cast<int>(i));
    EXPECT_EQ(key.offset, offset);
    EXPECT_GE(key.numel, 1);
    EXPECT_LE(key.numel * 4, partition.chunk_bytes());
    const ParamInfo& param = layout.params()[key.param];
    EXPECT_GE(key.offset, param.offset);
    EXPECT_LE(key.offset + key.numel, param.offset + param.numel);
    EXPECT_EQ(key.bucket, param.bucket);
    offset += key.numel;
  }
  EXPECT_EQ(offset, layout.total_numel());
}

TEST(PartitionerTest, SplitsIntoNearlyEqualChunks) {
  ParamLayout layout = MakeLayout({10, 1, 3});
  auto partition = Partition::Create(layout, 2, /*chunk_bytes=*/12);
  ASSERT_TRUE(partition.ok()) << partition.status();
  // 10 floats in chunks of <= 3: four chunks 3 3 2 2; then 1; then 3.
  std::vector<int64_t> sizes;
  for (const PsKey& key : partition->keys()) sizes.push_back(key.numel);
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 2, 2, 1, 3}));
  ExpectKeysTileLayout(*partition, layout);
}

TEST(PartitionerTest, EveryKeyOnExactlyOneServerAndBytesAddUp) {
  ParamLayout layout = MakeLayout({1000, 7, 1, 333, 4099, 12}, 4096);
  for (int k = 1; k <= 5; ++k) {
    auto partition = Partition::Create(layout, k, 256);
    ASSERT_TRUE(partition.ok());
    ExpectKeysTileLayout(*partition, layout);
    std::vector<int> seen(partition->keys().size(), 0);
    int64_t total = 0;
    for (int s = 0; s < k; ++s) {
      int64_t bytes = 0;
      for (int id : partition->keys_of_server(s)) {
        ++seen[id];
        EXPECT_EQ(partition->keys()[id].server, s);
        bytes += partition->keys()[id].numel * 4;
      }
      EXPECT_EQ(bytes, partition->server_bytes()[s]);
      total += bytes;
    }
    EXPECT_EQ(total, layout.total_bytes());
    EXPECT_TRUE(
        std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    // Bucket lists cover every key once as well.
    int in_buckets = 0;
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      for (int id : partition->keys_of_bucket(b)) {
        EXPECT_EQ(partition->keys()[id].bucket, static_cast<int>(b));
        ++in_buckets;
      }
    }
    EXPECT_EQ(in_buckets, static_cast<int>(partition->keys().size()));
  }
}

TEST(PartitionerTest, GreedyBalanceIsWithinOneKeyOfTheMean) {
  // List scheduling's guarantee: the most loaded server exceeds the mean by at
  // most the largest key.
  ParamLayout layout = MakeLayout({5000, 3, 777, 1, 2048, 999, 64, 10});
  for (int k = 1; k <= 4; ++k) {
    auto partition = Partition::Create(layout, k, 1024);
    ASSERT_TRUE(partition.ok());
    int64_t largest = 0;
    for (const PsKey& key : partition->keys()) {
      largest = std::max(largest, key.numel * 4);
    }
    const double mean = static_cast<double>(layout.total_bytes()) / k;
    const int64_t max = *std::max_element(partition->server_bytes().begin(),
                                          partition->server_bytes().end());
    EXPECT_LE(max, mean + largest) << partition->Describe();
    EXPECT_NEAR(partition->imbalance(), max / mean, 1e-9);
  }
}

TEST(PartitionerTest, IsDeterministic) {
  ParamLayout layout = MakeLayout({100, 100, 100, 50, 50, 1});
  auto a = Partition::Create(layout, 3, 64);
  auto b = Partition::Create(layout, 3, 64);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->keys().size(); ++i) {
    EXPECT_EQ(a->keys()[i].server, b->keys()[i].server);
  }
  // Equal keys go round the servers in key order: 100-float params with
  // 16-float chunks give seven 15/14-float keys each.
  EXPECT_EQ(a->keys()[0].server, 0);
}

TEST(PartitionerTest, MoreServersThanKeysLeavesServersEmpty) {
  ParamLayout layout = MakeLayout({1});
  auto partition = Partition::Create(layout, 4, 4096);
  ASSERT_TRUE(partition.ok());
  ASSERT_EQ(partition->keys().size(), 1u);
  EXPECT_EQ(partition->keys_of_server(0).size(), 1u);
  for (int s = 1; s < 4; ++s) EXPECT_TRUE(partition->keys_of_server(s).empty());
  EXPECT_DOUBLE_EQ(partition->imbalance(), 4.0);
}

TEST(PartitionerTest, RejectsBadArguments) {
  ParamLayout layout = MakeLayout({10});
  EXPECT_FALSE(Partition::Create(layout, 0, 4096).ok());
  EXPECT_FALSE(Partition::Create(layout, 1, 0).ok());
  EXPECT_FALSE(Partition::Create(layout, 1, 6).ok());
}

// The bytes a link carries per step and direction for a share of S = 1
// (ps/client/partitioner.h): a serving worker's and a separate server's.
double BusiestLink(int n, int colocated, const std::vector<double>& shares) {
  double busiest = 1.0;  // a worker that does not serve carries S
  for (size_t s = 0; s < shares.size(); ++s) {
    busiest = std::max(busiest, static_cast<int>(s) < colocated
                                    ? 1.0 + (n - 2) * shares[s]
                                    : n * shares[s]);
  }
  return busiest;
}

TEST(PartitionerTest, BalancedSharesEquateTheServingWorkersAndServersLinks) {
  for (int n = 2; n <= 8; ++n) {
    for (int c = 1; c <= n; ++c) {
      for (int s = 1; s <= 2 * n; ++s) {
        SCOPED_TRACE(absl::StrCat("N=", n, " c=", c, " s=", s));
        auto balanced = ServerShares(PartitionPolicy::kBalanced, n, c, s);
        auto equal = ServerShares(PartitionPolicy::kEqual, n, c, s);
        ASSERT_TRUE(balanced.ok() && equal.ok());
        ASSERT_EQ(balanced->size(), static_cast<size_t>(c + s));
        EXPECT_NEAR(std::accumulate(balanced->begin(), balanced->end(), 0.0),
                    1.0, 1e-12);
        const double colocated_share = (*balanced)[0];
        const double separate_share = (*balanced)[c];
        EXPECT_GE(colocated_share, 0.0);
        EXPECT_LE(colocated_share, separate_share);
        if (colocated_share > 0) {
          EXPECT_NEAR(1.0 + (n - 2) * colocated_share, n * separate_share,
                      1e-12);
        } else {
          EXPECT_GE(s, n);  // separate servers alone keep links at S
          EXPECT_LE(n * separate_share, 1.0 + 1e-12);
        }
        // Never worse than equal shares, and BytePS's optimum where every
        // worker serves beside k <= N separate servers.
        EXPECT_LE(BusiestLink(n, c, *balanced),
                  BusiestLink(n, c, *equal) + 1e-12);
        if (c == n && s <= n) {
          EXPECT_NEAR(BusiestLink(n, c, *balanced),
                      2.0 * n * (n - 1) / (n * n + s * n - 2.0 * s), 1e-12);
        }
      }
    }
  }
  // N = 4 with every worker serving beside 2 separate servers: 0.1 and 0.3,
  // 1.2 S on every link against 1.5 S with equal shares.
  auto shares = ServerShares(PartitionPolicy::kBalanced, 4, 4, 2);
  ASSERT_TRUE(shares.ok());
  EXPECT_NEAR((*shares)[0], 0.1, 1e-12);
  EXPECT_NEAR((*shares)[5], 0.3, 1e-12);
}

TEST(PartitionerTest, OneKindOfServerKeepsEqualShares) {
  for (PartitionPolicy policy :
       {PartitionPolicy::kEqual, PartitionPolicy::kBalanced}) {
    for (const auto& [n, c, s] : std::vector<std::tuple<int, int, int>>{
             {4, 0, 3}, {4, 4, 0}, {4, 2, 0}, {1, 1, 2}}) {
      auto shares = ServerShares(policy, n, c, s);
      ASSERT_TRUE(shares.ok());
      for (double share : *shares) EXPECT_DOUBLE_EQ(share, 1.0 / (c + s));
    }
  }
  EXPECT_FALSE(ServerShares(PartitionPolicy::kBalanced, 2, 3, 1).ok());
  EXPECT_FALSE(ServerShares(PartitionPolicy::kBalanced, 2, 0, 0).ok());
}

TEST(PartitionerTest, EqualSharesPlaceKeysAsTheLeastLoadedRule) {
  ParamLayout layout = MakeLayout({5000, 3, 777, 1, 2048, 999, 64, 10});
  for (int k = 1; k <= 5; ++k) {
    auto by_count = Partition::Create(layout, k, 1024);
    auto by_shares =
        Partition::Create(layout, std::vector<double>(k, 1.0 / k), 1024);
    ASSERT_TRUE(by_count.ok() && by_shares.ok());
    for (size_t i = 0; i < by_count->keys().size(); ++i) {
      EXPECT_EQ(by_count->keys()[i].server, by_shares->keys()[i].server);
    }
  }
}

TEST(PartitionerTest, WeightedPlacementFollowsTheTargets) {
  // 4 workers serving beside 2 separate servers: targets 0.1 x 4, 0.3 x 2.
  ParamLayout layout = MakeLayout({40000, 1234, 9999, 17, 20000, 640});
  auto shares = ServerShares(PartitionPolicy::kBalanced, 4, 4, 2);
  ASSERT_TRUE(shares.ok());
  auto a = Partition::Create(layout, *shares, 4096);
  auto b = Partition::Create(layout, *shares, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectKeysTileLayout(*a, layout);
  int64_t largest = 0;
  for (const PsKey& key : a->keys()) {
    largest = std::max(largest, key.numel * 4);
    EXPECT_EQ(key.server, b->keys()[key.id].server);  // deterministic
  }
  int64_t total = 0;
  for (int s = 0; s < 6; ++s) {
    const double target = (*shares)[s] * layout.total_bytes();
    // The greedy rule overshoots a target by at most a key scaled by the
    // largest over the smallest target (here 3 keys); in practice by less
    // than one.
    EXPECT_LE(a->server_bytes()[s], target + largest) << a->Describe();
    EXPECT_GE(a->server_bytes()[s], target - 3 * largest) << a->Describe();
    total += a->server_bytes()[s];
  }
  EXPECT_EQ(total, layout.total_bytes());
  EXPECT_EQ(a->shares(), *shares);
  EXPECT_NE(a->Describe().find("target shares 0.100"), std::string::npos)
      << a->Describe();
}

TEST(PartitionerTest, AServerWithoutAShareGetsNoKeys) {
  ParamLayout layout = MakeLayout({1000, 333, 77});
  auto shares = ServerShares(PartitionPolicy::kBalanced, 4, 2, 4);
  ASSERT_TRUE(shares.ok());
  ASSERT_EQ((*shares)[0], 0.0);  // 4 separate servers carry it all at S
  auto partition = Partition::Create(layout, *shares, 256);
  ASSERT_TRUE(partition.ok());
  EXPECT_TRUE(partition->keys_of_server(0).empty());
  EXPECT_TRUE(partition->keys_of_server(1).empty());
}

TEST(PartitionerTest, RejectsBadSharesAndPolicies) {
  ParamLayout layout = MakeLayout({10});
  EXPECT_FALSE(Partition::Create(layout, std::vector<double>{}, 64).ok());
  EXPECT_FALSE(Partition::Create(layout, {0.5, 0.4}, 64).ok());
  EXPECT_FALSE(Partition::Create(layout, {1.5, -0.5}, 64).ok());
  EXPECT_TRUE(ParsePartitionPolicy("balanced").ok());
  auto bad = ParsePartitionPolicy("weighted");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--ps_partition=weighted"),
            std::string::npos);
}

// A row-sparse tensor (an embedding table) is cut on row boundaries, so each
// key holds whole rows and its pushes are rows of its own; dense tensors
// beside it are cut as before.
TEST(PartitionerTest, RowSparseTensorsSplitOnRows) {
  ParamSpec table{"embedding", {1000, 12}};
  table.sparse_row_width = 12;
  auto layout = ParamLayout::Create({{"w", {100}}, table}, 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // 400-byte chunks: 100 floats, not a multiple of 12.
  auto partition = Partition::Create(*layout, 3, 400);
  ASSERT_TRUE(partition.ok()) << partition.status();
  const ParamInfo& info = layout->params()[1];
  int64_t table_keys = 0;
  for (const PsKey& key : partition->keys()) {
    if (key.param != 1) {
      EXPECT_EQ(key.row_width, 0);
      continue;
    }
    ++table_keys;
    EXPECT_EQ(key.row_width, 12);
    EXPECT_EQ((key.offset - info.offset) % 12, 0);
    EXPECT_EQ(key.numel % 12, 0);
    EXPECT_LE(key.numel, 100);  // 8 rows of 12: within the chunk
  }
  EXPECT_EQ(table_keys, 125);  // 1000 rows, 8 a key
}

}  // namespace
}  // namespace gradsync
