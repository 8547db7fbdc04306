// Strategies average exactly what the synthetic model computed. Its
// gradients are small integers plus the batch's mean label (synthetic_model.h),
// all exactly representable when the per-worker batch and N are powers of
// two, so N workers with batch b must end bit for bit where one worker with
// batch N·b ends: any lost, doubled, misplaced or stale chunk changes bits.
// Real processes, started by `gradsync launch`.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

constexpr int kBatch = 16;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

std::vector<std::string> ModelFlags() {
  // 7 tensors of unequal-to-a-power-of-two sizes, 64 KiB buckets (several
  // per tensor boundary), 12 steps with SGD momentum so a wrong step's
  // gradient persists.
  return {"--model=custom",     "--custom_params=300001",
          "--custom_tensors=7", "--compute_ms=5",
          "--data=synthetic",   "--synthetic_size=1024",
          "--epochs=10",        "--max_steps=12",
          "--progress=false",   "--bucket_mb=0.0625",
          "--lr=0.125",         "--momentum=0.5",
          "--timeout_s=60"};
}

struct Case {
  std::string name;
  int workers;
  int servers;  // separate server processes
  std::vector<std::string> flags;
  int ps_servers = 0;  // --sync=ps: all servers, colocated ones included
};

// The parameter servers' spans in the merged timeline: per server, worker,
// key and step, when the push arrived (first to last part) and when the
// result left (first write's start to last write's end).
struct ServerSpans {
  struct Span {
    int64_t begin = -1;
    int64_t end = -1;
  };
  // (server, worker, key, step) -> span
  std::map<std::tuple<int, int, int64_t, int64_t>, Span> push, result;
};

ServerSpans ReadServerSpans(const nlohmann::json& trace) {
  ServerSpans spans;
  // Begin and end pair by (pid, id); the name says what the span is.
  for (const nlohmann::json& event : trace["traceEvents"]) {
    const std::string category = event.value("cat", "");
    if (category != "ps server push" && category != "ps server result") {
      continue;
    }
    const std::string name = event.value("name", "");
    int server = -1, worker = -1;
    long long key = -1, step = -1;
    const bool is_push = category == "ps server push";
    const int fields = std::sscanf(
        name.c_str(),
        is_push ? "server %d: push from worker %d, key %lld, step %lld"
                : "server %d: result to worker %d, key %lld, step %lld",
        &server, &worker, &key, &step);
    EXPECT_EQ(fields, 4) << "unexpected span name: " << name;
    if (fields != 4) continue;
    ServerSpans::Span& span =
        (is_push ? spans.push : spans.result)[{server, worker, key, step}];
    const int64_t ts = event.value("ts", int64_t{-1});
    if (event.value("ph", "") == "b") span.begin = ts;
    if (event.value("ph", "") == "e") span.end = ts;
  }
  return spans;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SyntheticModelJobTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyntheticModelJobTest, AveragesExactlyLikeOneWorkerWithNTimesTheBatch) {
  const Case& c = GetParam();
  const std::string dir = absl::StrCat(TestTempDir(), "/", c.name);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;

  std::vector<std::string> reference = {
      "train", "--sync=local",
      absl::StrCat("--batch_size=", kBatch * c.workers),
      "--dump_params=" + dir + "/local"};
  for (const auto& f : ModelFlags()) reference.push_back(f);
  ProcessResult local = RunGradsync(reference);
  ASSERT_EQ(local.exit_code, 0) << local.output;

  std::vector<std::string> job = {"launch",
                                  absl::StrCat("--workers=", c.workers),
                                  absl::StrCat("--servers=", c.servers),
                                  "--run_dir=" + dir + "/run",
                                  "--job_deadline_s=200",
                                  "--",
                                  absl::StrCat("--batch_size=", kBatch),
                                  "--dump_params=" + dir + "/dist",
                                  "--trace=" + dir + "/trace.json",
                                  "--trace_steps=3"};
  for (const auto& f : ModelFlags()) job.push_back(f);
  for (const auto& f : c.flags) job.push_back(f);
  ProcessResult run = RunGradsync(job);
  ASSERT_EQ(run.exit_code, 0) << run.output;

  const std::string expected = ReadBytes(dir + "/local.worker0");
  ASSERT_EQ(expected.size(), 300001u * sizeof(float));
  for (int r = 0; r < c.workers; ++r) {
    const std::string got = ReadBytes(absl::StrCat(dir, "/dist.worker", r));
    ASSERT_EQ(got.size(), expected.size()) << "worker " << r;
    size_t first_difference = 0;
    while (first_difference < got.size() &&
           got[first_difference] == expected[first_difference]) {
      ++first_difference;
    }
    EXPECT_EQ(first_difference, got.size())
        << "worker " << r
        << " differs from the single-worker reference at parameter "
        << first_difference / sizeof(float);
  }
  // The timeline was written and merged: every worker's steps are in it.
  const nlohmann::json trace =
      nlohmann::json::parse(ReadBytes(dir + "/trace.json"));
  std::vector<bool> seen(c.workers, false);
  for (const nlohmann::json& event : trace["traceEvents"]) {
    const int pid = event.value("pid", -1);
    if (event.value("name", "") == "step 2" &&
        event.value("cat", "") == "step" && pid >= 0 && pid < c.workers) {
      seen[pid] = true;
    }
  }
  for (int r = 0; r < c.workers; ++r) {
    EXPECT_TRUE(seen[r]) << "worker " << r << " missing from the merged trace";
  }
  if (c.ps_servers == 0) return;
  // Every server's side is in it too (separate servers' own files, merged by
  // worker 0; colocated ones in their workers'), for the traced steps.
  const ServerSpans spans = ReadServerSpans(trace);
  std::set<std::tuple<int, int, int64_t>> pushed,
      answered;  // server, worker, step
  for (const auto& [id, push] : spans.push) {
    const auto& [server, worker, key, step] = id;
    ASSERT_GE(push.begin, 0) << "push span without its begin";
    ASSERT_GE(push.end, push.begin);
    pushed.insert({server, worker, step});
    // BSP, keys of one block (64 KiB chunks, 1 MiB messages): the result of
    // a key for a step leaves only after every worker's push of it arrived.
    auto result = spans.result.find(id);
    ASSERT_NE(result, spans.result.end())
        << "server " << server << " sent no result of key " << key << ", step "
        << step << " to worker " << worker;
    EXPECT_LE(push.end, result->second.begin)
        << "server " << server << ", worker " << worker << ", key " << key
        << ", step " << step << ": result started before the push ended";
    EXPECT_GE(result->second.end, result->second.begin);
  }
  for (const auto& [id, result] : spans.result) {
    answered.insert({std::get<0>(id), std::get<1>(id), std::get<3>(id)});
  }
  for (int server = 0; server < c.ps_servers; ++server) {
    for (int worker = 0; worker < c.workers; ++worker) {
      for (int64_t step = 0; step < 3; ++step) {
        EXPECT_TRUE(pushed.count({server, worker, step}))
            << "no push span of server " << server << " from worker " << worker
            << " at step " << step;
        EXPECT_TRUE(answered.count({server, worker, step}))
            << "no result span of server " << server << " to worker " << worker
            << " at step " << step;
      }
    }
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SyntheticModelJobTest,
    ::testing::Values(
        Case{"ring_4", 4, 0, {"--sync=ring", "--ring_chunk_kb=16"}},
        Case{"ps_4x2", 4, 2, {"--sync=ps", "--ps_chunk_kb=64"}, 2},
        Case{"ps_colocated_2",
             2,
             0,
             {"--sync=ps", "--ps_colocate", "--ps_chunk_kb=64"},
             2},
        // BytePS's spectrum: workers 0 and 1 serve, plus one separate
        // server (K = 3); server-side optimizer, so the colocated shards
        // hold parameters too.
        Case{"ps_mixed_4_2plus1",
             4,
             1,
             {"--sync=ps", "--ps_colocated_servers=2", "--ps_chunk_kb=64",
              "--ps_update=server"},
             3}),
    CaseName);

}  // namespace
}  // namespace gradsync
