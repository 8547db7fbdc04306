// The priority queue with a credit behind --schedule=priority on the PS.
#include "ps/client/send_queue.h"

#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace {

std::vector<int64_t> Priorities(const std::vector<SendQueue::Item>& items) {
  std::vector<int64_t> out;
  for (const SendQueue::Item& item : items) out.push_back(item.priority);
  return out;
}

// Backward hands over the last layers first; keys beyond the credit wait.
// The first layer's key, ready last, goes before every key still queued
// as soon as credit frees: preemption of the queue, not of bytes in flight.
TEST(SendQueueTest, LateHighPriorityKeyOvertakesQueuedKeys) {
  SendQueue queue(/*credit_bytes=*/200);
  for (int64_t offset : {900, 800, 700, 600, 500}) {
    queue.Add({offset, 100, nullptr});
  }
  // Lowest offset among those ready first, two fit the credit.
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{500, 600}));
  EXPECT_EQ(queue.in_flight_bytes(), 200);
  EXPECT_EQ(queue.queued(), 3u);
  // The first layer's key becomes ready while 700, 800, 900 wait.
  queue.Add({0, 100, nullptr});
  EXPECT_TRUE(queue.Take().empty());  // the credit is spent
  queue.Done(100);
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{0}));
  queue.Done(100);
  queue.Done(100);
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{700, 800}));
  queue.Done(100);
  queue.Done(100);
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{900}));
  queue.Done(100);
  EXPECT_EQ(queue.in_flight_bytes(), 0);
  EXPECT_EQ(queue.queued(), 0u);
}

// A key larger than the credit still goes when nothing is in flight, and
// alone.
TEST(SendQueueTest, KeyLargerThanTheCreditGoesAlone) {
  SendQueue queue(/*credit_bytes=*/100);
  queue.Add({1, 500, nullptr});
  queue.Add({2, 50, nullptr});
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{1}));
  EXPECT_TRUE(queue.Take().empty());
  queue.Done(500);
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{2}));
}

// Without a credit everything ready goes at once, in priority order.
TEST(SendQueueTest, NoCreditHandsOutEverything) {
  SendQueue queue(0);
  for (int64_t offset : {3, 1, 2}) queue.Add({offset, 1 << 20, nullptr});
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{1, 2, 3}));
}

TEST(SendQueueTest, DrainEmptiesTheQueueInOrder) {
  SendQueue queue(10);
  for (int64_t offset : {5, 4, 6}) queue.Add({offset, 10, nullptr});
  EXPECT_EQ(Priorities(queue.Take()), (std::vector<int64_t>{4}));
  EXPECT_EQ(Priorities(queue.Drain()), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(queue.queued(), 0u);
}

}  // namespace
}  // namespace gradsync
