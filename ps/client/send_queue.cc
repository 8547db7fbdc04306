#include "ps/client/send_queue.h"

namespace gradsync {

void SendQueue::Add(const Item& item) { queue_.push(item); }

std::vector<SendQueue::Item> SendQueue::Take() {
  std::vector<Item> out;
  while (!queue_.empty()) {
    const Item& next = queue_.top();
    // Nothing in flight: the next key goes whatever its size, so a key
    // larger than the credit cannot stall the queue.
    if (credit_ > 0 && in_flight_items_ > 0 &&
        in_flight_ + next.bytes > credit_) {
      break;
    }
    in_flight_ += next.bytes;
    ++in_flight_items_;
    out.push_back(next);
    queue_.pop();
  }
  return out;
}

void SendQueue::Done(int64_t bytes) {
  in_flight_ -= bytes;
  --in_flight_items_;
}

std::vector<SendQueue::Item> SendQueue::Drain() {
  std::vector<Item> out;
  while (!queue_.empty()) {
    out.push_back(queue_.top());
    queue_.pop();
  }
  return out;
}

}  // namespace gradsync
