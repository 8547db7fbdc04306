// The metrics files and the run summary: one valid JSON line per step and per
// epoch with the documented keys, warm-up steps left out of the means, ranks
// combined with the manifest, and a clear error for a folder it cannot use.
#include "core/telemetry/metrics.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string TempDir(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::vector<Json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> lines;
  std::string line;
  while (std::getline(in, line)) {
    Json parsed = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(parsed.is_discarded()) << "not JSON: " << line;
    lines.push_back(parsed);
  }
  return lines;
}

StepRecord Step(int64_t step, double step_ms, double compute_ms,
                double sync_wait_ms, int64_t bytes) {
  StepRecord record;
  record.rank = 2;
  record.step = step;
  record.epoch = 0;
  record.loss = 1.5;
  record.step_ms = step_ms;
  record.compute_ms = compute_ms;
  record.sync_wait_ms = sync_wait_ms;
  record.bytes_sent = bytes;
  record.bytes_recv = 2 * bytes;
  record.samples_per_s = 6400;
  return record;
}

TEST(MetricsWriterTest, WritesOneJsonLinePerStepAndEpoch) {
  // A folder that does not exist yet, two levels deep: Open creates it.
  const std::string dir = TempDir("lines/nested");
  auto writer = MetricsWriter::Open(dir, 2);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path(), dir + "/worker2.jsonl");

  StepRecord step = Step(7, 10.12345, 6.0, 3.5, 4096);
  step.extra = {{"push_ms", 1.23456}};
  (*writer)->WriteStep(step);
  EpochRecord epoch;
  epoch.rank = 2;
  epoch.epoch = 1;
  epoch.steps = 8;
  epoch.mean_loss = 0.75;
  epoch.seconds = 2.5;
  epoch.samples_per_s = 204.8;
  (*writer)->WriteEpoch(epoch);
  epoch.test_accuracy = 0.875;
  (*writer)->WriteEpoch(epoch);

  // Lines are flushed one at a time: readable before the writer closes.
  const std::vector<Json> lines = ReadJsonLines((*writer)->path());
  ASSERT_EQ(lines.size(), 3u);

  const Json& s = lines[0];
  EXPECT_EQ(s["type"], "step");
  EXPECT_EQ(s["rank"], 2);
  EXPECT_EQ(s["step"], 7);
  EXPECT_EQ(s["epoch"], 0);
  EXPECT_DOUBLE_EQ(s["loss"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(s["step_ms"].get<double>(), 10.123);  // rounded to µs
  EXPECT_DOUBLE_EQ(s["compute_ms"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(s["sync_wait_ms"].get<double>(), 3.5);
  EXPECT_EQ(s["bytes_sent"], 4096);
  EXPECT_EQ(s["bytes_recv"], 8192);
  EXPECT_DOUBLE_EQ(s["samples_per_s"].get<double>(), 6400);
  EXPECT_DOUBLE_EQ(s["push_ms"].get<double>(), 1.235);

  const Json& e = lines[1];
  EXPECT_EQ(e["type"], "epoch");
  EXPECT_EQ(e["rank"], 2);
  EXPECT_EQ(e["epoch"], 1);
  EXPECT_EQ(e["steps"], 8);
  EXPECT_DOUBLE_EQ(e["loss"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(e["seconds"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(e["samples_per_s"].get<double>(), 204.8);
  // Not evaluated: no accuracy rather than -1.
  EXPECT_FALSE(e.contains("test_accuracy"));
  EXPECT_DOUBLE_EQ(lines[2]["test_accuracy"].get<double>(), 0.875);
}

TEST(MetricsWriterTest, AnEmptyFolderWritesNothing) {
  auto writer = MetricsWriter::Open("", 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path(), "");
  (*writer)->WriteStep(Step(0, 1, 1, 0, 0));  // must not crash
}

TEST(MetricsWriterTest, AFolderUnderAFileIsAClearError) {
  const std::string file = TempDir("plain_file");
  std::ofstream(file) << "not a folder";
  // Root can write anywhere, so the folder is made impossible, not read-only.
  auto writer = MetricsWriter::Open(file + "/metrics", 0);
  ASSERT_FALSE(writer.ok());
  EXPECT_THAT(std::string(writer.status().message()),
              HasSubstr("cannot create metrics folder " + file + "/metrics"));

  // The folder name is itself a file: mkdir says it exists, fopen fails.
  auto onto_file = MetricsWriter::Open(file, 0);
  ASSERT_FALSE(onto_file.ok());
  EXPECT_THAT(
      std::string(onto_file.status().message()),
      HasSubstr("cannot write metrics file " + file + "/worker0.jsonl"));
}

TEST(RankTotalsTest, WarmUpStepsAreLeftOutOfTheMeans) {
  RankTotals totals;
  // Two slow warm-up steps, then two measured ones.
  totals.Add(Step(0, 1000, 900, 100, 10), 64, /*measured=*/false);
  totals.Add(Step(1, 500, 400, 100, 10), 64, /*measured=*/false);
  totals.Add(Step(2, 10, 6, 4, 10), 64, /*measured=*/true);
  totals.Add(Step(3, 30, 14, 16, 10), 64, /*measured=*/true);
  EXPECT_EQ(totals.steps, 4);
  EXPECT_EQ(totals.measured_steps, 2);
  EXPECT_EQ(totals.samples, 128);
  EXPECT_DOUBLE_EQ(totals.seconds, 0.04);

  const Json rank =
      Json::parse(RankSummaryJson(2, totals, R"({"server0_bytes": 12})"));
  EXPECT_EQ(rank["rank"], 2);
  EXPECT_EQ(rank["steps"], 4);
  EXPECT_EQ(rank["measured_steps"], 2);
  EXPECT_DOUBLE_EQ(rank["step_ms"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(rank["compute_ms"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(rank["sync_wait_ms"].get<double>(), 10);
  // 128 samples in the 40 ms of measured steps.
  EXPECT_DOUBLE_EQ(rank["samples_per_s"].get<double>(), 3200);
  // Traffic does not depend on warm-up: every step counts.
  EXPECT_EQ(rank["bytes_sent_per_step"], 10);
  EXPECT_EQ(rank["bytes_recv_per_step"], 20);
  EXPECT_EQ(rank["sync"]["server0_bytes"], 12);
}

TEST(RankTotalsTest, NoMeasuredStepsGiveZeroesAndBadSyncJsonAnEmptyObject) {
  RankTotals totals;
  totals.Add(Step(0, 1000, 900, 100, 10), 64, /*measured=*/false);
  const Json rank = Json::parse(RankSummaryJson(0, totals, "{not json"));
  EXPECT_EQ(rank["measured_steps"], 0);
  EXPECT_DOUBLE_EQ(rank["step_ms"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(rank["samples_per_s"].get<double>(), 0);
  EXPECT_EQ(rank["sync"], Json::object());
}

TEST(RunSummaryTest, CombinesRanksAndEmbedsTheManifest) {
  RankTotals fast, slow;
  fast.Add(Step(0, 10, 8, 2, 100), 50, /*measured=*/true);
  slow.Add(Step(0, 30, 12, 18, 300), 50, /*measured=*/true);
  const std::vector<std::string> ranks = {RankSummaryJson(0, fast, "{}"),
                                          RankSummaryJson(1, slow, "{}")};
  const std::string manifest = R"({"git_commit": "abc123", "flags": {}})";
  const std::string text =
      RunSummaryJson(manifest, ranks, "ring", 2, 0, "mlp", 0.9, 12.3456);
  const Json summary = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(summary.is_discarded()) << text;

  EXPECT_EQ(summary["type"], "summary");
  EXPECT_EQ(summary["strategy"], "ring");
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_EQ(summary["servers"], 0);
  EXPECT_EQ(summary["model"], "mlp");
  // Times are means over ranks; throughput is the job's, the sum.
  EXPECT_DOUBLE_EQ(summary["step_ms"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(summary["compute_ms"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(summary["sync_wait_ms"].get<double>(), 10);
  // 50 samples in 10 ms plus 50 in 30 ms (each rank's figure is rounded).
  EXPECT_DOUBLE_EQ(summary["samples_per_s"].get<double>(), 5000 + 1666.667);
  // (100 + 200 + 300 + 600) bytes over 2 workers.
  EXPECT_EQ(summary["bytes_per_worker_per_step"], 600);
  EXPECT_DOUBLE_EQ(summary["test_accuracy"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(summary["wall_seconds"].get<double>(), 12.346);

  ASSERT_EQ(summary["ranks"].size(), 2u);
  EXPECT_EQ(summary["ranks"][0]["rank"], 0);
  EXPECT_DOUBLE_EQ(summary["ranks"][0]["step_ms"].get<double>(), 10);
  EXPECT_EQ(summary["ranks"][1]["rank"], 1);
  EXPECT_DOUBLE_EQ(summary["ranks"][1]["step_ms"].get<double>(), 30);
  EXPECT_EQ(summary["manifest"]["git_commit"], "abc123");
}

TEST(RunSummaryTest, LeavesOutAccuracyNotEvaluatedAndUnreadableRanks) {
  RankTotals totals;
  totals.Add(Step(0, 10, 8, 2, 100), 50, /*measured=*/true);
  const std::string text =
      RunSummaryJson("{}", {RankSummaryJson(0, totals, "{}"), "garbage"},
                     "local", 1, 0, "mlp", -1, 1);
  const Json summary = Json::parse(text);
  EXPECT_FALSE(summary.contains("test_accuracy"));
  ASSERT_EQ(summary["ranks"].size(), 1u);
  EXPECT_DOUBLE_EQ(summary["step_ms"].get<double>(), 10);
}

}  // namespace
}  // namespace gradsync
