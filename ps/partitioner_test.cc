// Chunking and balancing of keys over parameter servers.
#include "ps/partitioner.h"

#include <algorithm>
#include <numeric>

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

}  // namespace
}  // namespace gradsync
