// The job token (job_token.h) on gRPC: the client side puts it in every
// call's metadata, the server side refuses calls without it. Apart from
// job_token.h so that what needs only the token (the ring's TCP handshake,
// `gradsync launch`) does not link gRPC.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "core/cluster/job_token.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace gradsync {

// The gRPC metadata key that carries the token.
inline constexpr char kJobTokenMetadataKey[] = "gradsync-job-token";

// The client side adds the token to a call's metadata (nothing when
// `token` is empty); the server side checks it and answers UNAUTHENTICATED,
// logging a warning that names the caller's address, when it is missing or
// wrong. `service` names the refusing side in the message ("coordinator").
void AttachJobToken(grpc::ClientContext& context, const std::string& token);
grpc::Status CheckJobToken(const grpc::ServerContextBase& context,
                           const std::string& expected,
                           absl::string_view service);
// The same with this process's token (JobTokenOfThisProcess()), for services
// whose options do not carry one.
void AttachJobToken(grpc::ClientContext& context);
grpc::Status CheckJobToken(const grpc::ServerContextBase& context,
                           absl::string_view service);

// A channel whose every call carries this process's token (a client
// interceptor adds it), for services reached through generated stubs.
std::shared_ptr<grpc::Channel> CreateChannelWithJobToken(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args);

// For services on gRPC's callback API: the reactor for the handler to
// return when the call does not carry this process's token — it has
// already finished the call with CheckJobToken's error — or nullptr to go
// on. `Reactor` is the handler's return type:
//
//   if (auto* refused = RefuseCallWithoutJobToken<
//           grpc::ServerReadReactor<ps::KeyPart>>(context, "server 1")) {
//     return refused;
//   }
template <typename Reactor>
Reactor* RefuseCallWithoutJobToken(grpc::CallbackServerContext* context,
                                   absl::string_view service);

namespace job_token_internal {

template <typename Request>
class RefusedRead final : public grpc::ServerReadReactor<Request> {
 public:
  explicit RefusedRead(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

template <typename Response>
class RefusedWrite final : public grpc::ServerWriteReactor<Response> {
 public:
  explicit RefusedWrite(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

template <typename Request, typename Response>
class RefusedBidi final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedBidi(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

inline grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                        const grpc::Status& status,
                                        grpc::ServerUnaryReactor*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}
template <typename Request>
grpc::ServerReadReactor<Request>* Refuse(grpc::CallbackServerContext*,
                                         const grpc::Status& status,
                                         grpc::ServerReadReactor<Request>*) {
  return new RefusedRead<Request>(status);
}
template <typename Response>
grpc::ServerWriteReactor<Response>* Refuse(
    grpc::CallbackServerContext*, const grpc::Status& status,
    grpc::ServerWriteReactor<Response>*) {
  return new RefusedWrite<Response>(status);
}
template <typename Request, typename Response>
grpc::ServerBidiReactor<Request, Response>* Refuse(
    grpc::CallbackServerContext*, const grpc::Status& status,
    grpc::ServerBidiReactor<Request, Response>*) {
  return new RefusedBidi<Request, Response>(status);
}

}  // namespace job_token_internal

template <typename Reactor>
Reactor* RefuseCallWithoutJobToken(grpc::CallbackServerContext* context,
                                   absl::string_view service) {
  const grpc::Status status = CheckJobToken(*context, service);
  if (status.ok()) return nullptr;
  return job_token_internal::Refuse(context, status,
                                    static_cast<Reactor*>(nullptr));
}

}  // namespace gradsync
