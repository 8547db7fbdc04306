// The coordinator's failure detector, in one process: a member whose watch
// breaks without leaving is lost — every other member hears which one, with
// its address, and waits on the coordinator fail at once naming it — while a
// member that leaves, and a coordinator that shuts down normally, are no
// loss. (tests/fault_test.cc does the same with real processes and SIGKILL.)
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/cluster/coordinator.h"
#include "core/cluster/grpc_job_token.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kJob[] = "job-loss";
constexpr char kToken[] = "member-loss-token-0123456789";

class MemberLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = CoordinatorServer::Start("127.0.0.1:0", kJob, 3, 0,
                                           CoordinatorSecurity{kToken, {}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
  }
  std::unique_ptr<CoordinatorClient> Client(int rank) {
    CoordinatorClientOptions options;
    options.security.job_token = kToken;
    options.exit_when_member_lost = false;  // we are the test process
    auto client = CoordinatorClient::Connect(target_, kJob, Role::kWorker, rank,
                                             absl::Seconds(10), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::string target_;
};

// Worker 1 speaks the protocol by hand, so that it can vanish the way a
// killed process does: its watch simply breaks, with no Leave before.
class HandMadeMember {
 public:
  HandMadeMember(const std::string& target, int rank)
      : stub_(proto::Coordinator::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))),
        rank_(rank) {}

  proto::Sender Sender() const {
    proto::Sender sender;
    sender.set_job_id(kJob);
    sender.set_role(proto::ROLE_WORKER);
    sender.set_rank(rank_);
    return sender;
  }
  // Opens the watch and waits until the coordinator has registered it.
  bool Watch() {
    watch_context_.AddMetadata(kJobTokenMetadataKey, kToken);
    proto::WatchRequest request;
    *request.mutable_sender() = Sender();
    reader_ = stub_->Watch(&watch_context_, request);
    proto::WatchEvent event;
    return reader_->Read(&event) && event.watching();
  }
  grpc::Status Join(const std::string& address) {
    grpc::ClientContext context;
    context.AddMetadata(kJobTokenMetadataKey, kToken);
    proto::JoinRequest request;
    *request.mutable_sender() = Sender();
    request.set_address(address);
    request.set_host("hand-made");
    request.set_timeout_ms(20000);
    proto::JoinResponse response;
    return stub_->Join(&context, request, &response);
  }
  // What a killed process's connection does.
  void Vanish() {
    watch_context_.TryCancel();
    proto::WatchEvent event;
    while (reader_->Read(&event)) {
    }
    reader_->Finish();
  }

 private:
  std::unique_ptr<proto::Coordinator::Stub> stub_;
  const int rank_;
  grpc::ClientContext watch_context_;
  std::unique_ptr<grpc::ClientReader<proto::WatchEvent>> reader_;
};

TEST_F(MemberLossTest, LostMemberIsNamedToEveryoneAndEndsTheirWaits) {
  HandMadeMember lost(target_, 1);
  ASSERT_TRUE(lost.Watch());
  auto w0 = Client(0);
  auto w2 = Client(2);
  std::thread joins[3] = {
      std::thread(
          [&] { EXPECT_TRUE(w0->Join("10.0.0.10", absl::Seconds(20)).ok()); }),
      std::thread([&] { EXPECT_TRUE(lost.Join("10.0.0.11:4100").ok()); }),
      std::thread(
          [&] { EXPECT_TRUE(w2->Join("10.0.0.12", absl::Seconds(20)).ok()); })};
  for (std::thread& join : joins) join.join();
  EXPECT_TRUE(w0->lost().ok());

  // Worker 2 waits for a key only worker 1 would have set.
  absl::StatusOr<std::string> waited;
  absl::Duration waited_for;
  std::thread waiter([&] {
    const absl::Time start = absl::Now();
    waited = w2->Get("from-worker-1", absl::Seconds(60));
    waited_for = absl::Now() - start;
  });
  lost.Vanish();
  waiter.join();
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      std::string(waited.status().message()),
      HasSubstr("the job lost worker 1 (10.0.0.11:4100 on host hand-made)"));
  EXPECT_LT(waited_for, absl::Seconds(5)) << "the wait outlived the loss";

  // Every member hears of it; a symptom seen elsewhere gets the cause.
  const absl::Status symptom =
      absl::UnavailableError("right neighbour rank 1 closed the connection");
  for (CoordinatorClient* member : {w0.get(), w2.get()}) {
    const absl::Status explained =
        member->ExplainFailure(symptom, absl::Seconds(10));
    EXPECT_THAT(std::string(explained.message()),
                HasSubstr("the job lost worker 1 (10.0.0.11:4100"));
    EXPECT_THAT(std::string(explained.message()),
                HasSubstr("; so right neighbour rank 1 closed the connection"));
    EXPECT_EQ(member->lost().code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_THAT(server_->LostMembers(), SizeIs(1));
}

// Strategies register listeners to fail a step blocked on the lost member
// at once: each hears the loss exactly once, a listener added after the loss
// hears it at once, and one removed before hears nothing.
TEST_F(MemberLossTest, LossListenersHearTheLossOnce) {
  HandMadeMember lost(target_, 1);
  ASSERT_TRUE(lost.Watch());
  auto w0 = Client(0);
  auto w2 = Client(2);
  std::thread joins[3] = {
      std::thread(
          [&] { EXPECT_TRUE(w0->Join("10.0.0.10", absl::Seconds(20)).ok()); }),
      std::thread([&] { EXPECT_TRUE(lost.Join("10.0.0.11:4100").ok()); }),
      std::thread(
          [&] { EXPECT_TRUE(w2->Join("10.0.0.12", absl::Seconds(20)).ok()); })};
  for (std::thread& join : joins) join.join();

  std::atomic<int> heard{0};
  std::atomic<int> removed_heard{0};
  std::string message;
  absl::Notification told;
  const int listener = w2->AddLossListener([&](const absl::Status& loss) {
    message = std::string(loss.message());
    ++heard;
    told.Notify();
  });
  const int removed =
      w2->AddLossListener([&](const absl::Status&) { ++removed_heard; });
  w2->RemoveLossListener(removed);

  EXPECT_FALSE(w2->has_lost());
  lost.Vanish();
  ASSERT_TRUE(told.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "worker 2's listener never heard of the loss";
  EXPECT_TRUE(w2->has_lost());  // set before the listeners are called
  EXPECT_THAT(message, HasSubstr("the job lost worker 1 (10.0.0.11:4100"));
  // Added after the loss: called before AddLossListener returns.
  int late_heard = 0;
  const int late = w2->AddLossListener([&](const absl::Status& loss) {
    EXPECT_EQ(loss, w2->lost());
    ++late_heard;
  });
  EXPECT_EQ(late_heard, 1);
  w2->RemoveLossListener(listener);
  w2->RemoveLossListener(late);
  EXPECT_EQ(heard.load(), 1);
  EXPECT_EQ(removed_heard.load(), 0);
}

TEST_F(MemberLossTest, MembersThatLeaveAndTheJobsEndAreNoLoss) {
  {
    auto w0 = Client(0);
    auto w1 = Client(1);
    auto w2 = Client(2);
    std::thread joins[3] = {
        std::thread(
            [&] { EXPECT_TRUE(w0->Join("a", absl::Seconds(20)).ok()); }),
        std::thread(
            [&] { EXPECT_TRUE(w1->Join("b", absl::Seconds(20)).ok()); }),
        std::thread(
            [&] { EXPECT_TRUE(w2->Join("c", absl::Seconds(20)).ok()); })};
    for (std::thread& join : joins) join.join();
    w1.reset();  // leaves
    EXPECT_EQ(
        w0->ExplainFailure(absl::UnknownError("x"), absl::Milliseconds(500)),
        absl::UnknownError("x"));
    EXPECT_TRUE(w0->lost().ok());
    // The coordinator ends the job while worker 0 and 2 still watch.
    server_->Shutdown();
    EXPECT_TRUE(w0->lost().ok());
    EXPECT_TRUE(w2->lost().ok());
  }
  EXPECT_THAT(server_->LostMembers(), IsEmpty());
}

TEST_F(MemberLossTest, SecondProcessWithTheSameRankIsRefused) {
  HandMadeMember first(target_, 0);
  ASSERT_TRUE(first.Watch());
  absl::Status status = Client(0)->Join("b", absl::Seconds(5)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("two processes were given the same rank"));
  first.Vanish();
}

TEST_F(MemberLossTest, ExplainFailureWithoutAWatchChangesNothing) {
  auto never_joined = Client(0);
  const absl::Status symptom = absl::InternalError("boom");
  EXPECT_EQ(never_joined->ExplainFailure(symptom, absl::Seconds(5)), symptom);
}

// A member that believes in another shape is refused at Join, and the
// others' Join fails at once with the same message, naming both sides.
TEST_F(MemberLossTest, JoinOfAnotherShapeFailsTheJobNamingBothSides) {
  auto worker0 = Client(0);
  auto worker1 = Client(1);
  CoordinatorClientOptions options;
  options.security.job_token = kToken;
  options.exit_when_member_lost = false;
  options.num_workers = 1;
  options.num_servers = 0;
  options.shape_source = "1 worker (no variable: one worker)";
  auto stranger = CoordinatorClient::Connect(target_, kJob, Role::kWorker, 2,
                                             absl::Seconds(10), options);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  absl::StatusOr<std::vector<Member>> joined0;
  std::thread join0([&] { joined0 = worker0->Join("a:1", absl::Seconds(30)); });
  auto refused = (*stranger)->Join("c:3", absl::Seconds(30));
  join0.join();
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("it sees a job of 1 workers and 0 servers (1 worker "
                        "(no variable: one worker)), but worker 0, which "
                        "hosts the coordinator, sees 3 workers and 0 "
                        "servers"));
  ASSERT_FALSE(joined0.ok());
  EXPECT_THAT(std::string(joined0.status().message()),
              HasSubstr("the job lost worker 2 (c:3"));
  EXPECT_THAT(std::string(joined0.status().message()),
              HasSubstr("refused at Join"));
  // A worker that comes later hears it at once too.
  auto late = worker1->Join("b:2", absl::Seconds(30));
  ASSERT_FALSE(late.ok());
  EXPECT_THAT(std::string(late.status().message()),
              HasSubstr("refused at Join"));
}

// A member that leaves with an error ends the job for the others, who hear
// its error as a loss; one that leaves normally does not.
TEST_F(MemberLossTest, LeavingWithAnErrorIsALossNamingIt) {
  auto worker0 = Client(0);
  auto worker1 = Client(1);
  auto worker2 = Client(2);
  std::thread join0([&] { (void)worker0->Join("a:1", absl::Seconds(30)); });
  std::thread join1([&] { (void)worker1->Join("b:2", absl::Seconds(30)); });
  ASSERT_TRUE(worker2->Join("c:3", absl::Seconds(30)).ok());
  join0.join();
  join1.join();
  absl::Notification heard;
  std::string loss;
  worker0->AddLossListener([&](const absl::Status& status) {
    loss = std::string(status.message());
    heard.Notify();
  });
  worker2->Leave(absl::NotFoundError("cannot read /data/train.gz"));
  ASSERT_TRUE(heard.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(loss, HasSubstr("the job lost worker 2 (c:3"));
  EXPECT_THAT(loss, HasSubstr("it failed: cannot read /data/train.gz"));
  const absl::Status barrier =
      worker1->Barrier("after", BarrierGroup::kWorkers, absl::Seconds(30));
  EXPECT_THAT(std::string(barrier.message()),
              HasSubstr("it failed: cannot read /data/train.gz"));
}

}  // namespace
}  // namespace gradsync
