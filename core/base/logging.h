// A thin logger (Debian's Abseil 20220623 has no absl/log): timestamped lines
// on stderr, tagged with the process's role and rank once they are known.
//
//   GS_LOG(INFO) << "joined " << n << " peers";
//   GS_LOG(FATAL) << "...";   // logs, then aborts
//   auto model = ValueOrDie(CreateResNet(options));  // where nobody takes a
//   status
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace gradsync {

enum class LogLevel {
  kDebug = 0,
  kInfo = 1,
  kWarning = 2,
  kError = 3,
  kFatal = 4
};

// Sets the tag printed on every line ("worker 3", "server 0", "launch").
void SetLogTag(const std::string& tag);
// Lines below `level` are dropped (default: kInfo; GRADSYNC_LOG_LEVEL=debug
// lowers it).
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace gradsync

#define GS_LOG_LEVEL_DEBUG ::gradsync::LogLevel::kDebug
#define GS_LOG_LEVEL_INFO ::gradsync::LogLevel::kInfo
#define GS_LOG_LEVEL_WARNING ::gradsync::LogLevel::kWarning
#define GS_LOG_LEVEL_ERROR ::gradsync::LogLevel::kError
#define GS_LOG_LEVEL_FATAL ::gradsync::LogLevel::kFatal

#define GS_LOG(level)                                     \
  if (GS_LOG_LEVEL_##level < ::gradsync::MinLogLevel()) { \
  } else                                                  \
    ::gradsync::LogMessage(GS_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#define GS_CHECK(cond) \
  if (cond) {          \
  } else               \
    GS_LOG(FATAL) << "check failed: " #cond " "

namespace gradsync {

// The value `value` holds; where it holds an error, a fatal log naming it.
// For programs with no caller to hand a status to (benchmarks' set-up).
template <typename T>
T ValueOrDie(absl::StatusOr<T> value) {
  GS_CHECK(value.ok()) << value.status();
  return *std::move(value);
}

}  // namespace gradsync
