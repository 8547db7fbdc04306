// The parameter server's update and consistency rules: where the optimizer
// runs (--ps_update=worker|server), when a worker may go on (BSP, SSP with a
// staleness bound, ASP), their names, and which combinations are allowed.
// The same rules judge the flags (tools/ps_flags.cc) and a worker's
// registration at a server (ps/server/shard.cc), so they live apart from both
// and link no flag library.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/parameter_server.pb.h"

namespace gradsync {

// "worker" | "server".
absl::StatusOr<ps::UpdateMode> ParseUpdateMode(const std::string& name);
const char* UpdateModeName(ps::UpdateMode mode);

// "bsp" | "ssp" | "asp".
absl::StatusOr<ps::Consistency> ParseConsistency(const std::string& name);
const char* ConsistencyName(ps::Consistency mode);
// The largest SSP bound taken: beyond it SSP is ASP in all but name, and a
// bound that large is more likely a typo.
constexpr int32_t kMaxStaleness = 1000;

// The rules for a consistency mode, whoever states it (the flags, or a
// worker's registration at a server): SSP's staleness within [0,
// kMaxStaleness], the others' 0, and SSP/ASP only with the servers'
// optimizer. Errors speak of the flags.
absl::Status CheckConsistency(ps::Consistency mode, int32_t staleness,
                              ps::UpdateMode update_mode);

// "" under BSP, else " (SSP, staleness 2)" or " (ASP)": for messages.
std::string ConsistencyNote(ps::Consistency mode, int64_t staleness);

struct ConsistencyOptions {
  ps::Consistency mode = ps::CONSISTENCY_BSP;
  int32_t staleness = 0;  // SSP only
};

}  // namespace gradsync
