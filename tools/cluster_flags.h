// The flags that say how this process finds, admits and waits for the other
// processes of its job: --bind (where worker 0's coordinator listens),
// --job_token_file, --tls_cert/--tls_key/--tls_ca, and --timeout_s (the
// deadline of every wait on a peer, workers' and servers' alike). The libraries
// in core/cluster take these as values (CoordinatorSecurity, a bind address);
// this is where the command line reads them. A target of its own so that
// `gradsync server` (ps/) and test mains can read the same flags without the
// rest of the command line.
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/coordinator.h"

ABSL_DECLARE_FLAG(std::string, bind);
ABSL_DECLARE_FLAG(std::string, job_token_file);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(double, timeout_s);

namespace gradsync {

// This process's token (--job_token_file, else $GRADSYNC_JOB_TOKEN) and TLS
// files (--tls_*), read and checked; errors name the flag or variable.
absl::StatusOr<CoordinatorSecurity> CoordinatorSecurityFromFlags();

// --timeout_s, checked (positive): how long any wait on a peer may take
// before the job fails naming it. A server waits that long for the
// coordinator and for the job to assemble (not its --ps_idle_timeout_s: a job
// that never starts must not keep its servers for minutes).
absl::StatusOr<absl::Duration> PeerTimeoutFromFlags();

// `bind_address` ("0.0.0.0:29500") with its host replaced by --bind, if
// given; the port stays.
std::string ApplyBindFlag(const std::string& bind_address);

// Names --job_token_file as the file JobTokenOfThisProcess() reads
// (core/cluster/job_token.h): the ring and the parameter servers ask for the
// process's token where no options reach. Mains call it right after parsing
// the command line.
void SetJobTokenFileFromFlag();

}  // namespace gradsync
