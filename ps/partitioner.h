// The partitioner: cuts the model's parameters into keys (chunks of at most
// --ps_chunk_kb) and assigns the keys to the K parameter servers so that each
// server holds about the same number of bytes.
//
// Assignment is greedy, largest key first, onto the least-loaded server (ties
// to the lower key id and the lower server rank), which is within 4/3 of the
// optimum (Graham's LPT bound) and, above all, deterministic: every worker
// computes the same partition from the same layout without talking to anyone,
// and the servers check at registration that they agree.
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
};

class Partition {
 public:
  // `chunk_bytes` must be a positive multiple of 4.
  static absl::StatusOr<Partition> Create(const ParamLayout& layout,
                                          int num_servers, int64_t chunk_bytes);

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
  int num_servers_ = 0;
  int64_t chunk_bytes_ = 0;
};

}  // namespace gradsync
