#include "sim/model_constants.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace sim {

// Written by the genrule in sim/BUILD from sim/constants.json.
extern const char kFittedModelConstantsJson[];

namespace {

absl::Status Read(const nlohmann::json& constants, const char* name,
                  double scale, bool factor, const std::string& source,
                  double* value) {
  if (!constants.contains(name)) return absl::OkStatus();
  const nlohmann::json& entry = constants[name];
  const nlohmann::json& number =
      entry.is_object() && entry.contains("value") ? entry["value"] : entry;
  if (!number.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": constant ", name, " has no numeric value"));
  }
  const double read = number.get<double>();
  if (factor ? !(read > 0) : !(read >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": constant ", name, " = ", read, ": give ",
                     factor ? "a factor above 0" : "an overhead of 0 or more"));
  }
  *value = read * scale;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConstants> ParseModelConstants(const std::string& json,
                                                   const std::string& source) {
  const nlohmann::json document =
      nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_object() ||
      !document.contains("constants") || !document["constants"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a constants file (a JSON object with \"constants\", "
                "like sim/constants.json)"));
  }
  const nlohmann::json& constants = document["constants"];
  ModelConstants parsed;
  double cores = 0;
  // Every constant a file may give: its name, the unit it is read in (us
  // to seconds), whether it is a factor (above 0) or an amount (0 or more),
  // and where it goes. A constant the file leaves out keeps its neutral
  // value; the ring's CPU time, left out, is a peer exchange's (below).
  struct Field {
    const char* name;
    double scale;
    bool factor;
    double* value;
  };
  const Field fields[] = {
      {"bandwidth_factor", 1, true, &parsed.bandwidth_factor},
      {"latency_factor", 1, true, &parsed.latency_factor},
      {"tcp_message_overhead_us", 1e-6, false, &parsed.tcp_message_overhead_s},
      {"grpc_message_overhead_us", 1e-6, false,
       &parsed.grpc_message_overhead_s},
      {"message_cpu_us", 1e-6, false, &parsed.message_cpu_s},
      {"message_wake_us", 1e-6, false, &parsed.message_wake_s},
      {"ring_message_cpu_us", 1e-6, false, &parsed.ring_message_cpu_s},
      {"ring_step_overhead_us", 1e-6, false, &parsed.ring_step_overhead_s},
      {"cpu_cores", 1, false, &cores},
      {"link_burst_bytes", 1, false, &parsed.link_burst_bytes},
  };
  for (const auto& [key, unused] : constants.items()) {
    bool known = false;
    for (const Field& field : fields) known = known || key == field.name;
    if (!known) {
      std::string names;
      for (const Field& field : fields) {
        absl::StrAppend(&names, names.empty() ? "" : ", ", field.name);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": unknown constant ", key, " (", names, ")"));
    }
  }
  for (const Field& field : fields) {
    absl::Status status = Read(constants, field.name, field.scale,
                               field.factor, source, field.value);
    if (!status.ok()) return status;
  }
  if (parsed.ring_message_cpu_s < 0) {
    parsed.ring_message_cpu_s = parsed.message_cpu_s;
  }
  parsed.cpu_cores = static_cast<int>(cores);
  const char* needs_cores = parsed.message_cpu_s > 0        ? "message_cpu_us"
                            : parsed.ring_message_cpu_s > 0 ? "ring_message_cpu_us"
                            : parsed.message_wake_s > 0     ? "message_wake_us"
                                                            : nullptr;
  if (needs_cores != nullptr &&
      (parsed.cpu_cores < 1 || parsed.cpu_cores != cores)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", needs_cores,
        " needs cpu_cores, a whole number of cores of at least 1 (", cores,
        ")"));
  }
  return parsed;
}

const std::string& FittedModelConstantsJson() {
  static const std::string* const text =
      new std::string(kFittedModelConstantsJson);
  return *text;
}

ClusterSpec ApplyModelConstants(const ModelConstants& constants,
                                bool parameter_server, ClusterSpec cluster) {
  cluster.link_bytes_per_s *= constants.bandwidth_factor;
  cluster.latency_s = constants.latency_factor * cluster.latency_s +
                      (parameter_server ? constants.grpc_message_overhead_s
                                        : constants.tcp_message_overhead_s);
  cluster.link_burst_bytes = constants.link_burst_bytes;
  if (!parameter_server) {
    cluster.message_cpu_s = constants.message_cpu_s;
    cluster.ring_message_cpu_s = constants.ring_message_cpu_s < 0
                                     ? constants.message_cpu_s
                                     : constants.ring_message_cpu_s;
    cluster.ring_step_overhead_s = constants.ring_step_overhead_s;
    cluster.message_wake_s = constants.message_wake_s;
    cluster.cpu_cores = constants.cpu_cores;
  }
  return cluster;
}

}  // namespace sim
}  // namespace gradsync
