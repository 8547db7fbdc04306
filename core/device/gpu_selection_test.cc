// --gpus parsing and the local-rank → GPU mapping; no GPU needed.
#include "core/device/gpu_selection.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseGpuListTest, ParsesCommaSeparatedIndices) {
  auto gpus = ParseGpuList(" 0, 2,1 ");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, ElementsAre(0, 2, 1));
}

TEST(ParseGpuListTest, EmptyMeansNoList) {
  auto gpus = ParseGpuList("");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_TRUE(gpus->empty());
}

TEST(ParseGpuListTest, RejectsNonIndicesAndRepeats) {
  for (const char* bad : {"0,x", "-1", "0,,1", "1.5"}) {
    auto gpus = ParseGpuList(bad);
    EXPECT_EQ(gpus.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(gpus.status().message()), HasSubstr("--gpus="));
  }
  auto repeated = ParseGpuList("0,1,0");
  EXPECT_THAT(std::string(repeated.status().message()),
              HasSubstr("GPU 0 is listed twice"));
}

TEST(SelectGpuTest, LocalRankModuloVisibleGpusWithoutAList) {
  EXPECT_EQ(*SelectGpu(0, 2, {}), 0);
  EXPECT_EQ(*SelectGpu(1, 2, {}), 1);
  EXPECT_EQ(*SelectGpu(2, 2, {}), 0);
  EXPECT_EQ(*SelectGpu(5, 1, {}), 0);
}

TEST(SelectGpuTest, ListMapsLocalRanksInOrderAndWraps) {
  EXPECT_EQ(*SelectGpu(0, 4, {3, 1}), 3);
  EXPECT_EQ(*SelectGpu(1, 4, {3, 1}), 1);
  EXPECT_EQ(*SelectGpu(2, 4, {3, 1}), 3);
}

TEST(SelectGpuTest, ErrorsNameTheProblem) {
  auto none = SelectGpu(0, 0, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no CUDA GPU"));
  auto missing = SelectGpu(0, 2, {0, 2});
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("--gpus lists GPU 2 but only 2 GPU(s) are visible"));
  EXPECT_FALSE(SelectGpu(-1, 2, {}).ok());
}

TEST(OneGpuPerRankTest, RefusesMoreRanksThanGpusNamingBoth) {
  EXPECT_TRUE(OneGpuPerRank(1, 1).ok());
  EXPECT_TRUE(OneGpuPerRank(4, 8).ok());
  EXPECT_TRUE(OneGpuPerRank(8, 8).ok());
  const absl::Status refused = OneGpuPerRank(2, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("runs 2 ranks of the job and sees 1 GPU(s)"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--sync=ring"));
  EXPECT_EQ(OneGpuPerRank(1, 0).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradsync
