#include "allreduce/algorithms/selecting_allreduce.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace gradsync {

CandidateLinks CandidateLinks::Uniform(const LinkCost& link) {
  CandidateLinks links;
  links.uniform_ = link;
  return links;
}

const LinkCost& CandidateLinks::For(AllReduceKind kind) const {
  const auto it = own_.find(kind);
  return it != own_.end() ? it->second : uniform_;
}

LinkCost& CandidateLinks::operator[](AllReduceKind kind) {
  return own_.emplace(kind, uniform_).first->second;
}

double CalibrationSeconds(std::vector<double> runs) {
  if (runs.empty()) return 0;
  std::sort(runs.begin(), runs.end());
  const size_t middle = runs.size() / 2;
  return runs.size() % 2 == 1 ? runs[middle]
                              : (runs[middle - 1] + runs[middle]) / 2;
}

SelectingAllReduce::SelectingAllReduce(PeerTransport* transport,
                                       int64_t chunk_bytes)
    : transport_(transport), chunk_bytes_(chunk_bytes) {}

absl::StatusOr<std::unique_ptr<SelectingAllReduce>> SelectingAllReduce::Create(
    PeerTransport* transport, const AlgorithmOptions& options,
    std::vector<const AllReduceEntry*> candidates) {
  if (candidates.empty()) {
    return absl::InvalidArgumentError("allreduce: no candidate algorithms");
  }
  for (const AllReduceEntry* entry : candidates) {
    if (entry->predict == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allreduce: ", entry->name, " has no prediction to pick it by"));
    }
  }
  std::unique_ptr<SelectingAllReduce> selector(
      new SelectingAllReduce(transport, options.chunk_bytes));
  selector->entries_ = candidates;
  selector->link_ = options.link;
  // The first candidate carries the probe's averages, so it exists first.
  ASSIGN_OR_RETURN(std::unique_ptr<AllReduceAlgorithm> first,
                   candidates[0]->create(transport, options));
  selector->candidates_.push_back({candidates[0], std::move(first)});
  const bool probe =
      (options.link.alpha_s <= 0 || options.link.bytes_per_s <= 0) &&
      transport->world_size() > 1;
  if (probe) {
    ASSIGN_OR_RETURN(selector->probe_,
                     ProbePeerLink(transport, options.chunk_bytes,
                                   *selector->candidates_[0].algorithm));
    selector->link_ = selector->probe_.link;
  }
  selector->links_ = CandidateLinks::Uniform(selector->link_);
  // The rest with the resolved link: the tree sizes its slices by it and,
  // given one, probes nothing itself.
  AlgorithmOptions resolved = options;
  resolved.link = selector->link_;
  for (size_t i = 1; i < candidates.size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<AllReduceAlgorithm> algorithm,
                     candidates[i]->create(transport, resolved));
    selector->candidates_.push_back({candidates[i], std::move(algorithm)});
  }
  if (probe) RETURN_IF_ERROR(selector->CalibrateLatencies());
  return selector;
}

absl::Status SelectingAllReduce::CalibrateLatencies() {
  const int n = transport_->world_size();
  const int k = static_cast<int>(candidates_.size());
  constexpr int kWarmup = 2;
  constexpr int kRuns = 8;
  // N·16 floats: every ring segment is non-empty, so all 2(N-1) steps wait
  // on their predecessor (a one-float ring skips its empty steps).
  const int64_t count = int64_t{n} * 16;
  std::vector<float> buffer(count, 0.0f);
  // Every rank's figure in its own slot, zeros elsewhere: a sum all-reduce
  // then gives every rank all of them, and each candidate is charged its
  // slowest rank's time, the one a step waits for.
  std::vector<float> by_rank(k * n, 0.0f);
  const int rank = transport_->rank();
  AllReduceAlgorithm& first = *candidates_[0].algorithm;
  float token = 1.0f;
  for (int i = 0; i < k; ++i) {
    AllReduceAlgorithm& algorithm = *candidates_[i].algorithm;
    for (int r = 0; r < kWarmup; ++r) {
      RETURN_IF_ERROR(
          algorithm.Run(buffer.data(), count, 1.0f, kCalibrationRunTag));
    }
    // Enter the timed runs as a job enters a bucket's all-reduce: together
    // up to the skew an all-reduce leaves (a one-float ring), not in the lock
    // step the warm-up runs may have settled into.
    RETURN_IF_ERROR(first.Run(&token, 1, 1.0f, kCalibrationStartTag));
    std::vector<double> runs;
    absl::Time start = absl::Now();
    for (int r = 0; r < kRuns; ++r) {
      RETURN_IF_ERROR(
          algorithm.Run(buffer.data(), count, 1.0f, kCalibrationRunTag));
      const absl::Time end = absl::Now();
      runs.push_back(absl::ToDoubleSeconds(end - start));
      start = end;
    }
    by_rank[i * n + rank] = static_cast<float>(CalibrationSeconds(runs));
  }
  RETURN_IF_ERROR(first.Run(by_rank.data(), k * n, 1.0f, kCalibrationShareTag));
  for (int i = 0; i < k; ++i) {
    const double seconds = *std::max_element(by_rank.begin() + i * n,
                                             by_rank.begin() + (i + 1) * n);
    const AllReduceEntry& entry = *candidates_[i].entry;
    // The formula at zero bytes with α = 1 counts the latencies it charges.
    const double latencies =
        entry.predict(n, 0, LinkCost{1.0, link_.bytes_per_s}, 0);
    LinkCost& target = links_[entry.kind];
    target.bytes_per_s = link_.bytes_per_s;
    // A tiny buffer's bytes take a few microseconds at any B this runs on;
    // never below the wire's own α (a run faster than the probe).
    target.alpha_s = std::max(link_.alpha_s, seconds / latencies);
  }
  return absl::OkStatus();
}

const AllReduceEntry& SelectingAllReduce::Choose(
    const std::vector<const AllReduceEntry*>& candidates, int n, double bytes,
    const CandidateLinks& links, double eager_bytes) {
  // Strictly lower to replace: the first on a tie.
  const AllReduceEntry* best = nullptr;
  double best_seconds = 0;
  for (const AllReduceEntry* entry : candidates) {
    const double seconds =
        entry->predict(n, bytes, links.For(entry->kind), eager_bytes);
    if (best == nullptr || seconds < best_seconds) {
      best = entry;
      best_seconds = seconds;
    }
  }
  return *best;
}

const AllReduceEntry& SelectingAllReduce::Pick(int64_t count) const {
  return Choose(entries_, transport_->world_size(), count * 4.0, links_,
                static_cast<double>(eager_bytes_));
}

int SelectingAllReduce::IndexOf(const AllReduceEntry& entry) const {
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].entry == &entry) return static_cast<int>(i);
  }
  return 0;
}

absl::Status SelectingAllReduce::Run(float* data, int64_t count, float scale,
                                     uint32_t tag) {
  const AllReduceEntry& pick = Pick(count);
  auto [it, first] = picks_.emplace(tag, &pick);
  if (first) {
    const int n = transport_->world_size();
    std::vector<std::string> predicted;
    std::vector<std::string> alphas;
    std::vector<std::string> names;
    for (const Candidate& candidate : candidates_) {
      const AllReduceEntry& entry = *candidate.entry;
      const LinkCost& link = links_.For(entry.kind);
      predicted.push_back(absl::StrCat(
          entry.name, " ",
          entry.predict(n, count * 4.0, link, eager_bytes_) * 1e6, " us"));
      names.push_back(entry.name);
      alphas.push_back(absl::StrCat(link.alpha_s * 1e6));
    }
    GS_LOG(INFO) << "allreduce: tag " << tag << " (" << count * 4
                 << " bytes) -> " << pick.name << "; predicted "
                 << absl::StrJoin(predicted, ", ") << " (alpha "
                 << absl::StrJoin(names, "/") << " "
                 << absl::StrJoin(alphas, "/") << " us, B "
                 << link_.bytes_per_s / 1e9 << " GB/s)";
  } else {
    it->second = &pick;
  }
  Candidate& candidate = candidates_[IndexOf(pick)];
  ++candidate.runs;
  return candidate.algorithm->Run(data, count, scale, tag);
}

void SelectingAllReduce::SetEagerBytes(int64_t bytes) {
  eager_bytes_ = bytes;
  for (Candidate& candidate : candidates_) {
    candidate.algorithm->SetEagerBytes(bytes);
  }
}

int64_t SelectingAllReduce::bytes_sent() const {
  int64_t total = 0;
  for (const Candidate& candidate : candidates_) {
    total += candidate.algorithm->bytes_sent();
  }
  return total;
}

int64_t SelectingAllReduce::bytes_received() const {
  int64_t total = 0;
  for (const Candidate& candidate : candidates_) {
    total += candidate.algorithm->bytes_received();
  }
  return total;
}

std::string SelectingAllReduce::SummaryJson() const {
  nlohmann::json picks = nlohmann::json::object();
  for (const auto& [tag, entry] : picks_) {
    picks[std::to_string(tag)] = entry->name;
  }
  nlohmann::json alphas = nlohmann::json::object();
  nlohmann::json runs = nlohmann::json::object();
  for (const Candidate& candidate : candidates_) {
    const AllReduceEntry& entry = *candidate.entry;
    alphas[entry.name] = links_.For(entry.kind).alpha_s * 1e6;
    if (candidate.runs > 0) runs[entry.name] = candidate.runs;
  }
  nlohmann::json summary = {
      {"alpha_us", link_.alpha_s * 1e6},
      {"alpha_us_by_algorithm", alphas},
      {"bandwidth_GBps", link_.bytes_per_s / 1e9},
      {"link_source", probed() ? "probed on the job's connections" : "given"},
      {"probe_round_trip_us", probe_.round_trip_us},
      {"probe_pairs", probe_.pairs},
      {"pick_by_bucket", picks},
      {"runs_by_algorithm", runs},
  };
  return summary.dump();
}

}  // namespace gradsync
