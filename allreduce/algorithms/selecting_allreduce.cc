#include "allreduce/algorithms/selecting_allreduce.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace gradsync {

const LinkCost& CandidateLinks::For(const std::string& algorithm) const {
  if (algorithm == "halving_doubling") return halving_doubling;
  if (algorithm == "tree") return tree;
  return ring;
}

SelectingAllReduce::SelectingAllReduce(PeerTransport* transport,
                                       int64_t chunk_bytes)
    : transport_(transport), chunk_bytes_(chunk_bytes) {
  algorithms_["ring"] = std::make_unique<RingAllReduce>(transport, chunk_bytes);
  algorithms_["halving_doubling"] =
      std::make_unique<HalvingDoublingAllReduce>(transport, chunk_bytes);
  auto tree = std::make_unique<TreeAllReduce>(transport, chunk_bytes);
  tree_ = tree.get();
  algorithms_["tree"] = std::move(tree);
}

double CalibrationSeconds(std::vector<double> runs) {
  if (runs.empty()) return 0;
  std::sort(runs.begin(), runs.end());
  const size_t middle = runs.size() / 2;
  return runs.size() % 2 == 1 ? runs[middle]
                              : (runs[middle - 1] + runs[middle]) / 2;
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
    PeerTransport* transport, int64_t chunk_bytes, const LinkCost& link) {
  std::unique_ptr<SelectingAllReduce> selector(
      new SelectingAllReduce(transport, chunk_bytes));
  selector->link_ = link;
  selector->links_ = CandidateLinks::Uniform(link);
  if ((link.alpha_s <= 0 || link.bytes_per_s <= 0) &&
      transport->world_size() > 1) {
    ASSIGN_OR_RETURN(selector->probe_,
                     ProbePeerLink(transport, chunk_bytes,
                                   *selector->algorithms_["ring"]));
    selector->link_ = selector->probe_.link;
    RETURN_IF_ERROR(selector->CalibrateLatencies());
  }
  selector->tree_->SetLink(selector->link_);
  return selector;
}

absl::Status SelectingAllReduce::CalibrateLatencies() {
  const int n = transport_->world_size();
  constexpr int kWarmup = 2;
  constexpr int kRuns = 8;
  // N·16 floats: every ring segment is non-empty, so all 2(N-1) steps wait
  // on their predecessor (a one-float ring skips its empty steps).
  const int64_t count = int64_t{n} * 16;
  std::vector<float> buffer(count, 0.0f);
  // Every rank's figure in its own slot, zeros elsewhere: a sum all-reduce
  // then gives every rank all of them, and each candidate is charged its
  // slowest rank's time, the one a step waits for.
  std::vector<float> by_rank(3 * n, 0.0f);
  const int rank = transport_->rank();
  float token = 1.0f;
  for (int i = 0; i < 3; ++i) {
    AllReduceAlgorithm& algorithm = *algorithms_[kCandidates[i]];
    for (int r = 0; r < kWarmup; ++r) {
      RETURN_IF_ERROR(algorithm.Run(buffer.data(), count, 1.0f, 0xFFFFFF10u));
    }
    // Enter the timed runs as a job enters a bucket's all-reduce: together
    // up to the skew an all-reduce leaves (a one-float ring), not in the lock
    // step the warm-up runs may have settled into.
    RETURN_IF_ERROR(algorithms_["ring"]->Run(&token, 1, 1.0f, 0xFFFFFF12u));
    std::vector<double> runs;
    absl::Time start = absl::Now();
    for (int r = 0; r < kRuns; ++r) {
      RETURN_IF_ERROR(algorithm.Run(buffer.data(), count, 1.0f, 0xFFFFFF10u));
      const absl::Time end = absl::Now();
      runs.push_back(absl::ToDoubleSeconds(end - start));
      start = end;
    }
    by_rank[i * n + rank] = static_cast<float>(CalibrationSeconds(runs));
  }
  RETURN_IF_ERROR(
      algorithms_["ring"]->Run(by_rank.data(), 3 * n, 1.0f, 0xFFFFFF11u));
  double seconds[3];
  for (int i = 0; i < 3; ++i) {
    seconds[i] = *std::max_element(by_rank.begin() + i * n,
                                   by_rank.begin() + (i + 1) * n);
  }
  LinkCost* targets[3] = {&links_.ring, &links_.halving_doubling, &links_.tree};
  for (int i = 0; i < 3; ++i) {
    // The formula at zero bytes with α = 1 counts the latencies it charges.
    const double latencies =
        Predict(kCandidates[i], n, 0, LinkCost{1.0, link_.bytes_per_s});
    targets[i]->bytes_per_s = link_.bytes_per_s;
    // A tiny buffer's bytes take a few microseconds at any B this runs on;
    // never below the wire's own α (a run faster than the probe).
    targets[i]->alpha_s =
        std::max(link_.alpha_s, seconds[i] / latencies);
  }
  return absl::OkStatus();
}

double SelectingAllReduce::Predict(const std::string& algorithm, int n,
                                   double bytes, const LinkCost& link,
                                   double eager_bytes) {
  if (algorithm == "halving_doubling") {
    return HalvingDoublingAllReduceSeconds(n, bytes, link, eager_bytes);
  }
  if (algorithm == "tree") {
    return TreeAllReduceSeconds(n, bytes, link, eager_bytes);
  }
  return RingAllReduceSeconds(n, bytes, link);
}

std::string SelectingAllReduce::Choose(int n, double bytes,
                                       const CandidateLinks& links,
                                       double eager_bytes) {
  // Strictly lower to replace: the ring on a tie.
  int best = 0;
  double best_seconds = Predict(kCandidates[0], n, bytes, links.ring);
  for (int i = 1; i < 3; ++i) {
    const double seconds = Predict(kCandidates[i], n, bytes,
                                   links.For(kCandidates[i]), eager_bytes);
    if (seconds < best_seconds) {
      best = i;
      best_seconds = seconds;
    }
  }
  return kCandidates[best];
}

std::string SelectingAllReduce::Pick(int64_t count) const {
  return Choose(transport_->world_size(), count * 4.0, links_,
                static_cast<double>(eager_bytes_));
}

absl::Status SelectingAllReduce::Run(float* data, int64_t count, float scale,
                                     uint32_t tag) {
  const std::string pick = Pick(count);
  auto [it, first] = picks_.emplace(tag, pick);
  if (first) {
    const int n = transport_->world_size();
    GS_LOG(INFO) << "allreduce: tag " << tag << " (" << count * 4
                 << " bytes) -> " << pick << "; predicted ring "
                 << Predict("ring", n, count * 4.0, links_.ring) * 1e6
                 << " us, halving_doubling "
                 << Predict("halving_doubling", n, count * 4.0,
                            links_.halving_doubling, eager_bytes_) *
                        1e6
                 << " us, tree "
                 << Predict("tree", n, count * 4.0, links_.tree) * 1e6
                 << " us (alpha ring/hd/tree " << links_.ring.alpha_s * 1e6
                 << "/" << links_.halving_doubling.alpha_s * 1e6 << "/"
                 << links_.tree.alpha_s * 1e6 << " us, B "
                 << link_.bytes_per_s / 1e9 << " GB/s)";
  } else {
    it->second = pick;
  }
  ++pick_counts_[pick];
  return algorithms_[pick]->Run(data, count, scale, tag);
}

void SelectingAllReduce::SetEagerBytes(int64_t bytes) {
  eager_bytes_ = bytes;
  for (auto& [name, algorithm] : algorithms_) algorithm->SetEagerBytes(bytes);
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
      {"alpha_us_by_algorithm",
       {{"ring", links_.ring.alpha_s * 1e6},
        {"halving_doubling", links_.halving_doubling.alpha_s * 1e6},
        {"tree", links_.tree.alpha_s * 1e6}}},
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
