#include "sim/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace sim {
namespace {

struct Tensor {
  int64_t bytes;
  double ready_ms;
  int index;  // in registration order
};

// Tensors in backward's order into buckets of at least `bucket_bytes` (the
// last may be smaller), each ready when its latest tensor is.
std::vector<Bucket> CutIntoBuckets(const std::vector<Tensor>& tensors,
                                   int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  Bucket open;
  for (const Tensor& tensor : tensors) {
    if (open.bytes == 0) open.end_tensor = tensor.index + 1;
    open.first_tensor = tensor.index;
    open.bytes += tensor.bytes;
    open.ready_ms = std::max(open.ready_ms, tensor.ready_ms);
    if (open.bytes >= bucket_bytes) {
      buckets.push_back(open);
      open = Bucket();
    }
  }
  if (open.bytes > 0) buckets.push_back(open);
  return buckets;
}

}  // namespace

absl::StatusOr<StepProfile> ParseProfile(const std::string& json_text,
                                         int64_t bucket_bytes,
                                         const std::string& source) {
  const nlohmann::json root =
      nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is not a JSON object; a profile has forward_ms, "
                             "backward_ms, optimizer_ms and params"));
  }
  StepProfile profile;
  for (const char* key : {"forward_ms", "backward_ms", "optimizer_ms"}) {
    if (!root.contains(key) || !root[key].is_number() || root[key] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": '", key, "' is missing or not a number of at least 0"));
    }
  }
  profile.forward_ms = root["forward_ms"];
  profile.backward_ms = root["backward_ms"];
  profile.optimizer_ms = root["optimizer_ms"];
  profile.name = absl::StrCat(root.value("model", "model"), "-b",
                              root.value("batch", 0), "-",
                              root.value("precision", "fp32"));
  if (!root.contains("params") || !root["params"].is_array() ||
      root["params"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " has no params: it needs every parameter tensor with numel "
                "and ready_ms, to make the buckets from"));
  }
  std::vector<Tensor> tensors;
  for (const nlohmann::json& param : root["params"]) {
    if (!param.is_object() || !param.contains("numel") ||
        !param["numel"].is_number_integer() || param["numel"] <= 0 ||
        !param.contains("ready_ms") || !param["ready_ms"].is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": param ", tensors.size(),
          " needs a positive integer numel and a number ready_ms"));
    }
    tensors.push_back({4 * param["numel"].get<int64_t>(),
                       param["ready_ms"].get<double>(),
                       static_cast<int>(tensors.size())});
    profile.gradient_bytes += tensors.back().bytes;
    profile.tensor_bytes.push_back(tensors.back().bytes);
  }
  // Backward produces the last registered tensors first.
  std::reverse(tensors.begin(), tensors.end());
  profile.buckets = CutIntoBuckets(tensors, bucket_bytes);
  return profile;
}

namespace {

bool ReadText(const std::string& path, std::string* text) {
  std::ifstream file(path);
  if (!file) return false;
  std::stringstream buffer;
  buffer << file.rdbuf();
  *text = buffer.str();
  return true;
}

bool IsEvent(const nlohmann::json& event, const char* phase,
             const char* category, int64_t pid) {
  return event.is_object() && event.value("ph", "") == phase &&
         event.value("cat", "") == category && event.contains("ts") &&
         event["ts"].is_number() && event.value("pid", int64_t{-1}) == pid;
}

}  // namespace

absl::StatusOr<StepProfile> ParseRunTrace(const std::string& trace_json,
                                          const std::string& layout_json,
                                          const std::string& source) {
  const nlohmann::json root =
      nlohmann::json::parse(trace_json, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("traceEvents") ||
      !root["traceEvents"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": its trace is not a Chrome trace (a JSON object with "
                "traceEvents)"));
  }
  const nlohmann::json& events = root["traceEvents"];
  // Worker 0, or the lowest worker in the file (servers are 1000 + k).
  int64_t pid = -1;
  for (const nlohmann::json& event : events) {
    if (!event.is_object() || event.value("cat", "") != "step") continue;
    const int64_t p = event.value("pid", int64_t{-1});
    if (p >= 0 && p < 1000 && (pid < 0 || p < pid)) pid = p;
  }
  // Every traced step of that worker, as offsets from its forward+backward
  // span's start.
  struct TracedStep {
    int64_t compute_start = -1, compute_us = 0, optimizer_us = 0;
    std::map<int, int64_t> ready_us;  // bucket index -> hand-off
    std::map<int, double> span_mib;   // bucket index -> the span's MiB
  };
  std::vector<std::pair<int64_t, int64_t>> bounds;  // each step's [begin, end]
  for (const nlohmann::json& event : events) {
    if (IsEvent(event, "X", "step", pid)) {
      const int64_t begin = event["ts"].get<int64_t>();
      bounds.push_back({begin, begin + event.value("dur", int64_t{0})});
    }
  }
  if (bounds.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": its trace has no step spans (a worker's \"step N\"): was "
                "it written by gradsync --trace?"));
  }
  std::sort(bounds.begin(), bounds.end());
  // One pass over the events: each belongs to the step that began last at
  // or before it, if it falls inside that step (one worker's steps do not
  // overlap).
  std::vector<TracedStep> steps(bounds.size());
  for (const nlohmann::json& event : events) {
    if (!event.is_object() || !event.contains("ts") ||
        !event["ts"].is_number() || event.value("pid", int64_t{-1}) != pid) {
      continue;
    }
    const int64_t ts = event["ts"].get<int64_t>();
    auto after = std::upper_bound(
        bounds.begin(), bounds.end(), ts,
        [](int64_t t, const std::pair<int64_t, int64_t>& b) {
          return t < b.first;
        });
    if (after == bounds.begin() || ts > std::prev(after)->second) continue;
    TracedStep& step = steps[std::prev(after) - bounds.begin()];
    if (IsEvent(event, "X", "compute", pid) &&
        event.value("name", "") == "forward+backward") {
      step.compute_start = ts;
      step.compute_us = event.value("dur", int64_t{0});
    } else if (IsEvent(event, "X", "optimizer", pid)) {
      step.optimizer_us = event.value("dur", int64_t{0});
    } else if (IsEvent(event, "b", "bucket", pid)) {
      int index = -1;
      double mib = 0;
      const std::string name = event.value("name", "");
      if (std::sscanf(name.c_str(), "bucket %d (%lf MiB)", &index, &mib) == 2 &&
          index >= 0) {
        step.ready_us[index] = ts;
        step.span_mib[index] = mib;
      }
    }
  }
  // The last step decides which buckets a step has; the steps that have
  // those and a forward+backward span are averaged by their median, so one
  // step that a hiccup of the machine slowed does not become the profile.
  const TracedStep& last = steps.back();
  if (last.ready_us.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": its trace's last step (worker ", pid,
        ") has no bucket spans (\"bucket B (M MiB): handed off ...\"), so "
        "there are no buckets to synchronize"));
  }
  if (last.compute_start < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": its trace's last step has no forward+backward span"));
  }
  auto same_buckets = [&](const TracedStep& step) {
    if (step.compute_start < 0 || step.ready_us.size() != last.ready_us.size())
      return false;
    for (const auto& [index, ts] : last.ready_us) {
      if (step.ready_us.count(index) == 0) return false;
    }
    return true;
  };
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  };
  std::vector<double> compute, optimizer;
  std::map<int, std::vector<double>> offsets;  // bucket -> its hand-offs
  for (const TracedStep& step : steps) {
    if (!same_buckets(step)) continue;
    compute.push_back(static_cast<double>(step.compute_us));
    optimizer.push_back(static_cast<double>(step.optimizer_us));
    for (const auto& [index, ts] : step.ready_us) {
      offsets[index].push_back(
          static_cast<double>(std::max<int64_t>(0, ts - step.compute_start)));
    }
  }
  const double compute_us = median(compute);
  const double optimizer_us = median(optimizer);
  const std::map<int, double>& span_mib = last.span_mib;
  std::map<int, int64_t> layout_bytes;
  if (!layout_json.empty()) {
    const nlohmann::json layout =
        nlohmann::json::parse(layout_json, nullptr, false);
    if (!layout.is_object() || !layout.contains("buckets") ||
        !layout["buckets"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": its layout.json has no buckets array"));
    }
    for (const nlohmann::json& bucket : layout["buckets"]) {
      if (bucket.is_object() && bucket.contains("index") &&
          bucket.contains("bytes") && bucket["bytes"].is_number_integer()) {
        layout_bytes[bucket["index"].get<int>()] = bucket["bytes"];
      }
    }
  }
  StepProfile profile;
  profile.name = "run";
  profile.forward_ms = 0;
  profile.backward_ms = compute_us / 1e3;
  profile.optimizer_ms = optimizer_us / 1e3;
  profile.traced_steps = static_cast<int>(compute.size());
  // Buckets in the order they were handed off (their median offsets); each
  // one tensor.
  std::vector<std::pair<double, int>> order;
  for (const auto& [index, values] : offsets) {
    order.push_back({median(values), index});
  }
  std::sort(order.begin(), order.end());
  const int count = static_cast<int>(order.size());
  for (int i = 0; i < count; ++i) {
    const int index = order[i].second;
    Bucket bucket;
    auto exact = layout_bytes.find(index);
    bucket.bytes = exact != layout_bytes.end()
                       ? exact->second
                       : 4 * std::llround(span_mib.at(index) * 1048576.0 / 4);
    if (bucket.bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": bucket ", index, " has no bytes in the trace or layout"));
    }
    bucket.ready_ms = order[i].first / 1e3;
    // Registration order runs opposite to backward's: the first bucket
    // handed off holds the last tensor.
    bucket.first_tensor = count - 1 - i;
    bucket.end_tensor = count - i;
    profile.buckets.push_back(bucket);
    profile.gradient_bytes += bucket.bytes;
  }
  profile.tensor_bytes.resize(count);
  for (int i = 0; i < count; ++i) {
    profile.tensor_bytes[count - 1 - i] = profile.buckets[i].bytes;
  }
  return profile;
}

absl::StatusOr<StepProfile> ReadRunProfile(const std::string& folder) {
  std::string trace, layout;
  if (!ReadText(folder + "/trace.json", &trace) &&
      !ReadText(folder + "/trace.worker0.json", &trace)) {
    return absl::NotFoundError(absl::StrCat(
        "--profile=", folder, ": the run folder has no trace (trace.json or "
        "trace.worker0.json); run it with --trace=", folder, "/trace.json"));
  }
  ReadText(folder + "/layout.json", &layout);
  absl::StatusOr<StepProfile> profile =
      ParseRunTrace(trace, layout, "--profile=" + folder);
  if (profile.ok()) {
    std::string name = folder;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    profile->name = "run:" + name.substr(name.find_last_of('/') + 1);
  }
  return profile;
}

StepProfile CustomProfile(int64_t gradient_bytes, int tensors,
                          int64_t bucket_bytes) {
  StepProfile profile;
  profile.name = absl::StrCat("custom-", gradient_bytes, "B");
  profile.gradient_bytes = gradient_bytes;
  std::vector<Tensor> all(tensors, Tensor{gradient_bytes / tensors, 0.0, 0});
  // The remainder on the first registered tensor, the last one backward
  // makes ready.
  all.front().bytes += gradient_bytes % tensors;
  for (int i = 0; i < tensors; ++i) {
    all[i].index = i;
    profile.tensor_bytes.push_back(all[i].bytes);
  }
  // Backward's order: the last registered first.
  std::reverse(all.begin(), all.end());
  profile.buckets = CutIntoBuckets(all, bucket_bytes);
  return profile;
}

}  // namespace sim
}  // namespace gradsync
