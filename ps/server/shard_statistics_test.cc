// The shard's summary figures on their own: counters, and the per-worker
// SSP/ASP means (staleness per push, wait saved per whole-key read).
#include "ps/server/shard_statistics.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

TEST(ShardStatisticsTest, CountersAndPerWorkerMeans) {
  ShardStatistics statistics(/*num_workers=*/2);
  statistics.CountPushPart(400);
  statistics.CountPushPart(100);
  statistics.CountBytesOut(800);
  statistics.CountPull();
  statistics.CountKeyStep();
  statistics.CountBlock();
  statistics.CountBlock();
  // Worker 0: pushes 0, 2 and 4 steps stale; two reads that saved 3 ms in
  // all. Worker 1: nothing.
  for (int64_t staleness : {0, 2, 4}) statistics.RecordStaleness(0, staleness);
  statistics.AddWaitSaved(0, 1000000);
  statistics.AddWaitSaved(0, 2000000);
  statistics.CountRead(0);
  statistics.CountRead(0);

  nlohmann::json bsp;
  statistics.AddTo(bsp, /*per_worker=*/false);
  EXPECT_EQ(bsp["bytes_in"], 500);
  EXPECT_EQ(bsp["parts_in"], 2);
  EXPECT_EQ(bsp["bytes_out"], 800);
  EXPECT_EQ(bsp["pulls"], 1);
  EXPECT_EQ(bsp["key_steps"], 1);
  EXPECT_EQ(bsp["blocks"], 2);
  EXPECT_TRUE(bsp.contains("sum_ms"));
  EXPECT_TRUE(bsp.contains("update_ms"));
  EXPECT_FALSE(bsp.contains("staleness_max"));

  nlohmann::json ssp;
  statistics.AddTo(ssp, /*per_worker=*/true);
  EXPECT_EQ(ssp["staleness_max"], nlohmann::json({4, 0}));
  EXPECT_EQ(ssp["staleness_mean"], nlohmann::json({2.0, 0.0}));
  EXPECT_EQ(ssp["wait_saved_ms_mean"], nlohmann::json({1.5, 0.0}));
}

}  // namespace
}  // namespace gradsync
