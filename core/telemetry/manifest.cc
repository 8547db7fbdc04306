#include "core/telemetry/manifest.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/base/config.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/telemetry/derived_settings.h"
#include "google/protobuf/stubs/common.h"
#include "grpcpp/grpcpp.h"
#include "oneapi/dnnl/dnnl.h"
#include "zlib.h"

extern "C" char* openblas_get_config(void);

namespace gradsync {
namespace {

// The CPU device's convolutions and products (core/device/dnnl_context.h).
std::string OneDnnVersion() {
  const dnnl_version_t* version = dnnl_version();
  return absl::StrCat(version->major, ".", version->minor, ".", version->patch);
}

std::string CommandOutput(const char* command) {
  std::string out;
  FILE* pipe = popen(command, "r");
  if (pipe == nullptr) return out;
  char buffer[256];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  pclose(pipe);
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown";
}

}  // namespace

// gradsync's own flags live in these folders; Abseil's and gRPC's are left out.
bool IsGradsyncFlagFile(absl::string_view file) {
  for (const char* folder :
       {"core/", "ps/", "allreduce/", "tools/", "bench/"}) {
    if (absl::StrContains(file, folder)) return true;
  }
  return false;
}

std::string GitCommit() {
  if (const char* env = std::getenv("GRADSYNC_GIT_COMMIT"); env && *env)
    return env;
  std::string commit = CommandOutput("git rev-parse HEAD 2>/dev/null");
  return commit.empty() ? "unknown" : commit;
}

std::string ManifestJson() {
  nlohmann::ordered_json manifest;
  nlohmann::ordered_json flags = nlohmann::ordered_json::object();
  std::map<std::string, std::string> sorted;
  for (const auto& entry : absl::GetAllFlags()) {
    if (IsGradsyncFlagFile(entry.second->Filename())) {
      sorted[std::string(entry.first)] = entry.second->CurrentValue();
    }
  }
  for (const auto& entry : sorted) flags[entry.first] = entry.second;
  manifest["flags"] = flags;
  // What the strategies derived or took from a flag, with the reason.
  manifest["settings"] = nlohmann::ordered_json::parse(RecordedSettingsJson());
  // Flags given but not used by this run (its strategy has no use for them).
  manifest["ignored_flags"] = nlohmann::ordered_json::parse(IgnoredFlagsJson());
  manifest["git_commit"] = GitCommit();
  manifest["compiler"] = std::string("gcc ") + __VERSION__;
  manifest["versions"] = {
      {"grpc", grpc::Version()},
      {"protobuf",
       google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION)},
      {"abseil", std::to_string(ABSL_LTS_RELEASE_VERSION)},
      {"zlib", zlibVersion()},
      {"openblas", openblas_get_config()},
      {"onednn", OneDnnVersion()},
  };
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  manifest["host"] = {
      {"name", host},
      {"cpu", CpuModel()},
      {"cores", std::thread::hardware_concurrency()},
  };
  manifest["time"] =
      absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  return manifest.dump();
}

}  // namespace gradsync
