// The address this host uses toward another: what the peer would see as our
// side of a connection. It is right where the host name is not — inside a
// network namespace, on a node with several interfaces — so parameter
// servers and `gradsync launch --nnodes` advertise it to the job.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace gradsync {

// The local IPv4 address of the route to `host`:`port`. No packet is sent
// (a UDP connect only picks the route). Errors name `host`.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host,
                                               int port);

}  // namespace gradsync
