// SummarizeProfile: medians per operation, label and category over steps,
// shares of the step's median total, the order of rows, and refusals of
// steps that ran different operations.
#include "bench/layer_profile_table.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// An operation whose host time is a tenth of its device time.
ProfiledOp Op(const std::string& category, const std::string& shape,
              double ms) {
  return ProfiledOp{category, category + " " + shape, ms, ms / 10};
}

TEST(LayerProfileTableTest, MediansByOperationLabelAndCategory) {
  // Three steps of four operations; two share a label.
  const std::vector<std::vector<ProfiledOp>> steps = {
      {Op("conv forward", "a", 2.0), Op("conv forward", "a", 2.0),
       Op("batch norm forward", "b", 1.0), Op("optimizer", "c", 0.5)},
      {Op("conv forward", "a", 4.0), Op("conv forward", "a", 2.0),
       Op("batch norm forward", "b", 3.0), Op("optimizer", "c", 0.5)},
      {Op("conv forward", "a", 3.0), Op("conv forward", "a", 3.0),
       Op("batch norm forward", "b", 2.0), Op("optimizer", "c", 1.5)},
  };
  auto table = SummarizeProfile(steps);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->steps, 3);
  // Step totals 5.5, 9.5, 9.5: median 9.5.
  EXPECT_DOUBLE_EQ(table->total_ms, 9.5);
  EXPECT_DOUBLE_EQ(table->host_total_ms, 0.95);
  ASSERT_EQ(table->ops.size(), 4u);
  EXPECT_DOUBLE_EQ(table->ops[0].ms, 3.0);  // median of 2, 4, 3
  EXPECT_DOUBLE_EQ(table->ops[1].ms, 2.0);
  EXPECT_DOUBLE_EQ(table->ops[3].ms, 0.5);
  EXPECT_DOUBLE_EQ(table->ops[0].host_ms, 0.3);
  // The label's per-step sums 4, 6, 6: median 6, two calls a step.
  ASSERT_EQ(table->labels.size(), 3u);
  EXPECT_EQ(table->labels[0].name, "conv forward a");
  EXPECT_EQ(table->labels[0].calls, 2);
  EXPECT_DOUBLE_EQ(table->labels[0].ms, 6.0);
  EXPECT_DOUBLE_EQ(table->labels[0].share, 6.0 / 9.5);
  EXPECT_DOUBLE_EQ(table->labels[0].host_ms, 0.6);
  EXPECT_EQ(table->labels[1].name, "batch norm forward b");
  ASSERT_EQ(table->categories.size(), 3u);
  EXPECT_EQ(table->categories[2].name, "optimizer");
  EXPECT_DOUBLE_EQ(table->categories[2].ms, 0.5);

  const std::string text = FormatProfile(*table, 1);
  EXPECT_THAT(text, HasSubstr("4 operations a step, 9.500 ms"));
  EXPECT_THAT(text, HasSubstr("queue them: 0.950 ms a step"));
  // Device ms/step and share stay the last two columns (the quick check
  // and tools/gpu_results.py read them from the right), host ms before.
  EXPECT_THAT(text, HasSubstr("calls  host ms    ms/step   share\n"));
  EXPECT_THAT(text, HasSubstr("      2    0.600      6.000   63.2%\n"));
  EXPECT_THAT(text, HasSubstr("conv forward a"));
  EXPECT_THAT(text, HasSubstr("2 more"));
  const nlohmann::json json = ProfileJson(*table);
  EXPECT_EQ(json["ops"].size(), 4u);
  EXPECT_EQ(json["labels"][0]["calls"], 2);
  EXPECT_DOUBLE_EQ(json["labels"][0]["host_ms"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(json["host_total_ms"].get<double>(), 0.95);
}

TEST(LayerProfileTableTest, MedianOfEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(MedianOf({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(MedianOf({}), 0.0);
}

TEST(LayerProfileTableTest, StepsThatDifferAreRefused) {
  EXPECT_FALSE(SummarizeProfile({}).ok());
  auto shorter = SummarizeProfile({{Op("loss", "x", 1.0)}, {}});
  ASSERT_FALSE(shorter.ok());
  EXPECT_THAT(shorter.status().message(), HasSubstr("step 1 queued 0"));
  auto other =
      SummarizeProfile({{Op("loss", "x", 1.0)}, {Op("loss", "y", 1.0)}});
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("operation 0"));
}

}  // namespace
}  // namespace gradsync
