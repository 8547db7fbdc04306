// libFuzzer target: sequences of calls into the synchronous handlers of the
// coordinator's service (core/cluster/coordinator_service.h) — Join, Barrier,
// Set, Get, Alive, Leave; Watch, on the callback API, needs a live call and is
// covered by tests/member_loss_test.cc — with fuzzed tokens, job ids, roles,
// ranks, keys, values and timeouts, some built field by field and some parsed
// from raw bytes as gRPC would. Checks, besides ASan/UBSan's: every refusal is
// short, and the store never holds more than its limit.
//
// Waits are forced to time out at once (timeout <= 0): a blocking handler
// with a real timeout would stall the fuzzer, not find bugs.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/base/logging.h"
#include "core/cluster/coordinator_service.h"
#include "core/cluster/grpc_job_token.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/test/server_context_test_spouse.h"

namespace gradsync {
namespace {

constexpr char kJob[] = "fuzz-job";
constexpr char kToken[] = "fuzz-token-0123456789abcdef";

CoordinatorServiceOptions Options() {
  CoordinatorServiceOptions options;
  options.job_id = kJob;
  options.num_workers = 3;
  options.num_servers = 2;
  options.job_token = kToken;
  options.max_store_bytes = 64 << 10;
  options.max_store_keys = 64;
  options.max_barriers = 64;
  // Worker 0's settings, so that settings in a Join (raw requests) are
  // compared and their refusal quoted.
  options.worker_settings.values = {{"--lr", "0.05"}, {"--sync", "ring"}};
  return options;
}

std::string Pick(FuzzInput& in, const std::string& usual) {
  // Mostly the right value, so that calls get past the first checks.
  if (in.InRange(0, 3) != 0) return usual;
  return in.String(300);
}

void FillSender(FuzzInput& in, proto::Sender* sender) {
  sender->set_job_id(Pick(in, kJob));
  sender->set_role(static_cast<proto::Role>(
      in.Bool() ? in.InRange(0, 1) : in.Integral<int32_t>()));
  sender->set_rank(in.Bool() ? in.InRange(-1, 3) : in.Integral<int32_t>());
}

int64_t Timeout(FuzzInput& in) {
  return std::min<int64_t>(0, in.Integral<int64_t>());
}

void Check(const grpc::Status& status, const CoordinatorService& service,
           int64_t max_store_bytes) {
  if (status.error_message().size() > 2000) std::abort();
  if (service.StoreBytes() > max_store_bytes || service.StoreBytes() < 0) {
    std::abort();
  }
}

}  // namespace
}  // namespace gradsync

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Refusals are logged; a million log lines would only slow the fuzzer.
  gradsync::SetMinLogLevel(gradsync::LogLevel::kFatal);
  google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" on raw requests
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  FuzzInput in(data, size);
  const CoordinatorServiceOptions options = Options();
  CoordinatorService service(options);
  for (int calls = 0; calls < 64 && in.remaining() > 0; ++calls) {
    grpc::ServerContext context;
    grpc::testing::ServerContextTestSpouse spouse(&context);
    switch (in.InRange(0, 3)) {
      case 0:
        spouse.AddClientMetadata(kJobTokenMetadataKey, kToken);
        break;
      case 1:
        spouse.AddClientMetadata(kJobTokenMetadataKey, in.String(64));
        break;
      case 2:
        spouse.AddClientMetadata(kJobTokenMetadataKey, kToken);
        spouse.AddClientMetadata(kJobTokenMetadataKey, in.String(64));
        break;
      default:
        break;  // no token
    }
    const bool raw = in.InRange(0, 4) == 0;
    grpc::Status status;
    switch (in.InRange(0, 5)) {
      case 0: {
        proto::JoinRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(2000))) continue;
        } else {
          FillSender(in, request.mutable_sender());
          request.set_address(in.String(1100));
          request.set_host(in.String(1100));
        }
        request.set_timeout_ms(std::min<int64_t>(0, request.timeout_ms()));
        if (!raw) request.set_timeout_ms(Timeout(in));
        proto::JoinResponse response;
        status = service.Join(&context, &request, &response);
        if (status.ok() && response.members_size() !=
                               options.num_workers + options.num_servers) {
          std::abort();  // Join returned before everyone joined
        }
        break;
      }
      case 1: {
        proto::BarrierRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(2000))) continue;
        } else {
          FillSender(in, request.mutable_sender());
          request.set_name(in.String(1100));
          request.set_everyone(in.Bool());
        }
        request.set_timeout_ms(raw ? std::min<int64_t>(0, request.timeout_ms())
                                   : Timeout(in));
        proto::BarrierResponse response;
        status = service.Barrier(&context, &request, &response);
        break;
      }
      case 2: {
        proto::SetRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(4000))) continue;
        } else {
          FillSender(in, request.mutable_sender());
          request.set_key(in.Bool() ? std::string("k") +
                                          std::to_string(in.InRange(0, 99))
                                    : in.String(1100));
          request.set_value(std::string(in.InRange(0, 40000), 'v'));
        }
        proto::SetResponse response;
        status = service.Set(&context, &request, &response);
        break;
      }
      case 3: {
        proto::GetRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(2000))) continue;
        } else {
          FillSender(in, request.mutable_sender());
          request.set_key(in.Bool() ? std::string("k") +
                                          std::to_string(in.InRange(0, 99))
                                    : in.String(1100));
        }
        request.set_timeout_ms(raw ? std::min<int64_t>(0, request.timeout_ms())
                                   : Timeout(in));
        proto::GetResponse response;
        status = service.Get(&context, &request, &response);
        break;
      }
      case 4: {
        proto::AliveRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(200))) continue;
        } else {
          FillSender(in, request.mutable_sender());
          request.set_round(in.Integral<int64_t>());
        }
        proto::AliveResponse response;
        status = service.Alive(&context, &request, &response);
        break;
      }
      default: {
        proto::LeaveRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(200))) continue;
        } else {
          FillSender(in, request.mutable_sender());
        }
        proto::LeaveResponse response;
        status = service.Leave(&context, &request, &response);
        break;
      }
    }
    Check(status, service, options.max_store_bytes);
  }
  return 0;
}
