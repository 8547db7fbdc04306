// The manifest: valid JSON with every field manifest.h promises, gradsync's
// own flags echoed with their current values, and the commit from
// $GRADSYNC_GIT_COMMIT.
#include "core/telemetry/manifest.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "core/telemetry/derived_settings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

// Defined in a file under core/, so the manifest must list it.
ABSL_FLAG(int, manifest_test_knob, 7, "a flag the manifest must echo");

namespace gradsync {
namespace {

using Json = nlohmann::json;

Json ParsedManifest() {
  const std::string text = ManifestJson();
  Json manifest = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(manifest.is_discarded()) << text;
  return manifest;
}

TEST(ManifestTest, HasEveryPromisedField) {
  setenv("GRADSYNC_GIT_COMMIT", "0123abcd", 1);
  const Json manifest = ParsedManifest();
  ASSERT_TRUE(manifest.is_object());
  ASSERT_TRUE(manifest["flags"].is_object());
  EXPECT_EQ(manifest["git_commit"], "0123abcd");
  EXPECT_THAT(manifest["compiler"].get<std::string>(),
              ::testing::StartsWith("gcc "));
  for (const char* library :
       {"grpc", "protobuf", "abseil", "zlib", "openblas", "onednn"}) {
    ASSERT_TRUE(manifest["versions"].contains(library)) << library;
    EXPECT_TRUE(manifest["versions"][library].is_string()) << library;
    EXPECT_FALSE(manifest["versions"][library].get<std::string>().empty())
        << library;
  }
  EXPECT_TRUE(manifest["host"]["name"].is_string());
  EXPECT_TRUE(manifest["host"]["cpu"].is_string());
  EXPECT_GE(manifest["host"]["cores"].get<int>(), 0);
  // RFC 3339 to the second, UTC: 2026-01-02T03:04:05+00:00.
  EXPECT_THAT(
      manifest["time"].get<std::string>(),
      ::testing::MatchesRegex(
          "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|\\+00:00)"));
}

TEST(ManifestTest, EchoesGradsyncFlagsWithTheirCurrentValues) {
  EXPECT_EQ(ParsedManifest()["flags"]["manifest_test_knob"], "7");
  absl::SetFlag(&FLAGS_manifest_test_knob, 42);
  EXPECT_EQ(ParsedManifest()["flags"]["manifest_test_knob"], "42");
}

TEST(ManifestTest, RecordsSettingsWithTheirSource) {
  ClearRecordedSettings();
  EXPECT_TRUE(ParsedManifest()["settings"].empty());
  RecordSetting("ps_chunk_kb", 64, "auto: 2.5 MB over K=8 servers");
  RecordSetting("ring_chunk_kb", 256, "flag");
  RecordSetting("ring_chunk_kb", 128, "flag");  // the last one counts
  const Json settings = ParsedManifest()["settings"];
  EXPECT_EQ(settings["ps_chunk_kb"]["value"], 64);
  EXPECT_EQ(settings["ps_chunk_kb"]["source"], "auto: 2.5 MB over K=8 servers");
  EXPECT_EQ(settings["ring_chunk_kb"]["value"], 128);
  EXPECT_EQ(settings["ring_chunk_kb"]["source"], "flag");
  ClearRecordedSettings();
}

TEST(ManifestTest, ListsIgnoredFlagsApartFromTheSettings) {
  ClearRecordedSettings();
  EXPECT_TRUE(ParsedManifest()["ignored_flags"].empty());
  RecordIgnoredFlag("ps_consistency", "a parameter-server setting");
  const Json manifest = ParsedManifest();
  EXPECT_EQ(manifest["ignored_flags"]["ps_consistency"],
            "a parameter-server setting");
  EXPECT_TRUE(manifest["settings"].empty());
  ClearRecordedSettings();
  EXPECT_TRUE(ParsedManifest()["ignored_flags"].empty());
}

TEST(ManifestTest, GitCommitComesFromTheEnvironmentFirst) {
  setenv("GRADSYNC_GIT_COMMIT", "feedface", 1);
  EXPECT_EQ(GitCommit(), "feedface");
  // Empty counts as unset: git, else "unknown", never "".
  setenv("GRADSYNC_GIT_COMMIT", "", 1);
  EXPECT_FALSE(GitCommit().empty());
  EXPECT_NE(GitCommit(), "feedface");
}

}  // namespace
}  // namespace gradsync
