#include "core/cluster/job_token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

ABSL_FLAG(std::string, job_token_file, "",
          "file holding this job's token, the same for every process of the "
          "job (default: $GRADSYNC_JOB_TOKEN, which `gradsync launch` sets); "
          "the coordinator, the ring and the parameter servers refuse peers "
          "without it. Empty and no variable: no token is checked");

namespace gradsync {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 1024;

// Adds the token to the initial metadata of every call on its channel.
class JobTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit JobTokenInterceptor(std::string token) : token_(std::move(token)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kJobTokenMetadataKey, token_);
    }
    methods->Proceed();
  }

 private:
  const std::string token_;
};

class JobTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit JobTokenInterceptorFactory(std::string token)
      : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new JobTokenInterceptor(token_);
  }

 private:
  const std::string token_;
};

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
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes), sizeof(bytes)));
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

absl::StatusOr<std::string> LoadJobToken() {
  const std::string path = absl::GetFlag(FLAGS_job_token_file);
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) {
      return absl::NotFoundError(absl::StrCat(
          "--job_token_file=", path, ": cannot read it: ", std::strerror(errno)));
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string token(absl::StripAsciiWhitespace(text.str()));
    absl::Status valid = ValidateJobToken(token);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_token_file=", path, ": ", valid.message()));
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

const std::string& JobTokenOfThisProcess() {
  static const std::string* const token = [] {
    absl::StatusOr<std::string> loaded = LoadJobToken();
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

void AttachJobToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata(kJobTokenMetadataKey, token);
}

grpc::Status CheckJobToken(const grpc::ServerContextBase& context,
                           const std::string& expected,
                           absl::string_view service) {
  if (expected.empty()) return grpc::Status::OK;
  absl::string_view offered;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kJobTokenMetadataKey);
  if (it != metadata.end()) {
    offered = absl::string_view(it->second.data(), it->second.size());
  }
  const std::string mismatch = JobTokenMismatch(expected, offered);
  if (mismatch.empty()) return grpc::Status::OK;
  const std::string message =
      absl::StrCat(service, " refused a call from ", context.peer(), ": ",
                   mismatch, " (every process of a job needs the same token: ",
                   kJobTokenEnv, " or --job_token_file)");
  GS_LOG(WARNING) << message;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, message);
}

void AttachJobToken(grpc::ClientContext& context) {
  AttachJobToken(context, JobTokenOfThisProcess());
}

grpc::Status CheckJobToken(const grpc::ServerContextBase& context,
                           absl::string_view service) {
  return CheckJobToken(context, JobTokenOfThisProcess(), service);
}

std::shared_ptr<grpc::Channel> CreateChannelWithJobToken(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args) {
  const std::string& token = JobTokenOfThisProcess();
  if (token.empty()) return grpc::CreateCustomChannel(target, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<JobTokenInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, args, std::move(interceptors));
}

}  // namespace gradsync
