// Chunking and largest-first assignment of keys to parameter servers.
#include "ps/partitioner.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gradsync {

absl::StatusOr<Partition> Partition::Create(const ParamLayout& layout,
                                            int num_servers,
                                            int64_t chunk_bytes) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partitioner: ", num_servers, " parameter servers; need at least one"));
  }
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partitioner: chunk size ", chunk_bytes,
                     " B must be a positive multiple of 4 (one float)"));
  }
  Partition partition;
  partition.num_servers_ = num_servers;
  partition.chunk_bytes_ = chunk_bytes;
  const int64_t chunk_numel = chunk_bytes / 4;

  // A parameter of n floats becomes ceil(n / chunk) chunks of nearly equal
  // size (they differ by at most one float) rather than full chunks and a
  // small remainder: equal pieces balance better and no message is tiny.
  for (int p = 0; p < static_cast<int>(layout.params().size()); ++p) {
    const ParamInfo& param = layout.params()[p];
    const int64_t pieces = (param.numel + chunk_numel - 1) / chunk_numel;
    const int64_t base = param.numel / pieces;
    const int64_t extra = param.numel % pieces;
    int64_t offset = param.offset;
    for (int64_t c = 0; c < pieces; ++c) {
      PsKey key;
      key.id = static_cast<int>(partition.keys_.size());
      key.param = p;
      key.chunk = static_cast<int>(c);
      key.bucket = param.bucket;
      key.offset = offset;
      key.numel = base + (c < extra ? 1 : 0);
      offset += key.numel;
      partition.keys_.push_back(key);
    }
  }

  // Largest first onto the least-loaded server.
  std::vector<int> order(partition.keys_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&partition](int a, int b) {
    return partition.keys_[a].numel > partition.keys_[b].numel;
  });
  partition.server_bytes_.assign(num_servers, 0);
  partition.server_keys_.assign(num_servers, {});
  for (int id : order) {
    const int server =
        static_cast<int>(std::min_element(partition.server_bytes_.begin(),
                                          partition.server_bytes_.end()) -
                         partition.server_bytes_.begin());
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
  return out;
}

}  // namespace gradsync
