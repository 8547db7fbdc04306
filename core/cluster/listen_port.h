// Whether a listening address can be had, and a clear error when it cannot.
// Every listener of a job (the coordinator, the parameter servers) binds
// without SO_REUSEPORT, so a port taken by another job is refused; this file
// turns that refusal into "port P is in use (by another job?)" and lets
// `gradsync launch` check a port before it starts any process.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gradsync {

// OK if a TCP listener could bind `bind_address` ("host:port", "[::1]:port";
// an empty or "0.0.0.0" host is every interface) now; Unavailable naming the
// port ("port 29500 is in use (by another job?) ...") when it is taken, and
// InvalidArgument for an address that does not parse. Port 0 is always free.
absl::Status CheckPortFree(const std::string& bind_address);

}  // namespace gradsync
