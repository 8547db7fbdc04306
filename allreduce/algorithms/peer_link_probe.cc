#include "allreduce/algorithms/peer_link_probe.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "core/base/power_of_two.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

constexpr uint32_t kProbeTag = 0xFFFFFF00u;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int ProbePartner(int rank, int world_size) {
  const int p = static_cast<int>(LargestPowerOfTwoAtMost(world_size));
  if (p < 2 || rank >= p) return -1;
  return rank ^ (p / 2);
}

std::string PeerLinkProbeResult::ToJson() const {
  return nlohmann::json{{"alpha_us", link.alpha_s * 1e6},
                        {"bandwidth_GBps", link.bytes_per_s / 1e9},
                        {"round_trip_us", round_trip_us},
                        {"pairs", pairs}}
      .dump();
}

absl::StatusOr<PeerLinkProbeResult> ProbePeerLink(
    PeerTransport* transport, int64_t chunk_bytes, AllReduceAlgorithm& average,
    const PeerLinkProbeOptions& options) {
  const int rank = transport->rank();
  const int n = transport->world_size();
  const int partner = ProbePartner(rank, n);
  if (options.round_trips < 1 || options.repeats < 1 ||
      options.small_bytes < 4 || options.large_bytes <= options.small_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link probe: needs round_trips and repeats >= 1 and 4 <= small_bytes "
        "< large_bytes; got ",
        options.round_trips, ", ", options.repeats, ", ", options.small_bytes,
        ", ", options.large_bytes));
  }
  if (partner >= 0 && transport->peer(partner) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "link probe: rank ", rank, " has no connection to its partner, rank ",
        partner, " (create the transport with ProbePartner among its peers)"));
  }

  // Per rank: {α·weight, weight, seconds per GB·weight, weight}, summed over
  // the ranks.
  float figures[4] = {0, 0, 0, 0};
  if (partner >= 0) {
    PeerExchange exchange(transport, chunk_bytes, "link probe");
    // The probe measures the link itself: one partner, nothing to wait for.
    exchange.set_eager_bytes(0);
    RoundLabel label{0, kProbeTag, 0, ""};
    const bool pinger = rank < partner;

    // Round trips of one float: the lower rank sends, the higher echoes what
    // it received. Two untimed first.
    float ping = static_cast<float>(rank);
    float echo = 0;
    std::vector<double> trips;
    for (int i = 0; i < options.round_trips + 2; ++i) {
      label.what = absl::StrCat("round trip ", i + 1);
      if (pinger) {
        exchange.Send(partner, &ping, 1);
        exchange.Receive(partner, &echo, 1, /*add=*/false);
      } else {
        const int received = exchange.Receive(partner, &echo, 1, false);
        exchange.Send(partner, &echo, 1, {received});
      }
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(exchange.Run(label));
      if (i >= 2) trips.push_back(absl::ToDoubleSeconds(absl::Now() - start));
      ++label.round;
    }
    if (pinger) {
      figures[0] = static_cast<float>(Median(trips) / 2);
      figures[1] = 1;
    }

    // Two-way exchanges: one untimed large (TCP's slow start), then each
    // size `repeats` times.
    const int64_t large_count = options.large_bytes / 4;
    const int64_t small_count = options.small_bytes / 4;
    std::vector<float> out(large_count, 1.0f);
    std::vector<float> in(large_count);
    auto exchange_seconds = [&](int64_t count) -> absl::StatusOr<double> {
      label.what = absl::StrCat("two-way exchange of ", count * 4, " bytes");
      exchange.Send(partner, out.data(), count);
      exchange.Receive(partner, in.data(), count, /*add=*/false);
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(exchange.Run(label));
      ++label.round;
      return absl::ToDoubleSeconds(absl::Now() - start);
    };
    RETURN_IF_ERROR(exchange_seconds(large_count).status());
    std::vector<double> small_times, large_times;
    for (int i = 0; i < options.repeats; ++i) {
      ASSIGN_OR_RETURN(const double small, exchange_seconds(small_count));
      ASSIGN_OR_RETURN(const double large, exchange_seconds(large_count));
      small_times.push_back(small);
      large_times.push_back(large);
    }
    // A slope that is not positive is noise swamping the size difference
    // (a loaded machine, a fast loopback): then the large exchange's own
    // rate, latency included, a lower bound of B.
    const double large_s = Median(large_times);
    const double slope_s = large_s - Median(small_times);
    // Seconds per GB, not GB/s: the mean of times is what the ranks' rates
    // combine to (their harmonic mean), and one pair whose slope came out
    // near zero cannot inflate it (docs/results/allreduce_family.md, "Notes
    // from the code").
    figures[2] = static_cast<float>(
        slope_s > 0 ? slope_s / ((large_count - small_count) * 4.0 / 1e9)
                    : large_s / (large_count * 4.0 / 1e9));
    figures[3] = 1;
  }
  RETURN_IF_ERROR(average.Run(figures, 4, 1.0f, kProbeTag + 1));
  if (figures[1] <= 0 || figures[3] <= 0) {
    return absl::InternalError(absl::StrCat(
        "link probe: none of the ", n, " ranks has a partner to probe with"));
  }
  PeerLinkProbeResult result;
  result.pairs = static_cast<int>(figures[1]);
  result.link.alpha_s = figures[0] / figures[1];
  result.round_trip_us = 2e6 * result.link.alpha_s;
  result.link.bytes_per_s = 1e9 * figures[3] / figures[2];
  return result;
}

}  // namespace gradsync
