#include "core/telemetry/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/telemetry/process_counters.h"

namespace gradsync {
namespace {

using Json = nlohmann::ordered_json;

double Round3(double x) {
  return static_cast<int64_t>(x * 1000 + (x >= 0 ? 0.5 : -0.5)) / 1000.0;
}

absl::Status MakeDirs(const std::string& dir) {
  std::string partial;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0 &&
          errno != EEXIST) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create metrics folder ", partial, ": ",
                         std::strerror(errno)));
      }
    }
    if (i < dir.size()) partial += dir[i];
  }
  return absl::OkStatus();
}

}  // namespace

void RankTotals::Add(const StepRecord& record, int64_t samples_in_step,
                     bool measured) {
  ++steps;
  bytes_sent += record.bytes_sent;
  bytes_recv += record.bytes_recv;
  if (!measured) return;
  ++measured_steps;
  step_ms += record.step_ms;
  compute_ms += record.compute_ms;
  sync_wait_ms += record.sync_wait_ms;
  samples += samples_in_step;
  seconds += record.step_ms / 1000.0;
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(
    const std::string& dir, int rank) {
  std::unique_ptr<MetricsWriter> writer(new MetricsWriter);
  if (dir.empty()) return writer;
  absl::Status made = MakeDirs(dir);
  if (!made.ok()) return made;
  writer->path_ = absl::StrCat(dir, "/worker", rank, ".jsonl");
  writer->file_ = fopen(writer->path_.c_str(), "w");
  if (writer->file_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write metrics file ", writer->path_, ": ",
                     std::strerror(errno)));
  }
  return writer;
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) fclose(file_);
}

void MetricsWriter::WriteLine(const std::string& line) {
  if (file_ == nullptr) return;
  fwrite(line.data(), 1, line.size(), file_);
  fputc('\n', file_);
  fflush(file_);
}

void MetricsWriter::WriteStep(const StepRecord& r) {
  if (file_ == nullptr) return;
  Json j;
  j["type"] = "step";
  j["rank"] = r.rank;
  j["step"] = r.step;
  j["epoch"] = r.epoch;
  j["loss"] = r.loss;
  j["step_ms"] = Round3(r.step_ms);
  j["compute_ms"] = Round3(r.compute_ms);
  j["sync_wait_ms"] = Round3(r.sync_wait_ms);
  j["bytes_sent"] = r.bytes_sent;
  j["bytes_recv"] = r.bytes_recv;
  j["samples_per_s"] = Round3(r.samples_per_s);
  for (const auto& kv : r.extra) j[kv.first] = Round3(kv.second);
  WriteLine(j.dump());
}

void MetricsWriter::WriteEpoch(const EpochRecord& r) {
  if (file_ == nullptr) return;
  Json j;
  j["type"] = "epoch";
  j["rank"] = r.rank;
  j["epoch"] = r.epoch;
  j["steps"] = r.steps;
  j["loss"] = r.mean_loss;
  j["seconds"] = Round3(r.seconds);
  j["samples_per_s"] = Round3(r.samples_per_s);
  if (r.test_accuracy >= 0) j["test_accuracy"] = r.test_accuracy;
  WriteLine(j.dump());
}

void MetricsWriter::WriteEval(const EvalRecord& r) {
  if (file_ == nullptr) return;
  Json j;
  j["type"] = "eval";
  j["step"] = r.step;
  j["seconds"] = Round3(r.seconds);
  j["eval_seconds"] = Round3(r.eval_seconds);
  j["test_accuracy"] = r.test_accuracy;
  WriteLine(j.dump());
}

std::string RankSummaryJson(int rank, const RankTotals& t,
                            const std::string& sync_json) {
  const double n = t.measured_steps > 0 ? t.measured_steps : 1;
  Json j;
  j["rank"] = rank;
  j["steps"] = t.steps;
  j["measured_steps"] = t.measured_steps;
  j["step_ms"] = Round3(t.step_ms / n);
  j["compute_ms"] = Round3(t.compute_ms / n);
  j["sync_wait_ms"] = Round3(t.sync_wait_ms / n);
  j["bytes_sent_per_step"] = t.steps > 0 ? t.bytes_sent / t.steps : 0;
  j["bytes_recv_per_step"] = t.steps > 0 ? t.bytes_recv / t.steps : 0;
  j["samples_per_s"] = Round3(t.seconds > 0 ? t.samples / t.seconds : 0);
  j["sync"] = Json::parse(sync_json, nullptr, /*allow_exceptions=*/false);
  if (j["sync"].is_discarded()) j["sync"] = Json::object();
  // CPU seconds and TCP retransmissions/timeouts, read now: the summary is
  // written once, at the end of the run.
  j["process"] = Json::parse(ProcessCountersJson());
  return j.dump();
}

std::string RunSummaryJson(const std::string& manifest_json,
                           const std::vector<std::string>& rank_jsons,
                           const std::string& strategy, int world_size,
                           int num_servers, const std::string& model,
                           double final_accuracy, double wall_seconds) {
  Json ranks = Json::array();
  double step_ms = 0, compute_ms = 0, wait_ms = 0, throughput = 0;
  int64_t bytes = 0;
  for (const std::string& text : rank_jsons) {
    Json r = Json::parse(text, nullptr, false);
    if (r.is_discarded()) continue;
    step_ms += r.value("step_ms", 0.0);
    compute_ms += r.value("compute_ms", 0.0);
    wait_ms += r.value("sync_wait_ms", 0.0);
    throughput += r.value("samples_per_s", 0.0);
    bytes += r.value("bytes_sent_per_step", int64_t{0}) +
             r.value("bytes_recv_per_step", int64_t{0});
    ranks.push_back(std::move(r));
  }
  const double n = ranks.empty() ? 1 : ranks.size();
  Json j;
  j["type"] = "summary";
  j["strategy"] = strategy;
  j["workers"] = world_size;
  j["servers"] = num_servers;
  j["model"] = model;
  j["step_ms"] = Round3(step_ms / n);
  j["compute_ms"] = Round3(compute_ms / n);
  j["sync_wait_ms"] = Round3(wait_ms / n);
  j["bytes_per_worker_per_step"] = static_cast<int64_t>(bytes / n);
  j["samples_per_s"] = Round3(throughput);
  if (final_accuracy >= 0) j["test_accuracy"] = final_accuracy;
  j["wall_seconds"] = Round3(wall_seconds);
  j["ranks"] = ranks;
  j["manifest"] = Json::parse(manifest_json, nullptr, false);
  return j.dump(2);
}

}  // namespace gradsync
