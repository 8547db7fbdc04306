#include "core/cluster/in_memory_rendezvous.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs body(rank) on one thread per rank and joins them.
template <typename Body>
void OnEveryRank(int n, Body body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) threads.emplace_back(body, rank);
  for (std::thread& thread : threads) thread.join();
}

TEST(InMemoryRendezvousTest, GetWaitsForTheKeyAndTimesOutNamingIt) {
  auto job = std::make_shared<InMemoryJob>(2, 0);
  InMemoryRendezvous a(job, Role::kWorker, 0), b(job, Role::kWorker, 1);
  std::thread setter([&] { ASSERT_TRUE(a.Set("k", "v").ok()); });
  auto value = b.Get("k", absl::Seconds(30));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");

  auto missing = b.Get("never", absl::Milliseconds(20));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("worker 1 waited"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'never'"));
}

TEST(InMemoryRendezvousTest, CollectivesGiveEveryRankTheRightValues) {
  const int n = 4;
  auto job = std::make_shared<InMemoryJob>(n, 0);
  std::vector<std::vector<std::string>> all(n), gathered(n);
  std::vector<std::string> broadcast(n);
  OnEveryRank(n, [&](int rank) {
    InMemoryRendezvous self(job, Role::kWorker, rank);
    const std::string mine = absl::StrCat("v", rank);
    all[rank] = *self.AllGather("all", rank, n, mine, absl::Seconds(30));
    gathered[rank] =
        *self.Gather("gather", rank, n, /*root=*/2, mine, absl::Seconds(30));
    broadcast[rank] =
        *self.Broadcast("b", rank, /*root=*/1, mine, absl::Seconds(30));
    EXPECT_TRUE(
        self.Barrier("end", BarrierGroup::kWorkers, absl::Seconds(30)).ok());
  });
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_THAT(all[rank], ElementsAre("v0", "v1", "v2", "v3"));
    EXPECT_EQ(broadcast[rank], "v1");
    if (rank == 2) {
      EXPECT_THAT(gathered[rank], ElementsAre("v0", "v1", "v2", "v3"));
    } else {
      EXPECT_TRUE(gathered[rank].empty());
    }
  }
}

TEST(InMemoryRendezvousTest, BarrierTimesOutSayingHowManyArrived) {
  auto job = std::make_shared<InMemoryJob>(2, 1);
  InMemoryRendezvous a(job, Role::kWorker, 0);
  absl::Status status =
      a.Barrier("b", BarrierGroup::kEveryone, absl::Milliseconds(20));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(status.message()), HasSubstr("1 of 3 arrived"));
}

TEST(InMemoryRendezvousTest, ALossReachesListenersWaitersAndExplanations) {
  auto job = std::make_shared<InMemoryJob>(2, 0);
  InMemoryRendezvous a(job, Role::kWorker, 0);
  std::atomic<int> heard{0};
  const int id = a.AddLossListener([&](const absl::Status& loss) {
    EXPECT_THAT(std::string(loss.message()), HasSubstr("worker 1"));
    ++heard;
  });
  EXPECT_FALSE(a.has_lost());
  // A waiter blocked on the lost member's key is released by the loss.
  std::thread waiter([&] {
    auto value = a.Get("from worker 1", absl::Seconds(30));
    EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
  });
  job->Lose("worker 1", "killed");
  waiter.join();
  job->Lose("worker 0", "a second loss is not reported");
  EXPECT_EQ(heard.load(), 1);
  EXPECT_TRUE(a.has_lost());
  EXPECT_THAT(std::string(a.lost().message()),
              HasSubstr("the job lost worker 1: killed"));
  // A listener added after the loss hears it at once, once.
  int late = 0;
  a.AddLossListener([&](const absl::Status&) { ++late; });
  EXPECT_EQ(late, 1);
  absl::Status explained = a.ExplainFailure(
      absl::UnavailableError("connection reset"), absl::Seconds(1));
  EXPECT_THAT(std::string(explained.message()),
              HasSubstr("the job lost worker 1: killed; so connection reset"));
  a.RemoveLossListener(id);
}

}  // namespace
}  // namespace gradsync
