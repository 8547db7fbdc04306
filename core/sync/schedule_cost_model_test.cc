#include "core/sync/schedule_cost_model.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Three buckets of one byte-unit each in forward order, one second of
// backward and one of forward per bucket: bucket 2 is ready at 1 s, bucket 1
// at 2 s, bucket 0 at 3 s, when backward ends and the next forward may start.
std::vector<ModelBucket> ThreeBuckets() {
  return {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
}

// A link without latency that moves a byte-unit in `seconds_per_unit`.
TransferSeconds Bandwidth(double seconds_per_unit) {
  return [seconds_per_unit](double bytes) { return seconds_per_unit * bytes; };
}

ScheduleModelOptions Priority(double partition_bytes = 0,
                              double credit_bytes = 0) {
  ScheduleModelOptions options;
  options.kind = ScheduleKind::kPriority;
  options.partition_bytes = partition_bytes;
  options.credit_bytes = credit_bytes;
  return options;
}

// Comparable: a bucket takes 2 s on the link and 1 s of backward, so a queue
// forms and its order matters.
//   fifo:      link 2 [1,3], 1 [3,5], 0 [5,7]; forward waits for 0 until 7:
//              7 + 3 of forward = 10, exposed 10 − 6 = 4.
//   priority:  link 2 [1,3]; at 3 both 1 and 0 are ready, 0 goes first
//              [3,5], then 1 [5,7]; forward 0 [5,6], 1 [7,8], 2 [8,9]:
//              exposed 9 − 6 = 3.
TEST(ScheduleCostModelTest, PriorityFirstLayersFirstWhenAQueueForms) {
  const auto fifo = PredictScheduledStep(ThreeBuckets(), ScheduleModelOptions{},
                                         Bandwidth(2));
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  EXPECT_THAT(fifo->bucket_done_s, ElementsAre(7, 5, 3));
  EXPECT_DOUBLE_EQ(fifo->exposed_s, 4);
  EXPECT_DOUBLE_EQ(fifo->step_s, 10);
  EXPECT_DOUBLE_EQ(fifo->comm_s, 6);
  EXPECT_EQ(fifo->transfers, 3);

  const auto priority =
      PredictScheduledStep(ThreeBuckets(), Priority(), Bandwidth(2));
  ASSERT_TRUE(priority.ok()) << priority.status();
  EXPECT_THAT(priority->bucket_done_s, ElementsAre(5, 7, 3));
  EXPECT_DOUBLE_EQ(priority->exposed_s, 3);
  EXPECT_DOUBLE_EQ(priority->step_s, 9);
  // The same bytes moved, the same link time: only the order changed.
  EXPECT_DOUBLE_EQ(priority->comm_s, fifo->comm_s);
  EXPECT_DOUBLE_EQ(priority->comm_end_s, fifo->comm_end_s);
}

// Partitions of half a unit (1 s each) let bucket 1 overtake the rest of
// bucket 2, and bucket 0 overtake the rest of both:
//   link: 2a [1,2], 1a [2,3], 0a [3,4], 0b [4,5], 1b [5,6], 2b [6,7]
//   forward: 0 [5,6], 1 [6,7], 2 [7,8]: exposed 8 − 6 = 2.
TEST(ScheduleCostModelTest, PartitionsOvertakeQueuedWork) {
  const auto step =
      PredictScheduledStep(ThreeBuckets(), Priority(0.5), Bandwidth(2));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->transfers, 6);
  EXPECT_THAT(step->bucket_done_s, ElementsAre(5, 6, 7));
  EXPECT_DOUBLE_EQ(step->exposed_s, 2);
  EXPECT_DOUBLE_EQ(step->step_s, 8);
}

// A credit that holds every partition hands each over the moment it is
// ready, so nothing can overtake: fifo's timeline again. A credit of two
// partitions lets a late partition overtake only what is not yet handed
// over:
//   at 1: 2a [1,2] and 2b [2,3] handed over; at 2: 1a [3,4] (1b waits: the
//   credit is full); at 3: 0a [4,5] overtakes 1b; at 4: 0b [5,6]; at 5:
//   1b [6,7]. Forward 0 [6,7], 1 [7,8], 2 [8,9]: exposed 3, between
//   one partition's 2 and fifo's 4.
TEST(ScheduleCostModelTest, TheCreditBoundsWhatALatePartitionOvertakes) {
  const auto fifo = PredictScheduledStep(ThreeBuckets(), ScheduleModelOptions{},
                                         Bandwidth(2));
  ASSERT_TRUE(fifo.ok());
  const auto everything =
      PredictScheduledStep(ThreeBuckets(), Priority(0.5, 3), Bandwidth(2));
  ASSERT_TRUE(everything.ok());
  EXPECT_THAT(everything->bucket_done_s, ElementsAre(7, 5, 3));
  EXPECT_DOUBLE_EQ(everything->exposed_s, fifo->exposed_s);
  const auto two =
      PredictScheduledStep(ThreeBuckets(), Priority(0.5, 1), Bandwidth(2));
  ASSERT_TRUE(two.ok());
  EXPECT_THAT(two->bucket_done_s, ElementsAre(6, 7, 3));
  EXPECT_DOUBLE_EQ(two->exposed_s, 3);
}

// Compute-bound: a bucket takes 0.5 s on the link, less than the next
// bucket's backward, so the link is idle when each becomes ready and both
// orders are one: 2 [1,1.5], 1 [2,2.5], 0 [3,3.5]. Only bucket 0's own
// transfer shows: exposed 0.5 under either.
TEST(ScheduleCostModelTest, ComputeBoundPriorityGainsNothing) {
  const auto fifo = PredictScheduledStep(ThreeBuckets(), ScheduleModelOptions{},
                                         Bandwidth(0.5));
  const auto priority =
      PredictScheduledStep(ThreeBuckets(), Priority(), Bandwidth(0.5));
  ASSERT_TRUE(fifo.ok() && priority.ok());
  EXPECT_THAT(fifo->bucket_done_s, ElementsAre(3.5, 2.5, 1.5));
  EXPECT_THAT(priority->bucket_done_s, ElementsAre(3.5, 2.5, 1.5));
  EXPECT_DOUBLE_EQ(fifo->exposed_s, 0.5);
  EXPECT_DOUBLE_EQ(priority->exposed_s, 0.5);
  EXPECT_DOUBLE_EQ(priority->step_s, 6.5);
}

// Bandwidth-bound: 10 s a bucket. The link is busy from 1 s to 31 s under
// either order, and the last forward needs the last transfer; priority can
// hide only the forward of the layers it delivers earlier.
//   fifo:      2 [1,11], 1 [11,21], 0 [21,31]; forward 0 [31,32] ... 34:
//              exposed 28.
//   priority:  2 [1,11], 0 [11,21], 1 [21,31]; forward 0 [21,22],
//              1 [31,32], 2 [32,33]: exposed 27, one forward bucket saved.
// With no forward time to overlap (a model whose compute is all backward),
// nothing at all.
TEST(ScheduleCostModelTest, BandwidthBoundPriorityGainsAtMostTheForward) {
  const auto fifo = PredictScheduledStep(ThreeBuckets(), ScheduleModelOptions{},
                                         Bandwidth(10));
  const auto priority =
      PredictScheduledStep(ThreeBuckets(), Priority(), Bandwidth(10));
  ASSERT_TRUE(fifo.ok() && priority.ok());
  EXPECT_DOUBLE_EQ(fifo->exposed_s, 28);
  EXPECT_DOUBLE_EQ(priority->exposed_s, 27);
  EXPECT_DOUBLE_EQ(fifo->step_s, 34);
  EXPECT_DOUBLE_EQ(priority->step_s, 33);

  std::vector<ModelBucket> backward_only = {{1, 1, 0}, {1, 1, 0}, {1, 1, 0}};
  const auto fifo0 = PredictScheduledStep(backward_only, ScheduleModelOptions{},
                                          Bandwidth(10));
  const auto priority0 =
      PredictScheduledStep(backward_only, Priority(0.25), Bandwidth(10));
  ASSERT_TRUE(fifo0.ok() && priority0.ok());
  EXPECT_DOUBLE_EQ(fifo0->exposed_s, 28);  // 31 − 3
  EXPECT_DOUBLE_EQ(priority0->exposed_s, 28);
}

// Without the overlap the next forward waits for every bucket: the order no
// longer matters, only the end of the queue (7 s in the comparable case).
TEST(ScheduleCostModelTest, WithoutOverlapTheOrderDoesNotMatter) {
  ScheduleModelOptions fifo_options;
  fifo_options.overlap_next_forward = false;
  ScheduleModelOptions priority_options = Priority(0.5);
  priority_options.overlap_next_forward = false;
  const auto fifo =
      PredictScheduledStep(ThreeBuckets(), fifo_options, Bandwidth(2));
  const auto priority =
      PredictScheduledStep(ThreeBuckets(), priority_options, Bandwidth(2));
  ASSERT_TRUE(fifo.ok() && priority.ok());
  EXPECT_DOUBLE_EQ(fifo->exposed_s, 4);
  EXPECT_DOUBLE_EQ(priority->exposed_s, 4);
}

// Each partition is its own synchronization and pays the latency again:
// with α = 1 s, six partitions cost three more seconds of link than three
// buckets.
TEST(ScheduleCostModelTest, PartitionsPayTheirLatencyEach) {
  const TransferSeconds alpha_beta = [](double bytes) { return 1 + bytes; };
  const auto fifo =
      PredictScheduledStep(ThreeBuckets(), ScheduleModelOptions{}, alpha_beta);
  const auto priority =
      PredictScheduledStep(ThreeBuckets(), Priority(0.5), alpha_beta);
  ASSERT_TRUE(fifo.ok() && priority.ok());
  EXPECT_DOUBLE_EQ(fifo->comm_s, 6);
  EXPECT_DOUBLE_EQ(priority->comm_s, 9);
  EXPECT_EQ(priority->transfers, 6);
}

// The tail ends the step's last transfer: bucket 0 under fifo (the forward
// waits for all of it), bucket 1 under priority in the comparable case.
TEST(ScheduleCostModelTest, TheTailFollowsTheLastTransfer) {
  ScheduleModelOptions fifo_options;
  fifo_options.tail_s = 0.5;
  ScheduleModelOptions priority_options = Priority();
  priority_options.tail_s = 0.5;
  const auto fifo =
      PredictScheduledStep(ThreeBuckets(), fifo_options, Bandwidth(2));
  const auto priority =
      PredictScheduledStep(ThreeBuckets(), priority_options, Bandwidth(2));
  ASSERT_TRUE(fifo.ok() && priority.ok());
  EXPECT_THAT(fifo->bucket_done_s, ElementsAre(7.5, 5, 3));
  EXPECT_DOUBLE_EQ(fifo->exposed_s, 4.5);
  EXPECT_THAT(priority->bucket_done_s, ElementsAre(5, 7.5, 3));
  EXPECT_DOUBLE_EQ(priority->exposed_s, 3.5);  // forward 1 waits until 7.5
  EXPECT_DOUBLE_EQ(priority->comm_end_s, 7.5);
}

TEST(ScheduleCostModelTest, RefusesNoBucketsAndBadNumbers) {
  EXPECT_THAT(PredictScheduledStep({}, ScheduleModelOptions{}, Bandwidth(1))
                  .status()
                  .message(),
              HasSubstr("at least one bucket"));
  EXPECT_THAT(PredictScheduledStep({{1, 1, 1}, {-1, 1, 1}},
                                   ScheduleModelOptions{}, Bandwidth(1))
                  .status()
                  .message(),
              HasSubstr("bucket 1: bytes is -1"));
  EXPECT_THAT(
      PredictScheduledStep({{1, 1, 1}}, ScheduleModelOptions{}, Bandwidth(-1))
          .status()
          .message(),
      HasSubstr("transfer time"));
}

// A large model in small partitions is timed quickly (the ready partitions
// are kept in a heap), and partitions past the limit are refused by name.
TEST(ScheduleCostModelTest, ManyPartitionsAndTooMany) {
  std::vector<ModelBucket> model(40, ModelBucket{25e6, 0.01, 0.005});
  const auto step =
      PredictScheduledStep(model, Priority(65536), Bandwidth(1e-9));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->transfers, 40 * 382);  // ceil(25e6 / 65536) per bucket
  EXPECT_NEAR(step->comm_s, 1.0, 1e-9);
  EXPECT_THAT(PredictScheduledStep(model, Priority(4), Bandwidth(1e-9))
                  .status()
                  .message(),
              HasSubstr("give larger partitions"));
}

TEST(ScheduleCostModelTest, BackwardTimesFromReadyTimes) {
  // Bucket 2 ready at 1 s, bucket 1 at 2 s, bucket 0 at 3.5 s.
  const auto backward = BackwardFromReadyTimes({3.5, 2, 1});
  ASSERT_TRUE(backward.ok()) << backward.status();
  EXPECT_THAT(*backward, ElementsAre(1.5, 1, 1));
  EXPECT_THAT(BackwardFromReadyTimes({1, 2}).status().message(),
              HasSubstr("bucket 0 is ready at 1 s; need a time >= 0 and no "
                        "earlier than bucket 1's"));
  EXPECT_FALSE(BackwardFromReadyTimes({-1}).ok());
}

TEST(ScheduleCostModelTest, SpreadByBytesIsProportional) {
  EXPECT_THAT(SpreadByBytes({1, 3}, 8), ElementsAre(2, 6));
  EXPECT_THAT(SpreadByBytes({0, 0}, 8), ElementsAre(0, 0));
}

}  // namespace
}  // namespace gradsync
