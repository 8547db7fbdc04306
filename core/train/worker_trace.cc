// A worker's --trace timeline and the job's merged one (worker_trace.h).
#include "core/train/worker_trace.h"

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {

std::unique_ptr<TraceRecorder> StartWorkerTrace(int rank) {
  auto trace =
      std::make_unique<TraceRecorder>(rank, absl::StrCat("worker ", rank));
  trace->NameTrack(kTrackStep, "step");
  trace->NameTrack(kTrackCompute, "compute (forward, backward per tensor)");
  trace->NameTrack(kTrackCommunication, "communication");
  SetCurrentTrace(trace.get());
  return trace;
}

absl::StatusOr<std::string> WriteWorkerTrace(TraceRecorder& trace,
                                             const std::string& path,
                                             int rank) {
  SetCurrentTrace(nullptr);
  const std::string mine = RankTracePath(path, "worker", rank);
  RETURN_IF_ERROR(
      Annotate(trace.WriteJson(mine), "writing the --trace timeline"));
  if (trace.dropped() > 0) {
    GS_LOG(WARNING) << "trace: " << trace.dropped()
                    << " events dropped over the cap; lower --trace_steps";
  }
  return mine;
}

void MergeJobTrace(const std::vector<std::string>& files,
                   const std::string& path) {
  const absl::Status merged = MergeTraceFiles(files, path);
  if (merged.ok()) {
    GS_LOG(INFO) << "timeline of " << files.size() << " process(es): " << path
                 << " (open in https://ui.perfetto.dev)";
  } else {
    GS_LOG(WARNING) << "per-rank timelines written (" << files.front()
                    << ", ...) but not merged: " << merged.message();
  }
}

}  // namespace gradsync
