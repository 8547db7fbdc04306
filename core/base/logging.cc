#include "core/base/logging.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gradsync {
namespace {

// Constant-initialized: usable from static initializers and during exit.
ABSL_CONST_INIT absl::Mutex tag_mu(absl::kConstInit);
std::string& Tag() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tag_mu) {
  static std::string tag;
  return tag;
}

LogLevel InitialLevel() {
  const char* env = std::getenv("GRADSYNC_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

LogLevel& MinLevel() {
  static LogLevel level = InitialLevel();
  return level;
}

const char* LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
    case LogLevel::kFatal:
      return "F";
  }
  return "?";
}

}  // namespace

void SetLogTag(const std::string& tag) {
  absl::MutexLock lock(&tag_mu);
  Tag() = tag;
}

void SetMinLogLevel(LogLevel level) { MinLevel() = level; }
LogLevel MinLogLevel() { return MinLevel(); }

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << LevelLetter(level) << " "
          << absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone())
          << " ";
  {
    absl::MutexLock lock(&tag_mu);
    if (!Tag().empty()) stream_ << "[" << Tag() << "] ";
  }
  stream_ << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  const std::string text = stream_.str();
  // One write per line so concurrent threads do not interleave inside a line.
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace gradsync
