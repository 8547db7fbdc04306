#include "allreduce/selecting_allreduce.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace gradsync {
SelectingAllReduce::SelectingAllReduce(RingTransport* transport,
                                       int64_t chunk_bytes)
    : transport_(transport), chunk_bytes_(chunk_bytes) {
  algorithms_["ring"] = std::make_unique<RingAllReduce>(transport, chunk_bytes);
  algorithms_["halving_doubling"] =
      std::make_unique<HalvingDoublingAllReduce>(transport, chunk_bytes);
  algorithms_["tree"] = std::make_unique<TreeAllReduce>(transport, chunk_bytes);
}

std::vector<int> SelectingAllReduce::Peers(int rank, int world_size) {
  std::set<int> peers;
  for (int peer : HalvingDoublingAllReduce::Peers(rank, world_size)) {
    peers.insert(peer);
  }
  for (int peer : TreeAllReduce::Peers(rank, world_size)) peers.insert(peer);
  const int partner = ProbePartner(rank, world_size);
  if (partner >= 0) peers.insert(partner);
  return {peers.begin(), peers.end()};
}

absl::StatusOr<std::unique_ptr<SelectingAllReduce>> SelectingAllReduce::Create(
    RingTransport* transport, int64_t chunk_bytes, const LinkCost& link) {
  std::unique_ptr<SelectingAllReduce> selector(
      new SelectingAllReduce(transport, chunk_bytes));
  selector->link_ = link;
  if ((link.alpha_s <= 0 || link.bytes_per_s <= 0) &&
      transport->world_size() > 1) {
    ASSIGN_OR_RETURN(selector->probe_,
                     ProbePeerLink(transport, chunk_bytes,
                                   *selector->algorithms_["ring"]));
    selector->link_ = selector->probe_.link;
  }
  return selector;
}

std::string SelectingAllReduce::Choose(int n, double bytes,
                                       const LinkCost& link) {
  const double predictions[3] = {
      RingAllReduceSeconds(n, bytes, link),
      HalvingDoublingAllReduceSeconds(n, bytes, link),
      TreeAllReduceSeconds(n, bytes, link)};
  const char* names[3] = {"ring", "halving_doubling", "tree"};
  // Strictly lower to replace: the ring on a tie.
  int best = 0;
  for (int i = 1; i < 3; ++i) {
    if (predictions[i] < predictions[best]) best = i;
  }
  return names[best];
}

std::string SelectingAllReduce::Pick(int64_t count) const {
  return Choose(transport_->world_size(), count * 4.0, link_);
}

absl::Status SelectingAllReduce::Run(float* data, int64_t count, float scale,
                                     uint32_t tag) {
  const std::string pick = Pick(count);
  auto [it, first] = picks_.emplace(tag, pick);
  if (first) {
    const int n = transport_->world_size();
    GS_LOG(INFO) << "allreduce: tag " << tag << " (" << count * 4
                 << " bytes) -> " << pick << "; predicted ring "
                 << RingAllReduceSeconds(n, count * 4.0, link_) * 1e6
                 << " us, halving_doubling "
                 << HalvingDoublingAllReduceSeconds(n, count * 4.0, link_) * 1e6
                 << " us, tree "
                 << TreeAllReduceSeconds(n, count * 4.0, link_) * 1e6
                 << " us (alpha " << link_.alpha_s * 1e6 << " us, B "
                 << link_.bytes_per_s / 1e9 << " GB/s)";
  } else {
    it->second = pick;
  }
  ++pick_counts_[pick];
  return algorithms_[pick]->Run(data, count, scale, tag);
}

int64_t SelectingAllReduce::bytes_sent() const {
  int64_t total = 0;
  for (const auto& [name, algorithm] : algorithms_) {
    total += algorithm->bytes_sent();
  }
  return total;
}

int64_t SelectingAllReduce::bytes_received() const {
  int64_t total = 0;
  for (const auto& [name, algorithm] : algorithms_) {
    total += algorithm->bytes_received();
  }
  return total;
}

std::string SelectingAllReduce::SummaryJson() const {
  nlohmann::json picks = nlohmann::json::object();
  for (const auto& [tag, name] : picks_) picks[std::to_string(tag)] = name;
  nlohmann::json summary = {
      {"alpha_us", link_.alpha_s * 1e6},
      {"bandwidth_GBps", link_.bytes_per_s / 1e9},
      {"link_source", probed() ? "probed on the job's connections" : "given"},
      {"probe_round_trip_us", probe_.round_trip_us},
      {"probe_pairs", probe_.pairs},
      {"pick_by_bucket", picks},
      {"runs_by_algorithm", pick_counts_},
  };
  return summary.dump();
}

}  // namespace gradsync
