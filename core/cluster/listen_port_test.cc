// A listener's port is its job's alone: a second coordinator on a taken port
// fails at once saying the port is in use (no SO_REUSEPORT sharing), and a
// coordinator started without a job id names the job afresh, which a member
// given none learns when it connects.
#include "core/cluster/listen_port.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/cluster/coordinator.h"
#include "core/cluster/job_id.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ListenPortTest, SecondCoordinatorOnATakenPortIsRefusedNamingThePort) {
  auto first = CoordinatorServer::Start("127.0.0.1:0", "job-a", 1, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const absl::Status check = CheckPortFree(address);
  EXPECT_THAT(
      std::string(check.message()),
      HasSubstr(absl::StrCat("port ", port, " is in use (by another job?)")));
  auto second = CoordinatorServer::Start(address, "job-b", 1, 0);
  ASSERT_FALSE(second.ok()) << "two coordinators listen on port " << port;
  EXPECT_THAT(
      std::string(second.status().message()),
      HasSubstr(absl::StrCat("port ", port, " is in use (by another job?)")));
  // Every interface overlaps the loopback listener too.
  EXPECT_FALSE(
      CoordinatorServer::Start(absl::StrCat("0.0.0.0:", port), "job-c", 1, 0)
          .ok());
}

TEST(ListenPortTest, FreePortAndBadAddresses) {
  EXPECT_TRUE(CheckPortFree("127.0.0.1:0").ok());
  EXPECT_EQ(CheckPortFree("127.0.0.1").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPortFree("127.0.0.1:70000").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ListenPortTest, CoordinatorWithoutJobIdNamesTheJobAndMembersLearnIt) {
  auto server = CoordinatorServer::Start("127.0.0.1:0", "", 1, 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string id = (*server)->job_id();
  EXPECT_THAT(id, Not(HasSubstr("gradsync")));
  EXPECT_FALSE(id.empty());
  CoordinatorClientOptions options;
  options.exit_when_member_lost = false;
  auto client = CoordinatorClient::Connect(
      absl::StrCat("127.0.0.1:", (*server)->port()), "", Role::kWorker, 0,
      absl::Seconds(30), options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->job_id(), id);
  // Another coordinator started the same way names its job differently.
  auto other = CoordinatorServer::Start("127.0.0.1:0", "", 1, 0);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->job_id(), id);
  EXPECT_NE(NewJobId(), NewJobId());
}

}  // namespace
}  // namespace gradsync
