// What every test of a whole job checks at its end, however the job was
// started (gradsync launch, processes with a launcher's variables, mpirun,
// srun): the summary worker 0 gathered names N workers and K servers and the
// ranks 0..N-1, every server ended with its summary, and every worker's
// final parameters (--dump_params) are the same bytes.
#pragma once

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// The ranks of the `gradsync server` processes that printed a successful
// summary line ("event": "ps_server_summary", "ok": true) into `output`,
// sorted: {0, ..., K-1} when every server of the job finished.
inline std::vector<int> FinishedServerRanks(const std::string& output) {
  std::vector<int> ranks;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const size_t brace = line.find('{');
    if (brace == absl::string_view::npos) continue;
    const nlohmann::json event =
        nlohmann::json::parse(line.substr(brace), nullptr, false);
    if (!event.is_discarded() && event.is_object() &&
        event.value("event", "") == "ps_server_summary" &&
        event.value("ok", false) && event.contains("summary") &&
        event["summary"].is_object()) {
      ranks.push_back(event["summary"].value("server", -1));
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// `summary_dir` holds worker 0's summary.json; `dump_prefix` is the
// --dump_params every worker was given.
inline void ExpectFinishedJob(const std::string& summary_dir,
                              const std::string& dump_prefix, int workers,
                              int servers) {
  const std::string text = ReadWholeFile(summary_dir + "/summary.json");
  ASSERT_FALSE(text.empty()) << "no " << summary_dir << "/summary.json";
  const nlohmann::json summary = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << text;
  EXPECT_EQ(summary["workers"], workers);
  EXPECT_EQ(summary["servers"], servers);
  ASSERT_EQ(summary["ranks"].size(), static_cast<size_t>(workers));
  for (int r = 0; r < workers; ++r) {
    EXPECT_EQ(summary["ranks"][r]["rank"], r);
  }
  const std::string reference =
      ReadWholeFile(absl::StrCat(dump_prefix, ".worker0"));
  ASSERT_FALSE(reference.empty()) << "no parameters from worker 0";
  for (int r = 1; r < workers; ++r) {
    EXPECT_TRUE(ReadWholeFile(absl::StrCat(dump_prefix, ".worker", r)) ==
                reference)
        << "worker " << r << "'s final parameters differ from worker 0's";
  }
}

}  // namespace gradsync
