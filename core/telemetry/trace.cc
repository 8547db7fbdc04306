// The timeline recorder (see trace.h).
#include "core/telemetry/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/files.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

std::atomic<TraceRecorder*> g_current_trace{nullptr};

}  // namespace

TraceRecorder::TraceRecorder(int process_id, std::string process_name,
                             int64_t max_events)
    : process_id_(process_id),
      process_name_(std::move(process_name)),
      max_events_(max_events) {
  Push({{"ph", "M"},
        {"name", "process_name"},
        {"pid", process_id_},
        {"args", {{"name", process_name_}}}});
  Push({{"ph", "M"},
        {"name", "process_sort_index"},
        {"pid", process_id_},
        {"args", {{"sort_index", process_id_}}}});
}

int64_t TraceRecorder::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void TraceRecorder::NameTrack(int track, absl::string_view name) {
  Push({{"ph", "M"},
        {"name", "thread_name"},
        {"pid", process_id_},
        {"tid", track},
        {"args", {{"name", std::string(name)}}}});
}

void TraceRecorder::Complete(absl::string_view name, absl::string_view category,
                             int track, int64_t start_us, int64_t duration_us) {
  Push({{"ph", "X"},
        {"name", std::string(name)},
        {"cat", std::string(category)},
        {"pid", process_id_},
        {"tid", track},
        {"ts", start_us},
        {"dur", std::max<int64_t>(0, duration_us)}});
}

void TraceRecorder::AsyncSpan(absl::string_view name,
                              absl::string_view category, int64_t id,
                              int64_t start_us, int64_t end_us) {
  // Nestable async events ("b"/"e") get their own rows in Perfetto, under
  // the process, whatever else overlaps them.
  nlohmann::json event = {{"name", std::string(name)},
                          {"cat", std::string(category)},
                          {"pid", process_id_},
                          {"tid", kTrackCommunication},
                          {"id", id}};
  event["ph"] = "b";
  event["ts"] = start_us;
  Push(event);
  event["ph"] = "e";
  event["ts"] = std::max(start_us, end_us);
  Push(event);
}

void TraceRecorder::Instant(absl::string_view name, absl::string_view category,
                            int track, int64_t time_us) {
  Push({{"ph", "i"},
        {"s", "t"},
        {"name", std::string(name)},
        {"cat", std::string(category)},
        {"pid", process_id_},
        {"tid", track},
        {"ts", time_us}});
}

void TraceRecorder::Push(const nlohmann::json& event) {
  // Kept serialized: a few dozen bytes an event instead of a tree of nodes.
  // Names may carry user input (paths, job ids): invalid UTF-8 becomes U+FFFD
  // rather than an exception on the training thread.
  std::string text =
      event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(events_.size()) >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(text));
}

std::string TraceRecorder::ToJson() const {
  nlohmann::json events = nlohmann::json::array();
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& event : events_) {
      events.push_back(nlohmann::json::parse(event));
    }
  }
  const nlohmann::json document = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"process", process_name_}, {"dropped_events", dropped()}}},
  };
  // One event per line, so that a long trace can still be read with a pager.
  return document.dump(1, ' ', false,
                       nlohmann::json::error_handler_t::replace) +
         "\n";
}

absl::Status TraceRecorder::WriteJson(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

int64_t TraceRecorder::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(events_.size());
}

int64_t TraceRecorder::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

TraceRecorder* CurrentTrace() {
  return g_current_trace.load(std::memory_order_acquire);
}

void SetCurrentTrace(TraceRecorder* trace) {
  g_current_trace.store(trace, std::memory_order_release);
}

absl::Status MergeTraceFiles(const std::vector<std::string>& inputs,
                             const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  for (const std::string& input : inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in)
      return absl::NotFoundError(absl::StrCat("cannot read trace ", input));
    const nlohmann::json trace =
        nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (trace.is_discarded() || !trace.is_object() ||
        !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
      return absl::DataLossError(absl::StrCat(
          "trace ", input, " is not a Chrome trace (no traceEvents array)"));
    }
    for (const nlohmann::json& event : trace["traceEvents"])
      events.push_back(event);
  }
  const nlohmann::json merged = {{"traceEvents", std::move(events)},
                                 {"displayTimeUnit", "ms"}};
  return WriteFileAtomically(output, merged.dump(1) + "\n");
}

std::string RankTracePath(const std::string& path, absl::string_view role,
                          int rank) {
  std::string stem = path;
  if (absl::EndsWith(stem, ".json")) stem.resize(stem.size() - 5);
  return absl::StrCat(stem, ".", role, rank, ".json");
}

}  // namespace gradsync
