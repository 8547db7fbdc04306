// Hostile input at the coordinator's boundary. A table of named cases calls
// the service's handlers directly (as gRPC would, after parsing), each on a
// fresh service, and checks that every one is refused with the right code, a
// message that says why without echoing megabytes or control characters,
// and nothing stored. A second part sends what gRPC itself must stop —
// oversized and unparsable messages — to a real server, which keeps serving.
#include <climits>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/cluster/coordinator.h"
#include "core/cluster/coordinator_service.h"
#include "core/cluster/grpc_job_token.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/test/server_context_test_spouse.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = "job-h";
constexpr char kToken[] = "hostile-test-token-0123456789";
const std::string kMiB(1 << 20, 'k');

CoordinatorServiceOptions SmallService() {
  CoordinatorServiceOptions options;
  options.job_id = kJob;
  options.num_workers = 2;
  options.num_servers = 1;
  options.job_token = kToken;
  options.max_store_bytes = 1 << 20;
  options.max_store_keys = 100;
  options.max_barriers = 100;
  options.worker_settings.values = {{"--lr", "0.05"}, {"--sync", "ring"}};
  return options;
}

// Worker 0's settings with `name` set to `value` (added when new).
std::vector<std::pair<std::string, std::string>> SettingsWith(
    const std::string& name, const std::string& value) {
  std::vector<std::pair<std::string, std::string>> settings = {
      {"--lr", "0.05"}, {"--sync", "ring"}};
  bool found = false;
  for (auto& setting : settings) {
    if (setting.first == name) {
      setting.second = value;
      found = true;
    }
  }
  if (!found) settings.push_back({name, value});
  return settings;
}

proto::Sender Sender(int rank, proto::Role role = proto::ROLE_WORKER,
                     const std::string& job = kJob) {
  proto::Sender sender;
  sender.set_job_id(job);
  sender.set_role(role);
  sender.set_rank(rank);
  return sender;
}

// One call into the service, as gRPC would make it.
struct Call {
  CoordinatorService& service;
  grpc::ServerContext& context;

  grpc::Status Set(const proto::Sender& sender, const std::string& key,
                   const std::string& value) {
    proto::SetRequest request;
    *request.mutable_sender() = sender;
    request.set_key(key);
    request.set_value(value);
    proto::SetResponse response;
    return service.Set(&context, &request, &response);
  }
  grpc::Status Get(const proto::Sender& sender, const std::string& key,
                   int64_t timeout_ms) {
    proto::GetRequest request;
    *request.mutable_sender() = sender;
    request.set_key(key);
    request.set_timeout_ms(timeout_ms);
    proto::GetResponse response;
    return service.Get(&context, &request, &response);
  }
  grpc::Status Join(
      const proto::Sender& sender, const std::string& address,
      const std::string& host, int64_t timeout_ms,
      const std::vector<std::pair<std::string, std::string>>& settings = {}) {
    proto::JoinRequest request;
    *request.mutable_sender() = sender;
    request.set_address(address);
    request.set_host(host);
    request.set_timeout_ms(timeout_ms);
    for (const auto& [name, value] : settings) {
      proto::Setting* setting = request.add_settings();
      setting->set_name(name);
      setting->set_value(value);
    }
    proto::JoinResponse response;
    return service.Join(&context, &request, &response);
  }
  grpc::Status Barrier(const proto::Sender& sender, const std::string& name,
                       bool everyone, int64_t timeout_ms) {
    proto::BarrierRequest request;
    *request.mutable_sender() = sender;
    request.set_name(name);
    request.set_everyone(everyone);
    request.set_timeout_ms(timeout_ms);
    proto::BarrierResponse response;
    return service.Barrier(&context, &request, &response);
  }
  grpc::Status Alive(const proto::Sender& sender, int64_t round) {
    proto::AliveRequest request;
    *request.mutable_sender() = sender;
    request.set_round(round);
    proto::AliveResponse response;
    return service.Alive(&context, &request, &response);
  }
  grpc::Status Leave(const proto::Sender& sender) {
    proto::LeaveRequest request;
    *request.mutable_sender() = sender;
    proto::LeaveResponse response;
    return service.Leave(&context, &request, &response);
  }
};

struct HostileCase {
  std::string name;
  // The token the caller presents ("" for none).
  std::string token = kToken;
  // Calls before the hostile one (with the right token), if any.
  std::function<void(Call&)> setup;
  std::function<grpc::Status(Call&)> hostile;
  grpc::StatusCode code;
  std::string says;
  // Bytes the store may hold afterwards (what `setup` put there).
  int64_t store_bytes_after = 0;
};

void PrintTo(const HostileCase& c, std::ostream* out) { *out << c.name; }

std::vector<HostileCase> Cases() {
  const proto::Sender w0 = Sender(0);
  std::vector<HostileCase> cases = {
      {"NoToken", "", nullptr,
       [&](Call& c) { return c.Set(Sender(0), "k", "v"); },
       grpc::StatusCode::UNAUTHENTICATED, "no job token"},
      {"WrongToken", "hostile-test-token-0123456780", nullptr,
       [&](Call& c) { return c.Set(Sender(0), "k", "v"); },
       grpc::StatusCode::UNAUTHENTICATED, "wrong job token"},
      {"TokenWithExtraBytes", std::string(kToken) + "9", nullptr,
       [&](Call& c) { return c.Join(Sender(0), "a", "h", 0); },
       grpc::StatusCode::UNAUTHENTICATED, "wrong job token"},
      {"HugeToken", std::string(1 << 20, 't'), nullptr,
       [&](Call& c) { return c.Get(Sender(0), "k", 0); },
       grpc::StatusCode::UNAUTHENTICATED, "wrong job token"},
      {"WrongJob", kToken, nullptr,
       [&](Call& c) {
         return c.Set(Sender(0, proto::ROLE_WORKER, "other"), "k", "v");
       },
       grpc::StatusCode::PERMISSION_DENIED, "job 'other'"},
      {"HugeJobId", kToken, nullptr,
       [&](Call& c) {
         return c.Set(Sender(0, proto::ROLE_WORKER, kMiB), "k", "v");
       },
       grpc::StatusCode::PERMISSION_DENIED, "(1048576 bytes)"},
      {"JobIdWithTerminalEscapes", kToken, nullptr,
       [&](Call& c) {
         return c.Set(
             Sender(0, proto::ROLE_WORKER, std::string("\x1b[2J\n\0x", 7)), "k",
             "v");
       },
       grpc::StatusCode::PERMISSION_DENIED, "\\x1b[2J\\n"},
      {"NegativeRank", kToken, nullptr,
       [&](Call& c) { return c.Set(Sender(-1), "k", "v"); },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown worker -1"},
      {"MostNegativeRank", kToken, nullptr,
       [&](Call& c) { return c.Join(Sender(INT_MIN), "a", "h", 0); },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown worker -2147483648"},
      {"EnormousRank", kToken, nullptr,
       [&](Call& c) { return c.Barrier(Sender(INT_MAX), "b", false, 0); },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown worker 2147483647"},
      {"RankJustPastTheWorld", kToken, nullptr,
       [&](Call& c) { return c.Get(Sender(2), "k", 0); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "the job has 2 workers and 1 servers"},
      {"ServerRankPastTheServers", kToken, nullptr,
       [&](Call& c) { return c.Set(Sender(1, proto::ROLE_SERVER), "k", "v"); },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown server 1"},
      {"UnknownRole", kToken, nullptr,
       [&](Call& c) {
         return c.Set(Sender(0, static_cast<proto::Role>(7)), "k", "v");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown role 7"},
      {"NegativeRole", kToken, nullptr,
       [&](Call& c) {
         return c.Leave(Sender(0, static_cast<proto::Role>(-3)));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown role -3"},
      {"AliveFromAStranger", "", nullptr,
       [&](Call& c) { return c.Alive(Sender(0), 1); },
       grpc::StatusCode::UNAUTHENTICATED, "no job token"},
      {"AliveForAnotherJob", kToken, nullptr,
       [&](Call& c) {
         return c.Alive(Sender(0, proto::ROLE_WORKER, "other"), LLONG_MIN);
       },
       grpc::StatusCode::PERMISSION_DENIED, "job 'other'"},
      {"HugeKeySet", kToken, nullptr,
       [&](Call& c) { return c.Set(Sender(0), kMiB, "v"); },
       grpc::StatusCode::INVALID_ARGUMENT, "the key has 1048576 bytes"},
      {"HugeKeyGet", kToken, nullptr,
       [&](Call& c) { return c.Get(Sender(0), kMiB, 1000); },
       grpc::StatusCode::INVALID_ARGUMENT, "the key has 1048576 bytes"},
      {"ValuePastTheStoreLimit", kToken, nullptr,
       [&](Call& c) { return c.Set(Sender(0), "k", kMiB + kMiB); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "past its 1048576 bytes"},
      {"ManySmallValuesPastTheStoreLimit", kToken,
       [&](Call& c) {
         for (int i = 0; i < 3; ++i) {
           ASSERT_TRUE(
               c.Set(Sender(0), absl::StrCat("k", i), std::string(300000, 'v'))
                   .ok());
         }
       },
       [&](Call& c) {
         return c.Set(Sender(0), "k3", std::string(300000, 'v'));
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "past its", 3 * (300000 + 2)},
      {"TooManyKeys", kToken,
       [&](Call& c) {
         for (int i = 0; i < 100; ++i) {
           ASSERT_TRUE(c.Set(Sender(0), absl::StrCat("k", i), "").ok());
         }
       },
       [&](Call& c) { return c.Set(Sender(1), "one-more", ""); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "already holds 100 keys",
       10 * 2 + 90 * 3},
      {"TooManyBarriers", kToken,
       [&](Call& c) {
         for (int i = 0; i < 100; ++i) {
           ASSERT_EQ(c.Barrier(Sender(0), absl::StrCat("b", i), false, 0)
                         .error_code(),
                     grpc::StatusCode::DEADLINE_EXCEEDED);
         }
       },
       [&](Call& c) { return c.Barrier(Sender(0), "b100", false, 0); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "already used 100 barriers"},
      {"HugeBarrierName", kToken, nullptr,
       [&](Call& c) { return c.Barrier(Sender(0), kMiB, true, 0); },
       grpc::StatusCode::INVALID_ARGUMENT, "barrier's name has 1048576 bytes"},
      {"ServerInWorkersOnlyBarrier", kToken, nullptr,
       [&](Call& c) {
         return c.Barrier(Sender(0, proto::ROLE_SERVER), "b", false, 1000);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "entered workers-only barrier"},
      {"HugeAddress", kToken, nullptr,
       [&](Call& c) { return c.Join(Sender(0), kMiB, "h", 1000); },
       grpc::StatusCode::INVALID_ARGUMENT, "address has 1048576 bytes"},
      {"HugeHostName", kToken, nullptr,
       [&](Call& c) { return c.Join(Sender(0), "a", kMiB, 1000); },
       grpc::StatusCode::INVALID_ARGUMENT, "host name has 1048576 bytes"},
      {"HugeSetting", kToken, nullptr,
       [&](Call& c) {
         return c.Join(Sender(1), "a", "h", 1000, SettingsWith("--lr", kMiB));
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "setting --lr has 1048580 bytes; the coordinator accepts at most "
       "16384"},
      {"TooManySettings", kToken, nullptr,
       [&](Call& c) {
         std::vector<std::pair<std::string, std::string>> many;
         for (int i = 0; i < 5000; ++i) many.push_back({absl::StrCat(i), ""});
         return c.Join(Sender(1), "a", "h", 1000, many);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "states 5000 settings"},
      {"SettingStatedTwice", kToken, nullptr,
       [&](Call& c) {
         auto twice = SettingsWith("--lr", "0.05");
         twice.push_back({"--lr", "0.5"});
         return c.Join(Sender(1), "a", "h", 1000, twice);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "states setting --lr twice"},
      // A refusal for another value quotes it escaped and cut short.
      {"SettingWithTerminalEscapes", kToken, nullptr,
       [&](Call& c) {
         return c.Join(
             Sender(1), "a", "h", 1000,
             SettingsWith("--lr", "\x1b[2J" + std::string(2000, 'x')));
       },
       grpc::StatusCode::FAILED_PRECONDITION,
       "worker 1 was refused at Join: its --lr=\\x1b[2Jxxx"},
      {"JoinTwice", kToken,
       [&](Call& c) {
         ASSERT_EQ(c.Join(Sender(1), "first:1", "h1", 0).error_code(),
                   grpc::StatusCode::DEADLINE_EXCEEDED);
       },
       [&](Call& c) { return c.Join(Sender(1), "second:2", "h2", 0); },
       grpc::StatusCode::ALREADY_EXISTS,
       "worker 1 joined twice (first from h1 first:1"},
      {"NegativeTimeoutReturnsAtOnce", kToken, nullptr,
       [&](Call& c) { return c.Get(Sender(0), "never", -5000); },
       grpc::StatusCode::DEADLINE_EXCEEDED, "waiting for key 'never'"},
      {"MostNegativeTimeout", kToken, nullptr,
       [&](Call& c) { return c.Barrier(Sender(1), "b", true, LLONG_MIN); },
       grpc::StatusCode::DEADLINE_EXCEEDED, "waiting for worker 0, server 0"},
  };
  return cases;
}

class CoordinatorHostileInputTest
    : public ::testing::TestWithParam<HostileCase> {};

TEST_P(CoordinatorHostileInputTest, IsRefusedWithReasonAndNothingStored) {
  const HostileCase& c = GetParam();
  CoordinatorService service(SmallService());
  if (c.setup) {
    grpc::ServerContext context;
    grpc::testing::ServerContextTestSpouse spouse(&context);
    spouse.AddClientMetadata(kJobTokenMetadataKey, kToken);
    Call call{service, context};
    c.setup(call);
  }
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  if (!c.token.empty()) spouse.AddClientMetadata(kJobTokenMetadataKey, c.token);
  Call call{service, context};
  const absl::Time start = absl::Now();
  const grpc::Status status = c.hostile(call);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "a hostile call waited";
  EXPECT_EQ(status.error_code(), c.code) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(c.says));
  // The message says why in a few lines, whatever the caller sent.
  EXPECT_LT(status.error_message().size(), 1000u) << status.error_message();
  EXPECT_THAT(status.error_message(), Not(HasSubstr("\x1b")));
  EXPECT_EQ(service.StoreBytes(), c.store_bytes_after);
}

INSTANTIATE_TEST_SUITE_P(NamedCases, CoordinatorHostileInputTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<HostileCase>& info) {
                           return info.param.name;
                         });

TEST(CoordinatorHostileInputTest, HugeTimeoutDoesNotOverflow) {
  CoordinatorService service(SmallService());
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  spouse.AddClientMetadata(kJobTokenMetadataKey, kToken);
  Call call{service, context};
  ASSERT_TRUE(call.Set(Sender(0), "k", "v").ok());
  EXPECT_TRUE(call.Get(Sender(1), "k", LLONG_MAX).ok());
}

// --- Through a real server -------------------------------------------------

class CoordinatorOverTheWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = CoordinatorServer::Start("127.0.0.1:0", kJob, 2, 0,
                                           CoordinatorSecurity{kToken, {}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
  }
  // A member that must still be served after each hostile call.
  void ExpectStillServing() {
    CoordinatorClientOptions options;
    options.security.job_token = kToken;
    options.exit_when_member_lost = false;
    auto client = CoordinatorClient::Connect(target_, kJob, Role::kWorker, 0,
                                             absl::Seconds(60), options);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_TRUE((*client)->Set("alive", "yes").ok());
  }
  // Sends raw bytes as the request of `method`.
  grpc::Status RawCall(const std::string& method, const std::string& bytes) {
    auto channel =
        grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::ClientContext context;
    context.AddMetadata(kJobTokenMetadataKey, kToken);
    // A bound on a hang, not on speed: the 65 MiB request is copied and sent
    // in many frames, which ThreadSanitizer on a loaded machine slows a lot.
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = s;
                     done.Notify();
                   });
    done.WaitForNotification();
    return status;
  }
  std::unique_ptr<CoordinatorServer> server_;
  std::string target_;
};

TEST_F(CoordinatorOverTheWireTest, RequestOverTheMessageLimitIsRefusedByGrpc) {
  // 65 MiB: past the coordinator's 64 MiB limit on what it receives.
  const grpc::Status status =
      RawCall("/gradsync.proto.Coordinator/Set", std::string(65 << 20, 'v'));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  ExpectStillServing();
}

TEST_F(CoordinatorOverTheWireTest, BytesThatAreNoRequestAreRefused) {
  const std::vector<std::string> garbage = {
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 10),
      // A length-delimited field that claims 2 GB.
      std::string("\x0a\xff\xff\xff\xff\x07", 6),
      // Field 1 (sender) with a job id that is not UTF-8.
      std::string("\x0a\x04\x0a\x02\xc3\x28", 6),
  };
  for (const char* method :
       {"/gradsync.proto.Coordinator/Set", "/gradsync.proto.Coordinator/Join",
        "/gradsync.proto.Coordinator/Get",
        "/gradsync.proto.Coordinator/Barrier",
        "/gradsync.proto.Coordinator/Leave",
        "/gradsync.proto.Coordinator/Alive"}) {
    for (const std::string& bytes : garbage) {
      SCOPED_TRACE(absl::StrCat(method, " ", bytes.size(), " bytes"));
      const grpc::Status status = RawCall(method, bytes);
      EXPECT_FALSE(status.ok());
    }
  }
  EXPECT_EQ(
      RawCall("/gradsync.proto.Coordinator/NoSuchMethod", "").error_code(),
      grpc::StatusCode::UNIMPLEMENTED);
  ExpectStillServing();
}

}  // namespace
}  // namespace gradsync
