// A timeline recorder writing the Chrome trace event format (the JSON that
// https://ui.perfetto.dev and chrome://tracing open): complete spans,
// asynchronous spans that may overlap (a bucket in flight while backward
// goes on) and instants, on named tracks of one process per rank.
//
// Recording is a timestamp and a push under a mutex, so it is cheap enough
// for per-tensor spans; the number of events is capped so a long run cannot
// grow without bound (the file then says how many were dropped).
//
// The trainer owns the recorder of its process and publishes it through
// CurrentTrace(), so a strategy can add its own spans — for example each
// bucket's all-reduce on its communication thread — without any change to
// the GradientSync interface:
//
//   if (TraceRecorder* trace = CurrentTrace()) {
//     const int64_t start = trace->NowMicros();
//     ...
//     trace->Complete("allreduce bucket 3", "comm", kTrackCommunication, start,
//                     trace->NowMicros() - start);
//   }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json_fwd.hpp"

namespace gradsync {

// Tracks (Chrome's "tid") every rank uses, so the timelines of all ranks
// line up in one view.
inline constexpr int kTrackStep = 0;           // whole steps, data, optimizer
inline constexpr int kTrackCompute = 1;        // forward/backward per tensor
inline constexpr int kTrackCommunication = 2;  // Finish wait, strategy spans

class TraceRecorder {
 public:
  // `process_id` is the Chrome "pid" (the rank; servers use 1000 + k) and
  // `process_name` its label ("worker 0").
  TraceRecorder(int process_id, std::string process_name,
                int64_t max_events = 1'000'000);

  // Wall-clock microseconds since the Unix epoch: the same clock in every
  // process, so traces of several ranks (and hosts kept in sync by NTP)
  // can be merged.
  static int64_t NowMicros();

  void NameTrack(int track, absl::string_view name);
  // A span [start_us, start_us + duration_us) on `track`. Spans on one track
  // must nest; use the async calls for spans that overlap.
  void Complete(absl::string_view name, absl::string_view category, int track,
                int64_t start_us, int64_t duration_us);
  // A span that may overlap others; `id` pairs begin and end.
  void AsyncSpan(absl::string_view name, absl::string_view category, int64_t id,
                 int64_t start_us, int64_t end_us);
  void Instant(absl::string_view name, absl::string_view category, int track,
               int64_t time_us);

  // The events as a JSON document {"traceEvents": [...], ...}.
  std::string ToJson() const;
  absl::Status WriteJson(const std::string& path) const;
  int64_t size() const;
  int64_t dropped() const;

 private:
  void Push(const nlohmann::json& event);

  const int process_id_;
  const std::string process_name_;
  const int64_t max_events_;
  mutable absl::Mutex mu_;
  // Serialized JSON objects, in order.
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// The recorder of this process, or null when --trace is off.
TraceRecorder* CurrentTrace();
void SetCurrentTrace(TraceRecorder* trace);

// Merges the per-rank trace files written by WriteJson into one document
// (each rank keeps its own pid), so one Perfetto view shows the whole job.
absl::Status MergeTraceFiles(const std::vector<std::string>& inputs,
                             const std::string& output);

// "<path>.worker3.json" for path "<path>.json" (or "<path>" without the
// extension): where rank `rank`'s trace goes when --trace=<path>.
std::string RankTracePath(const std::string& path, absl::string_view role,
                          int rank);

}  // namespace gradsync
