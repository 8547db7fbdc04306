// The process's recorded settings (see derived_settings.h).
#include "core/telemetry/derived_settings.h"

#include <map>
#include <mutex>
#include <utility>

#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

struct Recorded {
  std::mutex mu;
  std::map<std::string, std::pair<double, std::string>> settings;
  std::map<std::string, std::string> ignored_flags;
};

Recorded& TheRecord() {
  static Recorded* record = new Recorded;  // never destroyed: used at exit
  return *record;
}

}  // namespace

void RecordSetting(const std::string& name, double value,
                   const std::string& source) {
  Recorded& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.settings[name] = {value, source};
}

std::string RecordedSettingsJson() {
  Recorded& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, entry] : record.settings) {
    out[name] = {{"value", entry.first}, {"source", entry.second}};
  }
  return out.dump();
}

void RecordIgnoredFlag(const std::string& name, const std::string& why) {
  Recorded& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.ignored_flags[name] = why;
}

std::string IgnoredFlagsJson() {
  Recorded& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, why] : record.ignored_flags) out[name] = why;
  return out.dump();
}

void ClearRecordedSettings() {
  Recorded& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.settings.clear();
  record.ignored_flags.clear();
}

}  // namespace gradsync
