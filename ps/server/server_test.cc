// The parameter server over real gRPC on 127.0.0.1: bad input is refused with
// a status that names the problem, leaves the server's state alone, and the
// client reports it without hanging.
#include "ps/server/server.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/parameter_server.grpc.pb.h"
#include "core/sync/compression.h"
#include "ps/client/client.h"
#include "ps/client/partitioner.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "server-test";

class ServerTest : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 2;

  void SetUp() override {
    ParameterServerOptions options;
    options.job_id = kJob;
    options.num_workers = kWorkers;
    options.message_bytes = 8;  // two floats: keys travel in several parts
    auto server = ParameterServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
    // Two parameters of 5 and 3 floats, one bucket, one key each.
    auto layout = ParamLayout::Create({{"w", {5}}, {"b", {3}}}, 0);
    ASSERT_TRUE(layout.ok());
    layout_ = *layout;
    auto partition = Partition::Create(layout_, 1, 4096);
    ASSERT_TRUE(partition.ok());
    partition_ = *partition;
    stub_ = ps::ParameterServer::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<PsClient> MakeClient(int rank, const std::string& job = kJob,
                                       const Partition* partition = nullptr,
                                       int64_t message_bytes = 8) {
    PsClientOptions options;
    options.job_id = job;
    options.rank = rank;
    options.num_workers = kWorkers;
    options.timeout = absl::Seconds(10);
    options.message_bytes = message_bytes;
    auto client = PsClient::Create(
        options, partition != nullptr ? *partition : partition_, {address_});
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  // Pushes one raw part of key 0 (5 floats) on its own stream.
  grpc::Status RawPush(int rank, int64_t step, int64_t key, int64_t key_numel,
                       const std::vector<float>& values,
                       const std::string& job = kJob) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    ps::PushReply reply;
    auto writer = stub_->Push(&context, &reply);
    ps::KeyPart part;
    part.mutable_header()->set_job_id(job);
    part.mutable_header()->set_rank(rank);
    part.mutable_header()->set_step(step);
    part.mutable_header()->set_key(key);
    part.set_key_numel(key_numel);
    part.set_offset(0);
    part.mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                                values.size() * 4);
    writer->Write(part);
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<ParameterServer> server_;
  std::string address_;
  ParamLayout layout_;
  Partition partition_;
  std::unique_ptr<ps::ParameterServer::Stub> stub_;
};

TEST_F(ServerTest, BadPushesOverGrpcAreRefusedAndChangeNothing) {
  auto worker0 = MakeClient(0);
  auto worker1 = MakeClient(1);
  ASSERT_TRUE(worker0->Register(nullptr).ok());
  ASSERT_TRUE(worker1->Register(nullptr).ok());
  // Worker 0 pushes both keys of step 0 (synchronously, so the checks below
  // see its push complete).
  ASSERT_TRUE(RawPush(0, 0, 0, 5, {1, 2, 3, 4, 5}).ok());
  ASSERT_TRUE(RawPush(0, 0, 1, 3, {6, 7, 8}).ok());
  const std::string before = server_->SummaryJson();

  struct Case {
    const char* name;
    grpc::Status status;
    grpc::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"wrong size", RawPush(1, 0, 0, 6, {1, 2, 3, 4, 5, 6}),
       grpc::StatusCode::INVALID_ARGUMENT, "this server's has 5"},
      {"unknown key", RawPush(1, 0, 42, 5, {1, 2, 3, 4, 5}),
       grpc::StatusCode::INVALID_ARGUMENT, "unknown key 42"},
      {"second push", RawPush(0, 0, 0, 5, {1, 2, 3, 4, 5}),
       grpc::StatusCode::ALREADY_EXISTS, "worker 0 already pushed"},
      {"ahead", RawPush(1, 2, 0, 5, {1, 2, 3, 4, 5}),
       grpc::StatusCode::OUT_OF_RANGE, "too far ahead"},
      {"unknown rank", RawPush(7, 0, 0, 5, {1, 2, 3, 4, 5}),
       grpc::StatusCode::INVALID_ARGUMENT, "unknown worker rank 7"},
      {"wrong job", RawPush(1, 0, 0, 5, {1, 2, 3, 4, 5}, "other"),
       grpc::StatusCode::FAILED_PRECONDITION, "job id 'other'"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.error_code(), c.code)
        << c.name << ": " << c.status.error_message();
    EXPECT_THAT(c.status.error_message(), HasSubstr(c.message)) << c.name;
  }
  // Sums, steps and counters are as they were.
  EXPECT_EQ(server_->SummaryJson(), before);

  // Nothing from the bad pushes was summed: the step completes with exactly
  // worker 0's and worker 1's gradients.
  std::vector<float> grads1 = {10, 20, 30, 40, 50, 60, 70, 80};
  std::vector<float> out1(8, -1.0f);
  worker1->StartBucket(0, 0, grads1.data(), out1.data());
  PsStepStats stats;
  ASSERT_TRUE(worker1->WaitAll(&stats).ok());
  EXPECT_EQ(out1,
            (std::vector<float>{5.5f, 11, 16.5f, 22, 27.5f, 33, 38.5f, 44}));
  EXPECT_EQ(stats.bytes_to_server, std::vector<int64_t>{32});
  EXPECT_EQ(stats.bytes_from_server, std::vector<int64_t>{32});
  // The step from the past, now that step 0 is complete.
  grpc::Status past = RawPush(1, 0, 0, 5, {1, 2, 3, 4, 5});
  EXPECT_EQ(past.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(past.error_message(), HasSubstr("in the past"));
}

TEST_F(ServerTest, ClientReportsASecondPushAndDoesNotHang) {
  // Whole keys per message, so whichever of the two pushes comes second is
  // refused at its first message as a duplicate.
  auto worker0 = MakeClient(0, kJob, nullptr, 4096);
  auto worker1 = MakeClient(1);
  ASSERT_TRUE(worker0->Register(nullptr).ok());
  ASSERT_TRUE(worker1->Register(nullptr).ok());
  std::vector<float> grads(8, 1.0f);
  std::vector<float> out(8);
  worker0->StartBucket(0, 0, grads.data(), out.data());
  worker0->StartBucket(0, 0, grads.data(), out.data());
  // Worker 1 never pushes; the error must come back at once, not after the
  // 10 s deadline of the pulls, which the client cancels.
  absl::Status status = worker0->WaitAll(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("worker 0: push of bucket 0"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(address_));
  EXPECT_THAT(std::string(status.message()), HasSubstr("already pushed"));
}

TEST_F(ServerTest, ClientReportsAStepTooFarAhead) {
  auto worker0 = MakeClient(0);
  ASSERT_TRUE(worker0->Register(nullptr).ok());
  std::vector<float> grads(8, 1.0f);
  std::vector<float> out(8);
  worker0->StartBucket(0, 5, grads.data(), out.data());
  absl::Status status = worker0->WaitAll(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("step 5 is too far ahead"));
}

TEST_F(ServerTest, RegistrationErrorsNameTheProblem) {
  absl::Status wrong_job = MakeClient(0, "other-job")->Register(nullptr);
  EXPECT_EQ(wrong_job.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong_job.message()),
              HasSubstr("job id 'other-job'"));
  EXPECT_THAT(std::string(wrong_job.message()),
              HasSubstr("registering with server 0"));

  PsClientOptions options;
  options.job_id = kJob;
  options.rank = 5;
  options.num_workers = kWorkers;
  options.timeout = absl::Seconds(10);
  auto stranger = PsClient::Create(options, partition_, {address_});
  ASSERT_TRUE(stranger.ok());
  absl::Status unknown_rank = (*stranger)->Register(nullptr);
  EXPECT_THAT(std::string(unknown_rank.message()),
              HasSubstr("unknown worker rank 5"));

  ASSERT_TRUE(MakeClient(0)->Register(nullptr).ok());
  // Worker 1 runs with another chunk size: 5 floats become two keys.
  auto other = Partition::Create(layout_, 1, 12);
  ASSERT_TRUE(other.ok());
  absl::Status table = MakeClient(1, kJob, &*other)->Register(nullptr);
  EXPECT_EQ(table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(table.message()), HasSubstr("--ps_chunk_kb"));
}

TEST_F(ServerTest, WaitForShutdownNamesWorkersThatWentAway) {
  auto worker0 = MakeClient(0);
  ASSERT_TRUE(worker0->Register(nullptr).ok());
  std::vector<std::string> summaries;
  ASSERT_TRUE(worker0->Shutdown(0, &summaries).ok());
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(summaries[0]).value("server", -1), 0);
  absl::Status status = server_->WaitForShutdown(absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("worker(s) 1 never said"));
  // Once worker 1 says so too, the wait ends at once.
  ASSERT_TRUE(MakeClient(1)->Shutdown(0, nullptr).ok());
  EXPECT_TRUE(server_->WaitForShutdown(absl::Seconds(10)).ok());
}

// Under --compression a bad encoding is refused over gRPC with one error
// naming the server, the worker, the step and the key.
TEST_F(ServerTest, BadEncodedPushesOverGrpcAreRefused) {
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    PsClientOptions options;
    options.job_id = kJob;
    options.rank = rank;
    options.num_workers = kWorkers;
    options.timeout = absl::Seconds(10);
    options.message_bytes = 8;
    options.compression = "topk:0.4";
    options.pull = "union";
    auto client = PsClient::Create(options, partition_, {address_});
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Register(nullptr).ok());
    workers.push_back(std::move(*client));
  }
  auto encoded_push = [&](const EncodedBucket& encoded) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    ps::PushReply reply;
    auto writer = stub_->Push(&context, &reply);
    ps::KeyPart part;
    part.mutable_header()->set_job_id(kJob);
    part.mutable_header()->set_rank(1);
    part.mutable_header()->set_step(0);
    part.mutable_header()->set_key(0);
    part.set_key_numel(5);
    AppendSerialized(encoded, part.mutable_data());
    part.set_encoded_bytes(static_cast<int64_t>(part.data().size()));
    writer->Write(part);
    writer->WritesDone();
    return writer->Finish();
  };
  EncodedBucket pairs = TopKOf(std::vector<float>{1, 2, 3, 4, 5}, 2);
  pairs.index.back() = 7;  // past the key's 5 floats
  grpc::Status status = encoded_push(pairs);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("server 0: push from worker 1, step 0, key 0: "));
  EXPECT_THAT(status.error_message(), HasSubstr("out of order or range"));
  // Float32 from a worker that forgot --compression.
  grpc::Status plain = RawPush(1, 0, 0, 5, {1, 2, 3, 4, 5});
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(plain.error_message(),
              HasSubstr("pushed float32 data but this key takes (index, "
                        "value) pairs"));
}

}  // namespace
}  // namespace gradsync
