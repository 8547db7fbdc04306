// The timeline recorder writes the Chrome trace format, keeps spans exact,
// caps its memory, and merges ranks into one document.
#include "core/telemetry/trace.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(TraceRecorderTest, WritesCompleteAsyncAndInstantEvents) {
  TraceRecorder trace(3, "worker 3");
  trace.NameTrack(kTrackCompute, "compute");
  trace.Complete("fc1.weight", "backward", kTrackCompute, 1000, 250);
  trace.AsyncSpan("bucket 0", "bucket", 7, 1100, 1900);
  trace.Instant("ready \"quoted\"", "bucket", kTrackCommunication, 1200);
  const nlohmann::json json = nlohmann::json::parse(trace.ToJson());
  const nlohmann::json& events = json["traceEvents"];
  auto find = [&](const std::string& ph, const std::string& name) {
    for (const nlohmann::json& event : events) {
      if (event["ph"] == ph && event.value("name", "") == name) return event;
    }
    return nlohmann::json();
  };
  const nlohmann::json complete = find("X", "fc1.weight");
  EXPECT_EQ(complete, nlohmann::json({{"ph", "X"},
                                      {"name", "fc1.weight"},
                                      {"cat", "backward"},
                                      {"pid", 3},
                                      {"tid", 1},
                                      {"ts", 1000},
                                      {"dur", 250}}));
  EXPECT_EQ(find("b", "bucket 0").value("ts", -1), 1100);
  EXPECT_EQ(find("e", "bucket 0").value("ts", -1), 1900);
  EXPECT_EQ(find("e", "bucket 0").value("id", -1), 7);
  // Names are escaped by the library: the quotes come back as they went in.
  EXPECT_EQ(find("i", "ready \"quoted\"").value("ts", -1), 1200);
  EXPECT_EQ(find("M", "process_name")["args"]["name"], "worker 3");
  EXPECT_EQ(json["otherData"]["process"], "worker 3");
}

TEST(TraceRecorderTest, DropsEventsOverTheCapAndSaysSo) {
  TraceRecorder trace(0, "worker 0", /*max_events=*/10);
  for (int i = 0; i < 100; ++i) trace.Instant("tick", "test", 0, i);
  EXPECT_EQ(trace.size(), 10);
  // Two metadata events came first, so 92 of the 100 instants were dropped.
  EXPECT_EQ(trace.dropped(), 92);
  EXPECT_EQ(
      nlohmann::json::parse(trace.ToJson())["otherData"]["dropped_events"], 92);
}

TEST(TraceRecorderTest, NowMicrosIsWallClockTime) {
  // Microseconds since 1970: after 2020 and before 2100.
  EXPECT_GT(TraceRecorder::NowMicros(), int64_t{1577836800} * 1000000);
  EXPECT_LT(TraceRecorder::NowMicros(), int64_t{4102444800} * 1000000);
}

TEST(TraceRecorderTest, MergesRanksIntoOneDocument) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string base = dir + "/job.json";
  std::vector<std::string> files;
  for (int rank = 0; rank < 3; ++rank) {
    TraceRecorder trace(rank, "worker");
    trace.Complete("step 0", "step", kTrackStep, 100 * rank, 50);
    files.push_back(RankTracePath(base, "worker", rank));
    ASSERT_TRUE(trace.WriteJson(files.back()).ok());
  }
  EXPECT_EQ(files[2], dir + "/job.worker2.json");
  ASSERT_TRUE(MergeTraceFiles(files, base).ok());
  const nlohmann::json merged = nlohmann::json::parse(ReadFile(base));
  // Each rank's step span, from its own process, once.
  std::vector<int> steps_by_rank(3, 0);
  for (const nlohmann::json& event : merged["traceEvents"]) {
    if (event.value("name", "") != "step 0") continue;
    const int pid = event["pid"];
    ASSERT_GE(pid, 0);
    ASSERT_LT(pid, 3);
    EXPECT_EQ(event["tid"], 0);
    EXPECT_EQ(event["ts"], 100 * pid);
    ++steps_by_rank[pid];
  }
  EXPECT_THAT(steps_by_rank, testing::ElementsAre(1, 1, 1));
}

TEST(TraceRecorderTest, MergeRejectsForeignFiles) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/other.json";
  std::ofstream(path) << "{\"something\": 1}";
  EXPECT_FALSE(MergeTraceFiles({path}, path + ".out").ok());
  EXPECT_FALSE(MergeTraceFiles({path + ".missing"}, path + ".out").ok());
}

}  // namespace
}  // namespace gradsync
