// The job token on gRPC (see grpc_job_token.h).
#include "core/cluster/grpc_job_token.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

namespace gradsync {
namespace {

// Adds the token to the initial metadata of every call on its channel.
class JobTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit JobTokenInterceptor(std::string token) : token_(std::move(token)) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
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
  const std::string message = absl::StrCat(
      service, " refused a call from ", context.peer(), ": ", mismatch,
      " (every process of a job needs the same token: ", kJobTokenEnv,
      " or --job_token_file)");
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
  if (token.empty())
    return grpc::CreateCustomChannel(target, credentials, args);
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<JobTokenInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, args, std::move(interceptors));
}

}  // namespace gradsync
