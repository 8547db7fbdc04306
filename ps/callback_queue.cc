// See callback_queue.h for why this exists.
#include "ps/callback_queue.h"

#include <chrono>
#include <memory>

#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"

namespace gradsync {

void KeepCallbackQueueAlive() {
  static const bool kept [[maybe_unused]] = [] {
    // A channel takes its reference to the callback queue with its first
    // callback call and drops it when destroyed; this one is never destroyed.
    // The call has a deadline in the past, so it ends at once without
    // connecting anywhere.
    auto* channel = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
    auto* stub = ps::ParameterServer::NewStub(*channel).release();
    auto* context = new grpc::ClientContext();
    context->set_deadline(std::chrono::system_clock::now());
    auto* request = new ps::ShutdownRequest();
    auto* reply = new ps::ShutdownReply();
    stub->async()->Shutdown(context, request, reply,
                            [context, request, reply](grpc::Status) {
                              delete reply;
                              delete request;
                              delete context;
                            });
    return true;
  }();
}

}  // namespace gradsync
