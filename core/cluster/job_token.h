// The job token: a shared secret that every process of one job presents to
// every other, so that only its own job gets in — not another job on the same
// machine that guessed a port, not a port scanner, not a stale process of an
// earlier run.
//
// `gradsync launch` generates one per job (128 random bits as 32 hex digits)
// and hands it to its processes in GRADSYNC_JOB_TOKEN. On a cluster, give
// every process the same token with --job_token_file=<file> (preferred: it is
// not visible in the process's environment) or GRADSYNC_JOB_TOKEN. Without a
// token nothing is checked, as before.
//
// Where it is checked: the coordinator (gRPC metadata, every handler), the
// ring's TCP handshake, and the parameter servers (gRPC metadata on every
// RPC). Comparisons take the same time whatever the bytes, so timing does not
// reveal how much of a guess was right. The token travels in clear unless
// TLS is on (--tls_cert/--tls_key/--tls_ca, coordinator only): it keeps out
// strangers who do not know it, not an eavesdropper on the network.
//
// This file is the token alone, with no network library behind it, so that
// the ring's TCP handshake can check it without gRPC; grpc_job_token.h
// carries it in gRPC metadata. The flag --job_token_file is defined by the
// command line (tools/cluster_flags.h), which passes the file's name in.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradsync {

// The environment variable that carries the token.
inline constexpr char kJobTokenEnv[] = "GRADSYNC_JOB_TOKEN";

// 128 bits from the kernel's random source as 32 lowercase hex digits.
absl::StatusOr<std::string> NewJobToken();

// Why `token` cannot be a job token, or OK. A token is 16 to 1024 printable
// ASCII characters without spaces (it travels as gRPC metadata).
absl::Status ValidateJobToken(absl::string_view token);

// The token this process was given: the contents of `token_file` (the
// command line's --job_token_file; surrounding white space removed) if it is
// not empty, else $GRADSYNC_JOB_TOKEN, else "" (no token). An unreadable file
// or an invalid token is an error naming its source.
absl::StatusOr<std::string> LoadJobToken(const std::string& token_file);

// Names the file JobTokenOfThisProcess() reads, for the command line that
// parsed --job_token_file: strategies and parameter servers ask for the
// process's token deep inside, where no options reach. Call it once flags are
// parsed, before anything asks for the token (a later call has no effect
// once the token has been read). Without it only $GRADSYNC_JOB_TOKEN counts.
void SetJobTokenFileOfThisProcess(const std::string& token_file);

// LoadJobToken() of the file above, read once per process; "" when it failed
// (the coordinator reports that error when it starts or connects, before
// anything else runs).
const std::string& JobTokenOfThisProcess();

// Whether `offered` equals `expected`, in time that depends only on the
// length of `expected`.
bool JobTokensEqual(absl::string_view expected, absl::string_view offered);

// Why `offered` is not `expected` ("no job token" or "wrong job token"), or
// "" when it is, or when `expected` is empty (no token required). Never
// includes either token.
std::string JobTokenMismatch(absl::string_view expected,
                             absl::string_view offered);

}  // namespace gradsync
