// --schedule=priority on the parameter server: one queue per server and
// direction (push, pull) that hands out ready keys lowest priority value
// first, keeping at most a credit of bytes in flight.
//
//      ready keys (any order)          in flight (<= credit bytes)
//   ┌────────────────────────┐       ┌──────────────────────────┐
//   │ key 9 (offset 900)     │  Take │ key 0 (offset 0)         │──> server
//   │ key 1 (offset 100) ◄── late    │                          │
//   └────────────────────────┘       └──────────────────────────┘
//                     Done(bytes) returns credit, then Take again
//
// A key that becomes ready late but is read sooner by the next forward (a
// lower offset in the flat buffer) is handed out before every key still
// queued, however long those have waited: only the bytes already in flight
// are ahead of it. One key is always let through when nothing is in flight,
// so a key larger than the credit still goes. No locks, no gRPC: the client
// calls it under its own mutex, and it is tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <vector>

namespace gradsync {

class SendQueue {
 public:
  struct Item {
    int64_t priority = 0;  // lower goes first (the key's offset)
    int64_t bytes = 0;     // counted against the credit while in flight
    void* payload = nullptr;
  };

  // credit_bytes <= 0: no bound (everything ready is handed out at once).
  explicit SendQueue(int64_t credit_bytes = 0) : credit_(credit_bytes) {}

  void Add(const Item& item);
  // The items that may start now, lowest priority value first; their bytes
  // count as in flight until Done.
  std::vector<Item> Take();
  // An item handed out by Take has completed (or failed).
  void Done(int64_t bytes);
  // Removes and returns every queued item (a failed step's), in order.
  std::vector<Item> Drain();

  int64_t in_flight_bytes() const { return in_flight_; }
  size_t queued() const { return queue_.size(); }
  int64_t credit_bytes() const { return credit_; }

 private:
  struct Later {
    bool operator()(const Item& a, const Item& b) const {
      return a.priority > b.priority;
    }
  };
  const int64_t credit_;
  int64_t in_flight_ = 0;
  int in_flight_items_ = 0;
  std::priority_queue<Item, std::vector<Item>, Later> queue_;
};

}  // namespace gradsync
