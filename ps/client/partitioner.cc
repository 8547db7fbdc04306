// Chunking and largest-first assignment of keys to parameter servers.
#include "ps/client/partitioner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gradsync {

absl::StatusOr<PartitionPolicy> ParsePartitionPolicy(const std::string& name) {
  if (name == "equal") return PartitionPolicy::kEqual;
  if (name == "balanced") return PartitionPolicy::kBalanced;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --ps_partition=", name,
      "; choose equal (every server the same bytes) or balanced (serving "
      "workers less, so every link carries the same bytes)"));
}

const char* PartitionPolicyName(PartitionPolicy policy) {
  return policy == PartitionPolicy::kBalanced ? "balanced" : "equal";
}

absl::StatusOr<std::vector<double>> ServerShares(PartitionPolicy policy,
                                                 int num_workers, int colocated,
                                                 int separate) {
  if (num_workers < 1 || colocated < 0 || colocated > num_workers ||
      separate < 0 || colocated + separate < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partitioner: ", colocated, " colocated and ", separate,
        " separate servers in a job of ", num_workers,
        " workers; need at least one server and at most one per worker"));
  }
  const int k = colocated + separate;
  std::vector<double> shares(k, 1.0 / k);
  if (policy == PartitionPolicy::kEqual || colocated == 0 || separate == 0 ||
      num_workers == 1) {
    return shares;
  }
  const double n = num_workers, c = colocated, s = separate;
  // Equates a serving worker's link, S + (N-2)f_c S, with a separate
  // server's, N f_s S (partitioner.h).
  const double colocated_share = std::max(0.0, (n - s) / (s * (n - 2) + n * c));
  const double separate_share = (1.0 - c * colocated_share) / s;
  for (int i = 0; i < k; ++i) {
    shares[i] = i < colocated ? colocated_share : separate_share;
  }
  return shares;
}

absl::StatusOr<Partition> Partition::Create(const ParamLayout& layout,
                                            int num_servers,
                                            int64_t chunk_bytes) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partitioner: ", num_servers, " parameter servers; need at least one"));
  }
  return Create(layout, std::vector<double>(num_servers, 1.0 / num_servers),
                chunk_bytes);
}

absl::StatusOr<Partition> Partition::Create(const ParamLayout& layout,
                                            std::vector<double> shares,
                                            int64_t chunk_bytes) {
  const int num_servers = static_cast<int>(shares.size());
  if (num_servers < 1) {
    return absl::InvalidArgumentError(
        "partitioner: no parameter servers; need at least one");
  }
  double sum = 0;
  for (int s = 0; s < num_servers; ++s) {
    if (!(shares[s] >= 0.0) || shares[s] > 1.0) {
      return absl::InvalidArgumentError(absl::StrCat("partitioner: server ", s,
                                                     "'s share ", shares[s],
                                                     " is not in [0, 1]"));
    }
    sum += shares[s];
  }
  if (std::abs(sum - 1.0) > 1e-9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partitioner: the servers' shares add up to ", sum, ", not 1"));
  }
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partitioner: chunk size ", chunk_bytes,
                     " B must be a positive multiple of 4 (one float)"));
  }
  Partition partition;
  partition.num_servers_ = num_servers;
  partition.shares_ = std::move(shares);
  partition.chunk_bytes_ = chunk_bytes;
  const int64_t chunk_numel = chunk_bytes / 4;

  // A parameter of n floats becomes ceil(n / chunk) chunks of nearly equal
  // size (they differ by at most one float) rather than full chunks and a
  // small remainder: equal pieces balance better and no message is tiny.
  for (int p = 0; p < static_cast<int>(layout.params().size()); ++p) {
    const ParamInfo& param = layout.params()[p];
    // A row-sparse tensor (an embedding table) is cut on row boundaries, so
    // a key holds whole rows and its pushes are (row, values) pairs of its
    // own; the same rule in units of rows (1 float for dense tensors).
    const int64_t unit =
        param.spec.sparse_row_width > 0 &&
                param.numel % param.spec.sparse_row_width == 0
            ? param.spec.sparse_row_width
            : 1;
    const int64_t units = param.numel / unit;
    const int64_t chunk_units = std::max<int64_t>(1, chunk_numel / unit);
    const int64_t pieces = (units + chunk_units - 1) / chunk_units;
    const int64_t base = units / pieces;
    const int64_t extra = units % pieces;
    int64_t offset = param.offset;
    for (int64_t c = 0; c < pieces; ++c) {
      PsKey key;
      key.id = static_cast<int>(partition.keys_.size());
      key.param = p;
      key.chunk = static_cast<int>(c);
      key.bucket = param.bucket;
      key.offset = offset;
      key.numel = (base + (c < extra ? 1 : 0)) * unit;
      key.row_width = unit > 1 ? static_cast<int32_t>(unit) : 0;
      offset += key.numel;
      partition.keys_.push_back(key);
    }
  }

  // Largest first onto the server that, holding the key, is least full
  // relative to its target (ties to the lower rank); with equal targets this
  // is the least-loaded server. A server whose target is 0 gets nothing.
  std::vector<int> order(partition.keys_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&partition](int a, int b) {
    return partition.keys_[a].numel > partition.keys_[b].numel;
  });
  partition.server_bytes_.assign(num_servers, 0);
  partition.server_keys_.assign(num_servers, {});
  const std::vector<double>& targets = partition.shares_;
  for (int id : order) {
    const int64_t bytes = partition.keys_[id].numel * 4;
    int server = -1;
    double best_fill = 0;
    for (int s = 0; s < num_servers; ++s) {
      if (targets[s] <= 0) continue;
      const double fill = (partition.server_bytes_[s] + bytes) / targets[s];
      if (server < 0 || fill < best_fill) {
        server = s;
        best_fill = fill;
      }
    }
    partition.keys_[id].server = server;
    partition.server_bytes_[server] += partition.keys_[id].numel * 4;
  }
  partition.bucket_keys_.assign(layout.buckets().size(), {});
  for (const PsKey& key : partition.keys_) {
    partition.server_keys_[key.server].push_back(key.id);
    partition.bucket_keys_[key.bucket].push_back(key.id);
  }
  return partition;
}

double Partition::imbalance() const {
  const int64_t total =
      std::accumulate(server_bytes_.begin(), server_bytes_.end(), int64_t{0});
  if (total == 0) return 1.0;
  const int64_t max =
      *std::max_element(server_bytes_.begin(), server_bytes_.end());
  return static_cast<double>(max) * num_servers_ / static_cast<double>(total);
}

std::string Partition::Describe() const {
  std::string out =
      absl::StrCat(keys_.size(), " keys on ", num_servers_, " servers (chunk ",
                   chunk_bytes_ / 1024.0, " KiB):");
  for (int s = 0; s < num_servers_; ++s) {
    absl::StrAppendFormat(&out, " s%d %d keys %.3f MiB;", s,
                          server_keys_[s].size(),
                          server_bytes_[s] / (1024.0 * 1024.0));
  }
  absl::StrAppendFormat(&out, " max/mean %.3f", imbalance());
  if (std::any_of(shares_.begin(), shares_.end(),
                  [this](double share) { return share != shares_.front(); })) {
    absl::StrAppend(&out, "; target shares");
    for (double share : shares_) absl::StrAppendFormat(&out, " %.3f", share);
  }
  return out;
}

}  // namespace gradsync
