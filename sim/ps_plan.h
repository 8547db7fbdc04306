// What a parameter server's worker sends each server, bucket by bucket, as
// the real client decides it: the servers' target shares (ps/client/
// partitioner.h, ServerShares), the key size from ps/key_size_rule.h
// (--ps_chunk_kb=0, auto) or given, and the keys placed largest first by
// ps/client/partitioner.h. A bucket's bytes on a server are its tensors' keys
// there, so a few large tensors on many servers leave some servers with more
// than S/K of a bucket and others with nothing, as in a real run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/client/partitioner.h"
#include "sim/profile.h"

namespace gradsync {
namespace sim {

struct PsPlan {
  int64_t key_bytes = 0;
  std::string key_reason;  // the rule's own line, or "given"
  double imbalance = 0;    // max / mean bytes per server
  // keys[bucket][server]: the bytes of each key a worker pushes to that
  // server for that bucket (and the server answers), in the client's order.
  std::vector<std::vector<std::vector<int64_t>>> keys;
};

// `servers` K over `workers` N, the first `colocated` of them inside
// workers' hosts and the rest on hosts of their own. `key_bytes` 0 takes the
// rule's size. Target shares as --ps_partition says (`policy`).
absl::StatusOr<PsPlan> PlanParameterServer(const StepProfile& profile,
                                           int workers, int servers,
                                           int colocated, int64_t key_bytes,
                                           PartitionPolicy policy);

}  // namespace sim
}  // namespace gradsync
