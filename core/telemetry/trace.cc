// The timeline recorder (see trace.h).
#include "core/base/files.h"
#include "core/telemetry/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/telemetry/metrics.h"

namespace gradsync {
namespace {

std::atomic<TraceRecorder*> g_current_trace{nullptr};

// The file layout WriteJson uses: the header line, one event per line, the
// footer. MergeTraceFiles relies on it to find the events without a parser.
constexpr char kHeader[] = "{\"traceEvents\": [\n";
constexpr char kFooterStart[] = "\n],";

std::string Escape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

TraceRecorder::TraceRecorder(int process_id, std::string process_name,
                             int64_t max_events)
    : process_id_(process_id),
      process_name_(std::move(process_name)),
      max_events_(max_events) {
  Push(absl::StrFormat(
      R"({"ph": "M", "name": "process_name", "pid": %d, "args": {"name": "%s"}})",
      process_id_, Escape(process_name_)));
  Push(absl::StrFormat(
      R"({"ph": "M", "name": "process_sort_index", "pid": %d, "args": {"sort_index": %d}})",
      process_id_, process_id_));
}

int64_t TraceRecorder::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void TraceRecorder::NameTrack(int track, absl::string_view name) {
  Push(absl::StrFormat(
      R"({"ph": "M", "name": "thread_name", "pid": %d, "tid": %d, "args": {"name": "%s"}})",
      process_id_, track, Escape(name)));
}

void TraceRecorder::Complete(absl::string_view name, absl::string_view category,
                             int track, int64_t start_us, int64_t duration_us) {
  Push(absl::StrFormat(
      R"({"ph": "X", "name": "%s", "cat": "%s", "pid": %d, "tid": %d, "ts": %d, "dur": %d})",
      Escape(name), Escape(category), process_id_, track, start_us,
      std::max<int64_t>(0, duration_us)));
}

void TraceRecorder::AsyncSpan(absl::string_view name, absl::string_view category,
                              int64_t id, int64_t start_us, int64_t end_us) {
  // Nestable async events ("b"/"e") get their own rows in Perfetto, under
  // the process, whatever else overlaps them.
  const std::string common = absl::StrFormat(
      R"("name": "%s", "cat": "%s", "pid": %d, "tid": %d, "id": %d)",
      Escape(name), Escape(category), process_id_, kTrackCommunication, id);
  Push(absl::StrCat(R"({"ph": "b", )", common, ", \"ts\": ", start_us, "}"));
  Push(absl::StrCat(R"({"ph": "e", )", common, ", \"ts\": ", std::max(start_us, end_us), "}"));
}

void TraceRecorder::Instant(absl::string_view name, absl::string_view category,
                            int track, int64_t time_us) {
  Push(absl::StrFormat(
      R"({"ph": "i", "s": "t", "name": "%s", "cat": "%s", "pid": %d, "tid": %d, "ts": %d})",
      Escape(name), Escape(category), process_id_, track, time_us));
}

void TraceRecorder::Push(std::string event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(events_.size()) >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

std::string TraceRecorder::EventsJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrJoin(events_, ",\n");
}

std::string TraceRecorder::ToJson() const {
  const std::string events = EventsJson();
  return absl::StrCat(kHeader, events, kFooterStart,
                      R"( "displayTimeUnit": "ms", "otherData": {"process": ")",
                      Escape(process_name_), R"(", "dropped_events": )", dropped(),
                      "}}\n");
}

absl::Status TraceRecorder::WriteJson(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

int64_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(events_.size());
}

int64_t TraceRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

TraceRecorder* CurrentTrace() { return g_current_trace.load(std::memory_order_acquire); }

void SetCurrentTrace(TraceRecorder* trace) {
  g_current_trace.store(trace, std::memory_order_release);
}

absl::Status MergeTraceFiles(const std::vector<std::string>& inputs,
                             const std::string& output) {
  std::vector<std::string> parts;
  for (const std::string& input : inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read trace ", input));
    const std::string text((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    const size_t footer = text.rfind(kFooterStart);
    if (!absl::StartsWith(text, kHeader) || footer == std::string::npos) {
      return absl::DataLossError(absl::StrCat(
          "trace ", input, " is not a file written by gradsync's TraceRecorder"));
    }
    const size_t begin = sizeof(kHeader) - 1;
    if (footer > begin) parts.push_back(text.substr(begin, footer - begin));
  }
  return WriteFileAtomically(
      output, absl::StrCat(kHeader, absl::StrJoin(parts, ",\n"), kFooterStart,
                           R"( "displayTimeUnit": "ms"})", "\n"));
}

std::string RankTracePath(const std::string& path, absl::string_view role,
                          int rank) {
  std::string stem = path;
  if (absl::EndsWith(stem, ".json")) stem.resize(stem.size() - 5);
  return absl::StrCat(stem, ".", role, rank, ".json");
}

}  // namespace gradsync
