#include "allreduce/algorithms/halving_doubling_allreduce.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/float_sum.h"
#include "core/base/power_of_two.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// Where virtual rank v (0..p-1) of the power-of-two core sits in the group.
int MemberOfVirtual(int v, int extra) {
  return v < extra ? 2 * v + 1 : v + extra;
}

// Block b of `blocks` as even as possible; the first count % blocks get one
// more float.
int64_t BlockOffset(int64_t count, int blocks, int b) {
  return b * (count / blocks) + std::min<int64_t>(b, count % blocks);
}

// One step's transfers with `partner`: blocks [send_lo, send_hi) of `data`
// (cut into `blocks` blocks of `count` floats in all) go out, blocks
// [receive_lo, receive_hi) come in, added (reduce-scatter) or copied
// (all-gather).
void SwapBlocks(PeerExchange& exchange, int partner, float* data, int64_t count,
                int blocks, int send_lo, int send_hi, int receive_lo,
                int receive_hi, bool add) {
  const int64_t send_offset = BlockOffset(count, blocks, send_lo);
  const int64_t receive_offset = BlockOffset(count, blocks, receive_lo);
  exchange.Send(partner, data + send_offset,
                BlockOffset(count, blocks, send_hi) - send_offset);
  exchange.Receive(partner, data + receive_offset,
                   BlockOffset(count, blocks, receive_hi) - receive_offset,
                   add);
}

}  // namespace

std::vector<int> HalvingDoublingPartners(int group_size, int index) {
  const int p = static_cast<int>(LargestPowerOfTwoAtMost(group_size));
  const int extra = group_size - p;
  std::set<int> partners;
  if (index < 2 * extra) {
    partners.insert(index % 2 == 0 ? index + 1 : index - 1);
    if (index % 2 == 0) return {partners.begin(), partners.end()};
  }
  const int v = index < 2 * extra ? index / 2 : index - extra;
  for (int mask = 1; mask < p; mask *= 2) {
    partners.insert(MemberOfVirtual(v ^ mask, extra));
  }
  return {partners.begin(), partners.end()};
}

absl::Status HalvingDoublingInGroup(PeerExchange& exchange,
                                    const std::vector<int>& members, int index,
                                    float* data, int64_t count, float scale,
                                    RoundLabel* label) {
  const int n = static_cast<int>(members.size());
  const int p = static_cast<int>(LargestPowerOfTwoAtMost(n));
  const int extra = n - p;
  auto run = [&](const std::string& what) {
    label->what = what;
    absl::Status status = exchange.Run(*label);
    ++label->round;
    return status;
  };
  int steps = 0;  // log2 p
  for (int m = 1; m < p; m *= 2) ++steps;
  if (n == 1) {
    if (scale != 1.0f) ScaleInPlace(data, count, scale);
    return absl::OkStatus();
  }
  // Fold: the extra ranks hand their buffer to their odd partner.
  if (index < 2 * extra && index % 2 == 0) {
    const int partner = members[index + 1];
    exchange.Send(partner, data, count);
    RETURN_IF_ERROR(run("the fold of an extra rank into its partner"));
    // Round numbers agree across the group: skip the core's rounds.
    label->round += 2 * steps;
    exchange.Receive(partner, data, count, /*add=*/false);
    return run("the result's return to an extra rank");
  }
  if (index < 2 * extra) {
    exchange.Receive(members[index - 1], data, count, /*add=*/true);
    RETURN_IF_ERROR(run("the fold of an extra rank into its partner"));
  } else if (extra > 0) {
    // Keep round numbers equal on every rank of the group.
    ++label->round;
  }
  const int v = index < 2 * extra ? index / 2 : index - extra;
  int lo = 0;
  int hi = p;
  int step = 0;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = members[MemberOfVirtual(v ^ mask, extra)];
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (v & mask) == 0;
    const int keep_lo = lower ? lo : mid;
    const int keep_hi = lower ? mid : hi;
    const int send_lo = lower ? mid : lo;
    const int send_hi = lower ? hi : mid;
    SwapBlocks(exchange, partner, data, count, p, send_lo, send_hi, keep_lo,
               keep_hi, /*add=*/true);
    RETURN_IF_ERROR(
        run(absl::StrCat("reduce-scatter step ", ++step, " of ", steps)));
    lo = keep_lo;
    hi = keep_hi;
  }
  // This rank's block is final: average it once, here, so the all-gather
  // spreads averaged values.
  if (scale != 1.0f) {
    const int64_t offset = BlockOffset(count, p, lo);
    ScaleInPlace(data + offset, BlockOffset(count, p, hi) - offset, scale);
  }
  step = 0;
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = members[MemberOfVirtual(v ^ mask, extra)];
    const int size = hi - lo;
    const bool lower = (v & mask) == 0;
    const int their_lo = lower ? hi : lo - size;
    const int their_hi = their_lo + size;
    SwapBlocks(exchange, partner, data, count, p, lo, hi, their_lo, their_hi,
               /*add=*/false);
    RETURN_IF_ERROR(
        run(absl::StrCat("all-gather step ", ++step, " of ", steps)));
    lo = std::min(lo, their_lo);
    hi = std::max(hi, their_hi);
  }
  if (index < 2 * extra) {
    exchange.Send(members[index - 1], data, count);
    return run("the result's return to an extra rank");
  }
  if (extra > 0) ++label->round;
  return absl::OkStatus();
}

HalvingDoublingAllReduce::HalvingDoublingAllReduce(PeerTransport* transport,
                                                   int64_t chunk_bytes)
    : transport_(transport),
      exchange_(transport, chunk_bytes, "halving_doubling") {}

std::vector<int> HalvingDoublingAllReduce::Peers(int rank, int world_size) {
  return HalvingDoublingPartners(world_size, rank);
}

absl::Status HalvingDoublingAllReduce::Run(float* data, int64_t count,
                                           float scale, uint32_t tag) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("halving_doubling rank ", transport_->rank(),
                     ": broken in an earlier all-reduce: ", broken_.message()));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("halving_doubling: negative element count ", count));
  }
  if (count == 0) return absl::OkStatus();
  const int n = transport_->world_size();
  std::vector<int> members(n);
  for (int i = 0; i < n; ++i) members[i] = i;
  RoundLabel label{sequence_++, tag, 0, ""};
  absl::Status status = HalvingDoublingInGroup(
      exchange_, members, transport_->rank(), data, count, scale, &label);
  if (!status.ok()) {
    // The streams are out of step: break every connection so the peers fail
    // now rather than at their deadline.
    transport_->Abort();
    broken_ = status;
  }
  return status;
}

}  // namespace gradsync
