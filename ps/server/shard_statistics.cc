// A shard's counters and per-worker SSP/ASP figures (see shard_statistics.h).
#include "ps/server/shard_statistics.h"

#include <algorithm>

namespace gradsync {

ShardStatistics::ShardStatistics(int num_workers)
    : num_workers_(num_workers),
      staleness_max_(num_workers, 0),
      staleness_sum_(num_workers, 0),
      staleness_count_(num_workers, 0),
      saved_ns_(num_workers, 0),
      reads_(num_workers, 0) {}

void ShardStatistics::RecordStaleness(int rank, int64_t staleness) {
  absl::MutexLock lock(&mu_);
  staleness_max_[rank] = std::max(staleness_max_[rank], staleness);
  staleness_sum_[rank] += staleness;
  ++staleness_count_[rank];
}

void ShardStatistics::AddWaitSaved(int worker, int64_t saved_ns) {
  absl::MutexLock lock(&mu_);
  saved_ns_[worker] += saved_ns;
}

void ShardStatistics::CountRead(int rank) {
  absl::MutexLock lock(&mu_);
  ++reads_[rank];
}

void ShardStatistics::AddTo(nlohmann::json& summary, bool per_worker) const {
  summary["key_steps"] = key_steps_.load();
  summary["bytes_in"] = bytes_in_.load();
  summary["bytes_out"] = bytes_out_.load();
  summary["parts_in"] = parts_in_.load();
  summary["pulls"] = pulls_.load();
  summary["blocks"] = blocks_.load();
  summary["sum_ms"] = sum_ns_.load() / 1e6;
  summary["update_ms"] = update_ns_.load() / 1e6;
  if (!per_worker) return;
  // The wait saved is the mean over its reads of a key (a pull answered no
  // earlier than BSP would have saved 0): how much earlier than BSP a pull
  // was answered, on average.
  nlohmann::json max = nlohmann::json::array();
  nlohmann::json mean = nlohmann::json::array();
  nlohmann::json saved = nlohmann::json::array();
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < num_workers_; ++r) {
    max.push_back(staleness_max_[r]);
    mean.push_back(staleness_count_[r] > 0
                       ? static_cast<double>(staleness_sum_[r]) /
                             staleness_count_[r]
                       : 0.0);
    saved.push_back(reads_[r] > 0 ? saved_ns_[r] / 1e6 / reads_[r] : 0.0);
  }
  summary["staleness_max"] = max;
  summary["staleness_mean"] = mean;
  summary["wait_saved_ms_mean"] = saved;
}

}  // namespace gradsync
