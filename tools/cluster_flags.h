// The flags that say how this process finds and admits the other processes of
// its job: --bind (where worker 0's coordinator listens), --job_token_file and
// --tls_cert/--tls_key/--tls_ca. The libraries in core/cluster take these as
// values (CoordinatorSecurity, a bind address); this is where the command line
// reads them. A target of its own so that `gradsync server` (ps/) and test
// mains can read the same flags without the rest of the command line.
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "core/cluster/coordinator.h"

ABSL_DECLARE_FLAG(std::string, bind);
ABSL_DECLARE_FLAG(std::string, job_token_file);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);

namespace gradsync {

// This process's token (--job_token_file, else $GRADSYNC_JOB_TOKEN) and TLS
// files (--tls_*), read and checked; errors name the flag or variable.
absl::StatusOr<CoordinatorSecurity> CoordinatorSecurityFromFlags();

// `bind_address` ("0.0.0.0:29500") with its host replaced by --bind, if
// given; the port stays.
std::string ApplyBindFlag(const std::string& bind_address);

// Names --job_token_file as the file JobTokenOfThisProcess() reads
// (core/cluster/job_token.h): the ring and the parameter servers ask for the
// process's token where no options reach. Mains call it right after parsing
// the command line.
void SetJobTokenFileFromFlag();

}  // namespace gradsync
