// Only its own job gets in: the job token (core/cluster/job_token.h) is
// generated, loaded and compared correctly, and each service refuses a caller
// without it or with another — the coordinator, the ring's handshake, and a
// real `gradsync server` process — with an error that says why, logged with the
// caller's address, while the job's own members still get in.
#include "core/cluster/job_token.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "allreduce/transport/handshake.h"
#include "allreduce/transport/peer_transport.h"
#include "allreduce/transport/tcp_connection.h"
#include "allreduce/transport/test_cluster.h"
#include "core/cluster/coordinator.h"
#include "core/cluster/grpc_job_token.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/gradsync_binary.h"
#include "tools/cluster_flags.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
constexpr char kOtherToken[] = "0123456789abcdef0123456789abcdeX";

TEST(JobTokenTest, NewTokensAre128RandomBitsInHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> token = NewJobToken();
    ASSERT_TRUE(token.ok()) << token.status();
    EXPECT_THAT(*token, MatchesRegex("[0-9a-f]{32}"));
    EXPECT_TRUE(ValidateJobToken(*token).ok());
    seen.insert(*token);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(JobTokenTest, ValidationRefusesWhatCannotTravelAsMetadata) {
  EXPECT_TRUE(ValidateJobToken(kToken).ok());
  EXPECT_FALSE(ValidateJobToken("short").ok());
  EXPECT_FALSE(ValidateJobToken(std::string(1025, 'a')).ok());
  EXPECT_FALSE(ValidateJobToken("0123456789abcdef 123").ok());
  EXPECT_FALSE(ValidateJobToken("0123456789abcdef\n123").ok());
  EXPECT_FALSE(ValidateJobToken("0123456789abcdef\xc3\xa9").ok());
}

TEST(JobTokenTest, EqualityIsExact) {
  EXPECT_TRUE(JobTokensEqual(kToken, kToken));
  EXPECT_FALSE(JobTokensEqual(kToken, kOtherToken));
  EXPECT_FALSE(JobTokensEqual(kToken, std::string(kToken) + "0"));
  EXPECT_FALSE(JobTokensEqual(kToken, std::string(kToken).substr(0, 31)));
  EXPECT_FALSE(JobTokensEqual(kToken, ""));
  EXPECT_FALSE(JobTokensEqual("", kToken));
  EXPECT_TRUE(JobTokensEqual("", ""));
  // A cyclic repetition of a short offer must not pass for the real thing.
  EXPECT_FALSE(JobTokensEqual("abababababababab", "ab"));
  EXPECT_EQ(JobTokenMismatch(kToken, ""), "no job token");
  EXPECT_EQ(JobTokenMismatch(kToken, kOtherToken), "wrong job token");
  EXPECT_EQ(JobTokenMismatch(kToken, kToken), "");
  EXPECT_EQ(JobTokenMismatch("", kOtherToken), "");  // none required
}

class LoadJobTokenTest : public ::testing::Test {
 protected:
  void TearDown() override {
    absl::SetFlag(&FLAGS_job_token_file, "");
    unsetenv(kJobTokenEnv);
  }
  std::string WriteFile(const std::string& text) {
    const std::string path = TestTempDir() + "/token";
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(LoadJobTokenTest, FileBeatsEnvironmentAndIsTrimmed) {
  setenv(kJobTokenEnv, kOtherToken, 1);
  absl::StatusOr<std::string> token =
      LoadJobToken(WriteFile(absl::StrCat(kToken, "\n")));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kToken);
}

TEST_F(LoadJobTokenTest, EnvironmentWithoutFile) {
  setenv(kJobTokenEnv, kToken, 1);
  absl::StatusOr<std::string> token = LoadJobToken("");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kToken);
}

TEST_F(LoadJobTokenTest, NeitherMeansNoToken) {
  absl::StatusOr<std::string> token = LoadJobToken("");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "");
}

TEST_F(LoadJobTokenTest, UnreadableOrInvalidSourcesAreNamed) {
  absl::StatusOr<std::string> missing = LoadJobToken("/nonexistent/token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("--job_token_file=/nonexistent/token"));
  EXPECT_EQ(LoadJobToken(WriteFile("too short")).status().code(),
            absl::StatusCode::kInvalidArgument);
  setenv(kJobTokenEnv, "short", 1);
  absl::StatusOr<std::string> bad_env = LoadJobToken("");
  EXPECT_THAT(std::string(bad_env.status().message()), HasSubstr(kJobTokenEnv));
}

// The command line's --job_token_file reaches the coordinator's security
// (tools/cluster_flags.h), and its errors still name the flag.
TEST_F(LoadJobTokenTest, TheCommandLineReadsJobTokenFile) {
  setenv(kJobTokenEnv, kOtherToken, 1);
  absl::SetFlag(&FLAGS_job_token_file, WriteFile(kToken));
  absl::StatusOr<CoordinatorSecurity> security = CoordinatorSecurityFromFlags();
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->job_token, kToken);
  absl::SetFlag(&FLAGS_job_token_file, "/nonexistent/token");
  EXPECT_THAT(std::string(CoordinatorSecurityFromFlags().status().message()),
              HasSubstr("--job_token_file=/nonexistent/token"));
  absl::SetFlag(&FLAGS_job_token_file, "");
  security = CoordinatorSecurityFromFlags();
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->job_token, kOtherToken);
}

// --- The coordinator -------------------------------------------------------

class CoordinatorTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = CoordinatorServer::Start("127.0.0.1:0", "job-t", 2, 0,
                                           CoordinatorSecurity{kToken, {}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::unique_ptr<CoordinatorClient> Client(int rank,
                                            const std::string& token) {
    CoordinatorClientOptions options;
    options.security.job_token = token;
    options.exit_when_member_lost = false;
    auto client = CoordinatorClient::Connect(
        absl::StrCat("127.0.0.1:", server_->port()), "job-t", Role::kWorker,
        rank, absl::Seconds(10), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(CoordinatorTokenTest, EveryCallWithoutTheTokenIsRefused) {
  for (const char* token : {"", kOtherToken}) {
    SCOPED_TRACE(token);
    const std::string why = *token == '\0' ? "no job token" : "wrong job token";
    auto stranger = Client(0, token);
    const absl::Status set = stranger->Set("k", "v");
    EXPECT_EQ(set.code(), absl::StatusCode::kUnauthenticated) << set;
    EXPECT_THAT(std::string(set.message()), HasSubstr(why));
    // The refusal (also logged) names where the call came from.
    EXPECT_THAT(std::string(set.message()),
                HasSubstr("refused a call from ipv4:127.0.0.1:"));
    EXPECT_EQ(stranger->Get("k", absl::Milliseconds(10)).status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(
        stranger->Barrier("b", BarrierGroup::kWorkers, absl::Milliseconds(10))
            .code(),
        absl::StatusCode::kUnauthenticated);
    absl::Status join = stranger->Join("x", absl::Seconds(5)).status();
    EXPECT_EQ(join.code(), absl::StatusCode::kUnauthenticated) << join;
  }
  // Nothing the strangers sent was stored; the job's own member gets in.
  auto member = Client(1, kToken);
  EXPECT_EQ(member->Get("k", absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(member->Set("k", "mine").ok());
  EXPECT_EQ(*member->Get("k", absl::Seconds(1)), "mine");
}

TEST_F(CoordinatorTokenTest, MembersWithTheTokenJoin) {
  std::vector<absl::Status> joined(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto client = Client(r, kToken);
      joined[r] =
          client->Join(absl::StrCat("10.0.0.", r), absl::Seconds(20)).status();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(joined[0].ok()) << joined[0];
  EXPECT_TRUE(joined[1].ok()) << joined[1];
}

// --- The ring handshake ----------------------------------------------------

// A stranger reaches rank 1 of a two-rank ring before rank 0 does and says
// `hello`; returns the answer it got, after checking the real ring formed.
absl::Status StrangerSaysHello(const PeerHello& hello) {
  auto cluster = TransportTestCluster::Start(2, "ring-t");
  if (!cluster.ok()) return cluster.status();
  auto options = [&](int rank) {
    PeerTransportOptions o = (*cluster)->TransportOptions(rank);
    o.job_token = kToken;
    return o;
  };
  std::unique_ptr<PeerTransport> transports[2];
  absl::Status created[2];
  std::thread rank1([&] {
    auto t = PeerTransport::Create(options(1), (*cluster)->client(1));
    created[1] = t.status();
    if (t.ok()) transports[1] = *std::move(t);
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::Status answer;
  auto address = (*cluster)->client(0)->Get("ring/addr/1", absl::Seconds(30));
  if (!address.ok()) {
    answer = address.status();
  } else {
    auto stranger =
        TcpConnection::Connect(*address, PeerSide::kUnknown, -1, deadline);
    if (!stranger.ok()) {
      answer = stranger.status();
    } else {
      answer = SendPeerHello(**stranger, hello, deadline);
      std::thread rank0([&] {
        auto t = PeerTransport::Create(options(0), (*cluster)->client(0));
        created[0] = t.status();
        if (t.ok()) transports[0] = *std::move(t);
      });
      if (answer.ok()) answer = ReceivePeerAnswer(**stranger, deadline);
      rank0.join();
    }
  }
  rank1.join();
  EXPECT_TRUE(created[0].ok()) << created[0];
  EXPECT_TRUE(created[1].ok()) << created[1];
  return answer;
}

TEST(RingTokenTest, HelloWithoutTheTokenIsRefused) {
  absl::Status answer =
      StrangerSaysHello(PeerHello{0, 1, 2, "ring-t", "127.0.0.1:1", ""});
  EXPECT_EQ(answer.code(), absl::StatusCode::kFailedPrecondition) << answer;
  EXPECT_THAT(std::string(answer.message()),
              HasSubstr("refused our hello: no job token"));
}

TEST(RingTokenTest, HelloWithAnotherTokenIsRefusedSayingNothingMore) {
  // Everything else in this hello is right: the token alone keeps it out,
  // and the refusal does not tell the stranger what else it got right.
  absl::Status answer = StrangerSaysHello(
      PeerHello{0, 1, 2, "ring-t", "127.0.0.1:1", kOtherToken});
  EXPECT_THAT(std::string(answer.message()),
              HasSubstr("refused our hello: wrong job token"));
  EXPECT_THAT(std::string(answer.message()), ::testing::Not(HasSubstr(kToken)));
}

TEST(RingTokenTest, CheckOrderTokenFirst) {
  PeerHello hello{0, 1, 2, "other-job", "", kOtherToken};
  EXPECT_THAT(CheckPeerHello(hello, "ring-t", kToken, 2, 1, 0),
              HasSubstr("wrong job token"));
  hello.job_token = kToken;
  EXPECT_THAT(CheckPeerHello(hello, "ring-t", kToken, 2, 1, 0),
              HasSubstr("job id"));
  hello.job_id = "ring-t";
  EXPECT_EQ(CheckPeerHello(hello, "ring-t", kToken, 2, 1, 0), "");
  // No token required: any (or none) is fine.
  hello.job_token = "";
  EXPECT_EQ(CheckPeerHello(hello, "ring-t", "", 2, 1, 0), "");
}

// --- A real parameter server -----------------------------------------------

TEST(ParameterServerTokenTest, CallsWithoutTheTokenAreRefusedAndLogged) {
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok());
  auto coordinator =
      CoordinatorServer::Start(absl::StrCat("127.0.0.1:", *port), "ps-token", 1,
                               1, CoordinatorSecurity{kToken, {}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ProcessSpec spec;
  spec.name = "server 0";
  spec.argv = {GradsyncBinary(), "server", "--ps_idle_timeout_s=2"};
  spec.env = {{"WORLD_SIZE", "1"},
              {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", absl::StrCat(*port)},
              {"GRADSYNC_JOB_ID", "ps-token"},
              {kJobTokenEnv, kToken},
              {"GRADSYNC_NUM_SERVERS", "1"},
              {"GRADSYNC_ROLE", "server"},
              {"GRADSYNC_SERVER_RANK", "0"}};
  LaunchResult result;
  std::thread launcher([&] {
    LaunchOptions options;
    options.echo = false;
    options.deadline = absl::Seconds(60);
    auto launched = RunProcessGroup({spec}, options);
    ASSERT_TRUE(launched.ok()) << launched.status();
    result = *launched;
  });
  CoordinatorClientOptions client_options;
  client_options.security.job_token = kToken;
  client_options.exit_when_member_lost = false;
  auto worker = CoordinatorClient::Connect(absl::StrCat("127.0.0.1:", *port),
                                           "ps-token", Role::kWorker, 0,
                                           absl::Seconds(30), client_options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto members = (*worker)->Join("127.0.0.1", absl::Seconds(30));
  ASSERT_TRUE(members.ok()) << members.status();
  std::string address;
  for (const Member& member : *members) {
    if (member.role == Role::kServer) address = member.address;
  }
  ASSERT_FALSE(address.empty());
  auto stub = ps::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto context = [](const std::string& token) {
    auto c = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) c->AddMetadata(kJobTokenMetadataKey, token);
    c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return c;
  };
  for (const std::string& token : {std::string(), std::string(kOtherToken)}) {
    SCOPED_TRACE(token);
    const std::string why = token.empty() ? "no job token" : "wrong job token";
    ps::ShutdownRequest shutdown;
    shutdown.mutable_header()->set_job_id("ps-token");
    ps::ShutdownReply reply;
    grpc::Status status =
        stub->Shutdown(context(token).get(), shutdown, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), HasSubstr(why));

    ps::PullRequest pull;
    pull.mutable_header()->set_job_id("ps-token");
    pull.add_keys(0);
    auto c = context(token);
    auto reader = stub->Pull(c.get(), pull);
    ps::KeyPart part;
    EXPECT_FALSE(reader->Read(&part));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

    auto push_context = context(token);
    ps::PushReply push_reply;
    auto writer = stub->Push(push_context.get(), &push_reply);
    ps::KeyPart garbage;
    garbage.mutable_header()->set_job_id("ps-token");
    garbage.set_data(std::string(64, 'x'));
    writer->Write(garbage);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

    auto register_context = context(token);
    ps::RegisterReply register_reply;
    auto registration = stub->Register(register_context.get(), &register_reply);
    registration->WritesDone();
    EXPECT_EQ(registration->Finish().error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // With the token the same call reaches the server's own checks.
  ps::ShutdownRequest shutdown;
  shutdown.mutable_header()->set_job_id("ps-token");
  ps::ShutdownReply reply;
  grpc::Status status = stub->Shutdown(context(kToken).get(), shutdown, &reply);
  EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << status.error_message();
  // The server ends by itself (no worker calls for 2 s) and is still alive
  // until then: none of the refused calls crashed it.
  launcher.join();
  ASSERT_EQ(result.processes.size(), 1u);
  EXPECT_EQ(result.processes[0].term_signal, 0) << result.processes[0].output;
  EXPECT_THAT(result.processes[0].output,
              HasSubstr("refused a call from ipv4:127.0.0.1:"));
  EXPECT_THAT(result.processes[0].output, HasSubstr("no job token"));
  EXPECT_THAT(result.processes[0].output, HasSubstr("wrong job token"));
}

// The token given as --job_token_file, with no variable: the server joins
// the coordinator with it, and its own handlers require it too (the command
// line hands the file to JobTokenOfThisProcess()).
TEST(ParameterServerTokenTest, TokenFileFlagReachesCoordinatorAndHandlers) {
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok());
  auto coordinator = CoordinatorServer::Start(absl::StrCat("127.0.0.1:", *port),
                                              "ps-token-file", 1, 1,
                                              CoordinatorSecurity{kToken, {}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string token_file = TestTempDir() + "/server_token";
  std::ofstream(token_file) << kToken << "\n";
  ProcessSpec spec;
  spec.name = "server 0";
  spec.argv = {GradsyncBinary(), "server", "--ps_idle_timeout_s=2",
               absl::StrCat("--job_token_file=", token_file)};
  spec.env = {{"WORLD_SIZE", "1"},
              {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", absl::StrCat(*port)},
              {"GRADSYNC_JOB_ID", "ps-token-file"},
              {"GRADSYNC_NUM_SERVERS", "1"},
              {"GRADSYNC_ROLE", "server"},
              {"GRADSYNC_SERVER_RANK", "0"}};
  LaunchResult result;
  std::thread launcher([&] {
    LaunchOptions options;
    options.echo = false;
    options.deadline = absl::Seconds(60);
    auto launched = RunProcessGroup({spec}, options);
    ASSERT_TRUE(launched.ok()) << launched.status();
    result = *launched;
  });
  CoordinatorClientOptions client_options;
  client_options.security.job_token = kToken;
  client_options.exit_when_member_lost = false;
  auto worker = CoordinatorClient::Connect(absl::StrCat("127.0.0.1:", *port),
                                           "ps-token-file", Role::kWorker, 0,
                                           absl::Seconds(30), client_options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto members = (*worker)->Join("127.0.0.1", absl::Seconds(30));
  ASSERT_TRUE(members.ok()) << members.status();
  std::string address;
  for (const Member& member : *members) {
    if (member.role == Role::kServer) address = member.address;
  }
  ASSERT_FALSE(address.empty());
  auto stub = ps::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  for (const std::string& token : {std::string(), std::string(kToken)}) {
    grpc::ClientContext context;
    AttachJobToken(context, token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    ps::ShutdownRequest shutdown;
    shutdown.mutable_header()->set_job_id("ps-token-file");
    ps::ShutdownReply reply;
    const grpc::Status status = stub->Shutdown(&context, shutdown, &reply);
    EXPECT_EQ(status.error_code() == grpc::StatusCode::UNAUTHENTICATED,
              token.empty())
        << status.error_message();
  }
  launcher.join();
  ASSERT_EQ(result.processes.size(), 1u);
  EXPECT_THAT(result.processes[0].output, HasSubstr("no job token"));
}

}  // namespace
}  // namespace gradsync
