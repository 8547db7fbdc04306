// The partitioner: cuts the model's parameters into keys (chunks of at most
// --ps_chunk_kb) and assigns the keys to the K parameter servers so that each
// server holds about the same number of bytes.
//
// Assignment is greedy, largest key first, onto the least-loaded server (ties
// to the lower key id and the lower server rank), which is within 4/3 of the
// optimum (Graham's LPT bound) and, above all, deterministic: every worker
// computes the same partition from the same layout without talking to anyone,
// and the servers check at registration that they agree.
//
// The servers' targets need not be equal (--ps_partition=balanced): with c of
// the K servers inside workers (BytePS's placement spectrum) a serving
// worker's link carries more than a separate server's for the same share, so
// BalancedShares gives the serving workers less; keys then go largest first
// to the server that, holding the key, would be least full relative to its
// target (with equal targets: the least-loaded one, as above).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/param_layout.h"

namespace gradsync {

// One key: a chunk of one parameter.
struct PsKey {
  int id = 0;          // index into Partition::keys()
  int param = 0;       // index into ParamLayout::params()
  int chunk = 0;       // chunk index within the parameter
  int bucket = 0;      // the parameter's bucket
  int64_t offset = 0;  // in floats, within the flat buffer
  int64_t numel = 0;
  int server = 0;  // the server rank holding this key
  // A row-sparse tensor's row length (ParamInfo::sparse_row_width): the key
  // holds whole rows of it. 0 for a dense tensor's key.
  int32_t row_width = 0;
};

// How the servers' shares of the bytes are chosen (--ps_partition).
enum class PartitionPolicy {
  kEqual,     // 1/K each
  kBalanced,  // BalancedShares: the busiest link's bytes minimal
};

absl::StatusOr<PartitionPolicy> ParsePartitionPolicy(const std::string& name);
const char* PartitionPolicyName(PartitionPolicy policy);

// Each of the K = colocated + separate servers' target share of the bytes
// (servers 0..colocated-1 inside workers 0..colocated-1, the separate ones
// after them) in a job of `num_workers`. Per step and direction, with S the
// model's bytes, a serving worker's link carries its pushes to the other
// servers and its server's results to the other workers, S(1 - f_c) +
// (N-1)f_c S = S + (N-2)f_c S; a separate server's, N f_s S; a worker that
// does not serve, S. kBalanced equates the first two under c f_c + s f_s = 1:
//   f_c = (N - s) / (s(N - 2) + N c),   f_s = (1 - c f_c) / s,
// with f_c = 0 where s >= N (separate servers alone then keep every link at
// S) and equal shares where only one kind of server exists or N = 1. With
// c = N and k = s <= N the busiest link carries 2N(N-1)S / (N^2 + kN - 2k),
// BytePS's optimum (OSDI'20 section 3.1). kEqual: 1/K each.
absl::StatusOr<std::vector<double>> ServerShares(PartitionPolicy policy,
                                                 int num_workers, int colocated,
                                                 int separate);

class Partition {
 public:
  // `chunk_bytes` must be a positive multiple of 4. Equal shares.
  static absl::StatusOr<Partition> Create(const ParamLayout& layout,
                                          int num_servers, int64_t chunk_bytes);
  // One server per entry of `shares` (non-negative, summing to 1 within
  // 1e-9, at least one positive), each given keys toward its share.
  static absl::StatusOr<Partition> Create(const ParamLayout& layout,
                                          std::vector<double> shares,
                                          int64_t chunk_bytes);

  // In layout order: parameter by parameter, chunks in order. Key ids are
  // stable for a given (layout, chunk_bytes), whatever num_servers is.
  const std::vector<PsKey>& keys() const { return keys_; }
  int num_servers() const { return num_servers_; }
  int64_t chunk_bytes() const { return chunk_bytes_; }
  // Key ids held by `server`, ascending.
  const std::vector<int>& keys_of_server(int server) const {
    return server_keys_[server];
  }
  // Key ids of `bucket`, ascending.
  const std::vector<int>& keys_of_bucket(int bucket) const {
    return bucket_keys_[bucket];
  }
  // Bytes held by each server.
  const std::vector<int64_t>& server_bytes() const { return server_bytes_; }
  // Each server's target share of the bytes (1/K each unless given).
  const std::vector<double>& shares() const { return shares_; }
  // max / mean bytes per server (1.0 is perfect balance; a server without
  // keys counts in the mean).
  double imbalance() const;
  // "48 keys on 4 servers (chunk 4096 KiB): 1.2 MiB 1.2 MiB ...;
  // max/mean 1.01".
  std::string Describe() const;

 private:
  std::vector<PsKey> keys_;
  std::vector<std::vector<int>> server_keys_;
  std::vector<std::vector<int>> bucket_keys_;
  std::vector<int64_t> server_bytes_;
  std::vector<double> shares_;
  int num_servers_ = 0;
  int64_t chunk_bytes_ = 0;
};

}  // namespace gradsync
