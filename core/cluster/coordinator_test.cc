// The coordinator over real gRPC on loopback: join, barriers, the key-value
// store, and the errors that name who is missing or who is a stranger.
#include "core/cluster/coordinator.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class CoordinatorTest : public ::testing::Test {
 protected:
  void StartServer(int workers, int servers) {
    auto server =
        CoordinatorServer::Start("127.0.0.1:0", "job-a", workers, servers);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::unique_ptr<CoordinatorClient> Client(Role role, int rank,
                                            const std::string& job = "job-a") {
    auto client =
        CoordinatorClient::Connect(absl::StrCat("127.0.0.1:", server_->port()),
                                   job, role, rank, absl::Seconds(10));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(CoordinatorTest, JoinReturnsEveryMemberOnceAllHaveJoined) {
  StartServer(3, 2);
  std::vector<std::vector<Member>> rosters(5);
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      const Role role = i < 3 ? Role::kWorker : Role::kServer;
      const int rank = i < 3 ? i : i - 3;
      auto client = Client(role, rank);
      auto members =
          client->Join(absl::StrCat("10.0.0.", i, ":1"), absl::Seconds(20));
      ASSERT_TRUE(members.ok()) << members.status();
      rosters[i] = *members;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& roster : rosters) {
    ASSERT_EQ(roster.size(), 5u);
    EXPECT_EQ(roster[0].role, Role::kWorker);
    EXPECT_EQ(roster[0].rank, 0);
    EXPECT_EQ(roster[0].address, "10.0.0.0:1");
    EXPECT_EQ(roster[4].role, Role::kServer);
    EXPECT_EQ(roster[4].rank, 1);
    EXPECT_EQ(roster[4].address, "10.0.0.4:1");
  }
}

TEST_F(CoordinatorTest, JoinTimeoutNamesTheMissingMembers) {
  StartServer(3, 1);
  auto client = Client(Role::kWorker, 1);
  auto members = client->Join("x", absl::Milliseconds(500));
  ASSERT_FALSE(members.ok());
  EXPECT_EQ(members.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(members.status().message()),
              HasSubstr("worker 0, worker 2, server 0"));
}

TEST_F(CoordinatorTest, SameRankTwiceIsRefused) {
  StartServer(2, 0);
  // The first join registers worker 1, then times out waiting for worker 0.
  EXPECT_EQ(Client(Role::kWorker, 1)
                ->Join("a:1", absl::Milliseconds(200))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::Status status =
      Client(Role::kWorker, 1)->Join("b:2", absl::Seconds(5)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("worker 1 joined twice"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("a:1"));
}

TEST_F(CoordinatorTest, BarrierReleasesEveryoneAndTimesOutNamingMissing) {
  StartServer(3, 0);
  std::vector<absl::Status> results(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      results[r] =
          Client(Role::kWorker, r)
              ->Barrier("b1", BarrierGroup::kWorkers, absl::Seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;

  absl::Status lonely =
      Client(Role::kWorker, 2)
          ->Barrier("b2", BarrierGroup::kWorkers, absl::Milliseconds(300));
  EXPECT_EQ(lonely.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(lonely.message()),
              HasSubstr("barrier 'b2' waiting for worker 0, worker 1"));
}

TEST_F(CoordinatorTest, GetWaitsForSetAndTimesOutNamingTheKey) {
  StartServer(2, 0);
  auto reader = Client(Role::kWorker, 1);
  std::string value;
  std::thread t([&] {
    auto got = reader->Get("nccl/unique_id", absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << got.status();
    value = *got;
  });
  ASSERT_TRUE(Client(Role::kWorker, 0)
                  ->Set("nccl/unique_id", std::string("\0\1\2", 3))
                  .ok());
  t.join();
  EXPECT_EQ(value, std::string("\0\1\2", 3));

  auto missing = reader->Get("never", absl::Milliseconds(300));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("key 'never'"));
}

TEST_F(CoordinatorTest, StrangersAreRefused) {
  StartServer(2, 1);
  absl::Status wrong_job = Client(Role::kWorker, 0, "job-b")->Set("k", "v");
  EXPECT_EQ(wrong_job.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(wrong_job.message()), HasSubstr("job 'job-b'"));
  absl::Status bad_rank = Client(Role::kWorker, 2)->Set("k", "v");
  EXPECT_EQ(bad_rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_rank.message()), HasSubstr("unknown worker 2"));
  absl::Status bad_server = Client(Role::kServer, 1)->Set("k", "v");
  EXPECT_THAT(std::string(bad_server.message()), HasSubstr("unknown server 1"));
}

// Worker 0's settings, as the command line gives them to its coordinator.
WorkerSettings Settings(const std::string& lr) {
  WorkerSettings settings;
  settings.values = {{"--lr", lr}, {"--model", "mlp"}, {"--sync", "ring"}};
  return settings;
}

class SettingsAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server =
        CoordinatorServer::Start("127.0.0.1:0", "job-s", 2, 0,
                                 CoordinatorSecurity(), "", Settings("0.05"));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  // A worker that states `settings` at Join. Refusals fail the job, which
  // must not end this test's process.
  std::unique_ptr<CoordinatorClient> Worker(int rank,
                                            const WorkerSettings& settings) {
    CoordinatorClientOptions options;
    options.exit_when_member_lost = false;
    options.settings = settings;
    auto client = CoordinatorClient::Connect(
        absl::StrCat("127.0.0.1:", server_->port()), "job-s", Role::kWorker,
        rank, absl::Seconds(10), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(SettingsAgreementTest, WorkersWithWorker0sSettingsJoin) {
  auto worker0 = Worker(0, Settings("0.05"));
  auto worker1 = Worker(1, Settings("0.05"));
  absl::StatusOr<std::vector<Member>> joined0;
  std::thread join0([&] { joined0 = worker0->Join("a:1", absl::Seconds(20)); });
  auto joined1 = worker1->Join("b:2", absl::Seconds(20));
  join0.join();
  ASSERT_TRUE(joined0.ok()) << joined0.status();
  ASSERT_TRUE(joined1.ok()) << joined1.status();
  EXPECT_EQ(joined1->size(), 2u);
  EXPECT_TRUE(server_->LostMembers().empty());
}

// The refused worker, worker 0 (already waiting in Join) and the job's record
// all name both workers and the first setting that differs, with both values.
TEST_F(SettingsAgreementTest, WorkerWithOtherSettingsFailsTheJobNamingBoth) {
  auto worker0 = Worker(0, Settings("0.05"));
  auto worker1 = Worker(1, Settings("0.5"));
  absl::StatusOr<std::vector<Member>> joined0;
  std::thread join0([&] { joined0 = worker0->Join("a:1", absl::Seconds(30)); });
  auto refused = worker1->Join("b:2", absl::Seconds(30));
  join0.join();
  const std::string difference =
      "was refused at Join: its --lr=0.5 differs from worker 0's --lr=0.05; "
      "give every worker the same training flags";
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("worker 1 " + difference));
  ASSERT_FALSE(joined0.ok());
  EXPECT_THAT(std::string(joined0.status().message()),
              HasSubstr("the job lost worker 1 (b:2"));
  EXPECT_THAT(std::string(joined0.status().message()),
              HasSubstr("its --lr=0.5 differs from worker 0's --lr=0.05"));
  const std::vector<std::string> lost = server_->LostMembers();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_THAT(lost[0], HasSubstr("worker 1 (b:2"));
  EXPECT_THAT(lost[0], HasSubstr("its --lr=0.5 differs"));
}

// A setting only one side has (another build) is a difference too.
TEST_F(SettingsAgreementTest, SettingWorker0DoesNotHaveIsRefused) {
  WorkerSettings more = Settings("0.05");
  more.values["--new_knob"] = "7";
  auto refused = Worker(1, more)->Join("b:2", absl::Seconds(30));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("its --new_knob=7 is unknown to worker 0"));
}

TEST_F(SettingsAgreementTest, MissingSettingIsRefused) {
  WorkerSettings fewer = Settings("0.05");
  fewer.values.erase("--model");
  auto refused = Worker(1, fewer)->Join("b:2", absl::Seconds(30));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("it does not state --model, which worker 0 sets to "
                        "mlp"));
}

// A parameter server states the few settings it reads itself; each must be
// worker 0's. One that agrees joins beside worker 0; one that differs fails
// the job naming itself, worker 0 and the setting with both values.
TEST(ServerSettingsAgreementTest,
     ServerWithOtherSettingsFailsTheJobNamingBoth) {
  WorkerSettings worker0 = Settings("0.05");
  worker0.values["--ps_message_kb"] = "0";
  for (const std::string message_kb : {"0", "64"}) {
    auto server = CoordinatorServer::Start("127.0.0.1:0", "job-p", 1, 1,
                                           CoordinatorSecurity(), "", worker0);
    ASSERT_TRUE(server.ok()) << server.status();
    CoordinatorClientOptions options;
    options.exit_when_member_lost = false;
    const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
    options.settings = worker0;
    auto worker = CoordinatorClient::Connect(target, "job-p", Role::kWorker, 0,
                                             absl::Seconds(10), options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    options.settings.values = {{"--ps_message_kb", message_kb}};
    auto ps = CoordinatorClient::Connect(target, "job-p", Role::kServer, 0,
                                         absl::Seconds(10), options);
    ASSERT_TRUE(ps.ok()) << ps.status();
    absl::StatusOr<std::vector<Member>> joined0;
    std::thread join0(
        [&] { joined0 = (*worker)->Join("a:1", absl::Seconds(30)); });
    auto joined = (*ps)->Join("s:3", absl::Seconds(30));
    join0.join();
    if (message_kb == "0") {
      EXPECT_TRUE(joined.ok()) << joined.status();
      EXPECT_TRUE(joined0.ok()) << joined0.status();
      continue;
    }
    const std::string difference =
        "its --ps_message_kb=64 differs from worker 0's --ps_message_kb=0; "
        "give every parameter server the --ps_* flags the workers have";
    ASSERT_FALSE(joined.ok());
    EXPECT_THAT(std::string(joined.status().message()),
                HasSubstr("server 0 was refused at Join: " + difference));
    ASSERT_FALSE(joined0.ok());
    EXPECT_THAT(
        std::string(joined0.status().message()),
        AllOf(HasSubstr("the job lost server 0"), HasSubstr(difference)));
  }
}

// A derived setting (no "--": what a process computes from its environment,
// a server's stream window from the job's link) that differs is refused like
// a flag, for a server and a worker alike, but with worker 0's advice for
// derived settings; a flag that differs too is named first, as the cause.
TEST(ServerSettingsAgreementTest,
     DerivedSettingThatDiffersIsRefusedWithItsAdvice) {
  WorkerSettings worker0 = Settings("0.05");
  worker0.values["--ps_message_kb"] = "0";
  worker0.values["derived ps_stream_window_kb.push"] = "256 KiB";
  worker0.derived_advice = "give every process the same GRADSYNC_LINK";
  // Why a member stating `settings` is refused at Join (a job of its own).
  auto refusal = [&](Role role, int rank, const WorkerSettings& settings) {
    auto server = CoordinatorServer::Start("127.0.0.1:0", "job-d", 2, 1,
                                           CoordinatorSecurity(), "", worker0);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return std::string();
    CoordinatorClientOptions options;
    options.exit_when_member_lost = false;
    options.settings = settings;
    auto client = CoordinatorClient::Connect(
        absl::StrCat("127.0.0.1:", (*server)->port()), "job-d", role, rank,
        absl::Seconds(10), options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return std::string();
    auto joined = (*client)->Join("s:3", absl::Seconds(30));
    return joined.ok() ? std::string("joined")
                       : std::string(joined.status().message());
  };
  WorkerSettings server_settings;
  server_settings.values = {{"--ps_message_kb", "0"},
                            {"derived ps_stream_window_kb.push", "4096 KiB"}};
  EXPECT_THAT(refusal(Role::kServer, 0, server_settings),
              HasSubstr("server 0 was refused at Join: its derived "
                        "ps_stream_window_kb.push=4096 KiB differs from "
                        "worker 0's derived ps_stream_window_kb.push=256 KiB; "
                        "give every process the same GRADSYNC_LINK"));
  WorkerSettings worker1 = worker0;
  worker1.values["derived ps_stream_window_kb.push"] = "4096 KiB";
  EXPECT_THAT(refusal(Role::kWorker, 1, worker1),
              HasSubstr("worker 1 was refused at Join: its derived "
                        "ps_stream_window_kb.push=4096 KiB differs from "
                        "worker 0's derived ps_stream_window_kb.push=256 KiB; "
                        "give every process the same GRADSYNC_LINK"));
  // A flag that differs too is the cause: named first, with its advice.
  worker1.values["--lr"] = "0.5";
  EXPECT_THAT(refusal(Role::kWorker, 1, worker1),
              HasSubstr("its --lr=0.5 differs from worker 0's --lr=0.05; give "
                        "every worker the same training flags"));
}

// A call made while the coordinator cannot be reached waits for it until its
// deadline (instead of failing at once with whatever the last connection
// attempt met), says there was no connection, and the same client goes on
// once the coordinator is back.
TEST(CoordinatorClientTest, CallsWaitForTheCoordinatorUntilTheirDeadline) {
  // Below the ephemeral range: a port from it could be taken meanwhile, or
  // the client's reconnects could even connect to themselves.
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string target = absl::StrCat("127.0.0.1:", *port);
  auto server = CoordinatorServer::Start(target, "job", 1, 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = CoordinatorClient::Connect(target, "job", Role::kWorker, 0,
                                           absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("before", "1").ok());

  server->reset();
  const absl::Time start = absl::Now();
  auto lost = (*client)->Get("before", absl::Milliseconds(500));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDeadlineExceeded)
      << lost.status();
  EXPECT_THAT(std::string(lost.status().message()),
              HasSubstr("no connection to the coordinator at " + target));
  // The RPC deadline is the wait plus 5 s for the server to say why.
  EXPECT_GE(waited, absl::Seconds(5));

  server = CoordinatorServer::Start(target, "job", 1, 0);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*client)->Set("after", "2").ok());
  auto got = (*client)->Get("after", absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "2");
}

TEST(CoordinatorClientTest, NoCoordinatorIsADeadlineNamingTheAddress) {
  auto client = CoordinatorClient::Connect("127.0.0.1:1", "job", Role::kWorker,
                                           3, absl::Milliseconds(300));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("worker 3"));
}

}  // namespace
}  // namespace gradsync
