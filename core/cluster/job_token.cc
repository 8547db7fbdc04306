// The job token without a network library (see job_token.h).
#include "core/cluster/job_token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace gradsync {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 1024;

// Set by main; read by whichever thread first asks for the token (a
// strategy's, a gRPC handler's).
ABSL_CONST_INIT absl::Mutex token_file_mu(absl::kConstInit);
std::string& TokenFileOfThisProcess()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(token_file_mu) {
  static std::string* const file = new std::string;
  return *file;
}

}  // namespace

absl::StatusOr<std::string> NewJobToken() {
  unsigned char bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(
          "generating a job token: getrandom: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::Status ValidateJobToken(absl::string_view token) {
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job token has ", kMinTokenBytes, " to ", kMaxTokenBytes,
                     " characters; this one has ", token.size()));
  }
  for (const char c : token) {
    // gRPC metadata values must be printable ASCII; spaces would be trimmed
    // differently by different readers of a token file.
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "a job token may hold only printable ASCII characters without "
          "spaces (generate one with: head -c 16 /dev/urandom | xxd -p)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LoadJobToken(const std::string& token_file) {
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("--job_token_file=", token_file,
                       ": cannot read it: ", std::strerror(errno)));
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string token(absl::StripAsciiWhitespace(text.str()));
    absl::Status valid = ValidateJobToken(token);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_token_file=", token_file, ": ", valid.message()));
    }
    return token;
  }
  const char* env = std::getenv(kJobTokenEnv);
  if (env == nullptr || *env == '\0') return std::string();
  absl::Status valid = ValidateJobToken(env);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kJobTokenEnv, ": ", valid.message()));
  }
  return std::string(env);
}

void SetJobTokenFileOfThisProcess(const std::string& token_file) {
  absl::MutexLock lock(&token_file_mu);
  TokenFileOfThisProcess() = token_file;
}

const std::string& JobTokenOfThisProcess() {
  static const std::string* const token = [] {
    std::string token_file;
    {
      absl::MutexLock lock(&token_file_mu);
      token_file = TokenFileOfThisProcess();
    }
    absl::StatusOr<std::string> loaded = LoadJobToken(token_file);
    return new std::string(loaded.ok() ? *loaded : "");
  }();
  return *token;
}

bool JobTokensEqual(absl::string_view expected, absl::string_view offered) {
  // Every byte of `expected` is compared whatever the offer, and a short
  // offer is read cyclically, so the time depends on expected.size() only.
  unsigned char difference = expected.size() == offered.size() ? 0 : 1;
  if (offered.empty()) return expected.empty();
  for (size_t i = 0; i < expected.size(); ++i) {
    difference |= static_cast<unsigned char>(expected[i]) ^
                  static_cast<unsigned char>(offered[i % offered.size()]);
  }
  return difference == 0;
}

std::string JobTokenMismatch(absl::string_view expected,
                             absl::string_view offered) {
  if (expected.empty()) return "";
  if (offered.empty()) return "no job token";
  if (!JobTokensEqual(expected, offered)) return "wrong job token";
  return "";
}

}  // namespace gradsync
