// The timeline recorder writes the Chrome trace format, keeps spans exact,
// caps its memory, and merges ranks into one document.
#include "core/telemetry/trace.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

TEST(TraceRecorderTest, WritesCompleteAsyncAndInstantEvents) {
  TraceRecorder trace(3, "worker 3");
  trace.NameTrack(kTrackCompute, "compute");
  trace.Complete("fc1.weight", "backward", kTrackCompute, 1000, 250);
  trace.AsyncSpan("bucket 0", "bucket", 7, 1100, 1900);
  trace.Instant("ready \"quoted\"", "bucket", kTrackCommunication, 1200);
  const std::string json = trace.ToJson();
  EXPECT_THAT(json, HasSubstr(R"("ph": "X", "name": "fc1.weight", "cat": "backward", )"
                              R"("pid": 3, "tid": 1, "ts": 1000, "dur": 250)"));
  EXPECT_THAT(json, HasSubstr(R"("ph": "b", "name": "bucket 0")"));
  EXPECT_THAT(json, HasSubstr(R"("id": 7, "ts": 1900)"));
  EXPECT_THAT(json, HasSubstr(R"(ready \"quoted\")"));
  EXPECT_THAT(json, HasSubstr(R"("args": {"name": "worker 3"})"));
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.substr(json.size() - 3), "}}\n");
}

TEST(TraceRecorderTest, DropsEventsOverTheCapAndSaysSo) {
  TraceRecorder trace(0, "worker 0", /*max_events=*/10);
  for (int i = 0; i < 100; ++i) trace.Instant("tick", "test", 0, i);
  EXPECT_EQ(trace.size(), 10);
  // Two metadata events came first, so 92 of the 100 instants were dropped.
  EXPECT_EQ(trace.dropped(), 92);
  EXPECT_THAT(trace.ToJson(), HasSubstr(R"("dropped_events": 92)"));
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
  const std::string merged = ReadFile(base);
  EXPECT_EQ(Count(merged, R"("name": "step 0")"), 3);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(merged, HasSubstr("\"pid\": " + std::to_string(rank) + ", \"tid\": 0, \"ts\": " +
                                  std::to_string(100 * rank)));
  }
  EXPECT_EQ(Count(merged, "traceEvents"), 1);
}

TEST(TraceRecorderTest, MergeRejectsForeignFiles) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/other.json";
  std::ofstream(path) << "{\"something\": 1}";
  EXPECT_FALSE(MergeTraceFiles({path}, path + ".out").ok());
  EXPECT_FALSE(MergeTraceFiles({path + ".missing"}, path + ".out").ok());
}

}  // namespace
}  // namespace gradsync
