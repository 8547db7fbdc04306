// The job token: a shared secret that every process of one job presents to
// every other, so that only its own job gets in — not another job on the same
// machine that guessed a port, not a port scanner, not a stale process of an
// earlier run.
//
// `gradsync launch` generates one per job (128 random bits as 32 hex digits)
// and hands it to its processes in GRADSYNC_JOB_TOKEN. On a cluster, give
// every process the same token with --job_token_file=<file> (preferred: it is
// not visible in the process's environment) or GRADSYNC_JOB_TOKEN. Without a
// token nothing is checked, as before.
//
// Where it is checked: the coordinator (gRPC metadata, every handler), the
// ring's TCP handshake, and the parameter servers (gRPC metadata on every
// RPC). Comparisons take the same time whatever the bytes, so timing does not
// reveal how much of a guess was right. The token travels in clear unless
// TLS is on (--tls_cert/--tls_key/--tls_ca, coordinator only): it keeps out
// strangers who do not know it, not an eavesdropper on the network.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace gradsync {

// The environment variable and the gRPC metadata key that carry the token.
inline constexpr char kJobTokenEnv[] = "GRADSYNC_JOB_TOKEN";
inline constexpr char kJobTokenMetadataKey[] = "gradsync-job-token";

// 128 bits from the kernel's random source as 32 lowercase hex digits.
absl::StatusOr<std::string> NewJobToken();

// Why `token` cannot be a job token, or OK. A token is 16 to 1024 printable
// ASCII characters without spaces (it travels as gRPC metadata).
absl::Status ValidateJobToken(absl::string_view token);

// The token this process was given: the contents of --job_token_file
// (surrounding white space removed) if the flag is set, else
// $GRADSYNC_JOB_TOKEN, else "" (no token). An unreadable file or an invalid
// token is an error naming its source.
absl::StatusOr<std::string> LoadJobToken();

// LoadJobToken() read once per process; "" when it failed (the coordinator
// reports that error when it starts or connects, before anything else runs).
const std::string& JobTokenOfThisProcess();

// Whether `offered` equals `expected`, in time that depends only on the
// length of `expected`.
bool JobTokensEqual(absl::string_view expected, absl::string_view offered);

// Why `offered` is not `expected` ("no job token" or "wrong job token"), or
// "" when it is, or when `expected` is empty (no token required). Never
// includes either token.
std::string JobTokenMismatch(absl::string_view expected,
                             absl::string_view offered);

// gRPC: the client side adds the token to a call's metadata (nothing when
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
