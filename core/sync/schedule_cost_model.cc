#include "core/sync/schedule_cost_model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gradsync {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
// The most transfers one step is timed with: partitions far smaller than a
// model's tensors would make the timeline long for nothing.
constexpr double kMaxTransfers = 1 << 20;

// One transfer: a whole bucket (fifo) or a partition of one (priority).
struct Transfer {
  int bucket = 0;
  double offset = 0;  // bytes before it in forward order: its priority
  double bytes = 0;
  double ready_s = 0;
  // fifo's order: the order backward hands the buckets over.
  int hand_off = 0;
  double end_s = 0;
};

absl::Status CheckInputs(const std::vector<ModelBucket>& buckets) {
  if (buckets.empty()) {
    return absl::InvalidArgumentError("a step needs at least one bucket");
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    const ModelBucket& b = buckets[i];
    for (const auto& [name, value] :
         {std::pair<const char*, double>{"bytes", b.bytes},
          {"backward_s", b.backward_s},
          {"forward_s", b.forward_s}}) {
      if (!std::isfinite(value) || value < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bucket ", i, ": ", name, " is ", value, "; need a number >= 0"));
      }
    }
  }
  return absl::OkStatus();
}

// The transfers of the step: whole buckets under fifo, partitions of at most
// `partition_bytes` (the last of a bucket shorter) under priority.
std::vector<Transfer> CutTransfers(const std::vector<ModelBucket>& buckets,
                                   const ScheduleModelOptions& options) {
  const int m = static_cast<int>(buckets.size());
  std::vector<double> ready(m);
  double backward = 0;
  for (int i = m - 1; i >= 0; --i) {
    backward += buckets[i].backward_s;
    ready[i] = backward;
  }
  const bool cut =
      options.kind == ScheduleKind::kPriority && options.partition_bytes > 0;
  std::vector<Transfer> transfers;
  double offset = 0;
  for (int i = 0; i < m; ++i) {
    const double bytes = buckets[i].bytes;
    double done = 0;
    do {
      const double piece =
          cut ? std::min(options.partition_bytes, bytes - done) : bytes;
      Transfer t;
      t.bucket = i;
      t.offset = offset + done;
      t.bytes = piece;
      t.ready_s = ready[i];
      t.hand_off = m - 1 - i;
      transfers.push_back(t);
      done += piece;
    } while (done < bytes);
    offset += bytes;
  }
  return transfers;
}

// Whether `a` goes to the link before `b` when both are ready.
bool SentFirst(const Transfer& a, const Transfer& b, ScheduleKind kind) {
  if (kind == ScheduleKind::kPriority) return a.offset < b.offset;
  return a.hand_off < b.hand_off;
}

}  // namespace

absl::StatusOr<std::vector<double>> BackwardFromReadyTimes(
    const std::vector<double>& ready_s) {
  std::vector<double> backward(ready_s.size());
  double later = 0;  // the ready time of the bucket after i in forward order
  for (int i = static_cast<int>(ready_s.size()) - 1; i >= 0; --i) {
    if (!std::isfinite(ready_s[i]) || ready_s[i] < later) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", i, " is ready at ", ready_s[i],
                       " s; need a time >= 0 and no earlier than bucket ",
                       i + 1, "'s (backward runs from the last layer)"));
    }
    backward[i] = ready_s[i] - later;
    later = ready_s[i];
  }
  return backward;
}

std::vector<double> SpreadByBytes(const std::vector<double>& bytes,
                                  double total_s) {
  double sum = 0;
  for (double b : bytes) sum += b;
  std::vector<double> spread(bytes.size(), 0.0);
  if (sum <= 0) return spread;
  for (size_t i = 0; i < bytes.size(); ++i) {
    spread[i] = total_s * bytes[i] / sum;
  }
  return spread;
}

absl::StatusOr<ScheduledStep> PredictScheduledStep(
    const std::vector<ModelBucket>& buckets,
    const ScheduleModelOptions& options, const TransferSeconds& transfer) {
  if (absl::Status status = CheckInputs(buckets); !status.ok()) return status;
  if (options.kind == ScheduleKind::kPriority && options.partition_bytes > 0) {
    double partitions = 0;
    for (const ModelBucket& b : buckets) {
      partitions += std::max(1.0, std::ceil(b.bytes / options.partition_bytes));
    }
    if (partitions > kMaxTransfers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "partitions of ", options.partition_bytes,
          " bytes cut the step into ", partitions, " transfers; at most ",
          kMaxTransfers, " are timed: give larger partitions"));
    }
  }
  std::vector<Transfer> transfers = CutTransfers(buckets, options);
  // fifo hands every ready bucket over at once: an unbounded credit.
  const double credit = options.kind == ScheduleKind::kFifo ? kNever
                        : options.credit_bytes > 0 ? options.credit_bytes
                                                   : 0;

  // Not yet ready, by ready time; ready, with the one sent first on top.
  std::vector<int> waiting(transfers.size());
  for (size_t i = 0; i < waiting.size(); ++i) waiting[i] = static_cast<int>(i);
  std::stable_sort(waiting.begin(), waiting.end(), [&](int a, int b) {
    return transfers[a].ready_s < transfers[b].ready_s;
  });
  const auto sent_later = [&](int a, int b) {
    if (SentFirst(transfers[b], transfers[a], options.kind)) return true;
    if (SentFirst(transfers[a], transfers[b], options.kind)) return false;
    return a > b;
  };
  std::priority_queue<int, std::vector<int>, decltype(sent_later)> ready(
      sent_later);
  // Handed over and not yet ended, in the order handed over: the link is one
  // queue, so they also end in that order.
  std::deque<int> in_flight;
  double in_flight_bytes = 0;

  ScheduledStep step;
  double now = 0;
  double link_free = 0;
  size_t next_waiting = 0;
  size_t left = transfers.size();
  while (left > 0) {
    while (!in_flight.empty() && transfers[in_flight.front()].end_s <= now) {
      in_flight_bytes -= transfers[in_flight.front()].bytes;
      in_flight.pop_front();
    }
    if (in_flight.empty()) in_flight_bytes = 0;  // no rounding left behind
    while (next_waiting < waiting.size() &&
           transfers[waiting[next_waiting]].ready_s <= now) {
      ready.push(waiting[next_waiting++]);
    }
    // Hand over the ready transfers in order while the credit allows.
    while (!ready.empty()) {
      Transfer& next = transfers[ready.top()];
      if (!in_flight.empty() && in_flight_bytes + next.bytes > credit) break;
      const double seconds = transfer(next.bytes);
      if (!std::isfinite(seconds) || seconds < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("the transfer time of ", next.bytes, " bytes is ",
                         seconds, "; need a number >= 0"));
      }
      next.end_s = std::max(now, link_free) + seconds;
      link_free = next.end_s;
      step.comm_s += seconds;
      ++step.transfers;
      in_flight.push_back(ready.top());
      in_flight_bytes += next.bytes;
      ready.pop();
      --left;
    }
    if (left == 0) break;
    // The next moment something changes: a bucket becomes ready, or the
    // oldest transfer handed over ends and frees credit.
    double later = kNever;
    if (next_waiting < waiting.size()) {
      later = transfers[waiting[next_waiting]].ready_s;
    }
    if (!in_flight.empty()) {
      later = std::min(later, transfers[in_flight.front()].end_s);
    }
    now = later;
  }

  // The tail ends the step's last transfer.
  Transfer* last = &transfers.front();
  for (Transfer& t : transfers) {
    if (t.end_s > last->end_s) last = &t;
  }
  last->end_s += options.tail_s;
  step.comm_end_s = last->end_s;
  step.bucket_done_s.assign(buckets.size(), 0.0);
  for (const Transfer& t : transfers) {
    step.bucket_done_s[t.bucket] =
        std::max(step.bucket_done_s[t.bucket], t.end_s);
  }

  for (const ModelBucket& b : buckets) {
    step.backward_s += b.backward_s;
    step.forward_s += b.forward_s;
  }
  // The next forward, bucket by bucket, from the end of backward.
  double clock = step.backward_s;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double needed =
        options.overlap_next_forward ? step.bucket_done_s[i] : step.comm_end_s;
    clock = std::max(clock, needed) + buckets[i].forward_s;
  }
  step.exposed_s = std::max(0.0, clock - step.backward_s - step.forward_s);
  step.step_s = step.backward_s + step.forward_s + step.exposed_s;
  return step;
}

}  // namespace gradsync
