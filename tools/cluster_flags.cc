// The cluster flags (see cluster_flags.h). Help texts and defaults as they
// were when core/cluster defined these flags.
#include "tools/cluster_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_token.h"
#include "core/cluster/tls_config.h"

ABSL_FLAG(std::string, bind, "",
          "host or IP address worker 0's coordinator listens on (the port is "
          "MASTER_PORT); default: 127.0.0.1 when MASTER_ADDR is a loopback "
          "address, every interface otherwise");
ABSL_FLAG(std::string, job_token_file, "",
          "file holding this job's token, the same for every process of the "
          "job (default: $GRADSYNC_JOB_TOKEN, which `gradsync launch` sets); "
          "the coordinator, the ring and the parameter servers refuse peers "
          "without it. Empty and no variable: no token is checked");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process: the coordinator serves TLS "
          "with it, other processes present it as their client certificate");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate of the job: processes verify the coordinator "
          "with it, and the coordinator then requires client certificates "
          "signed by it (mutual TLS)");
ABSL_FLAG(
    double, timeout_s, 60,
    "seconds any wait for a peer may take before the job fails naming it");

namespace gradsync {

absl::StatusOr<absl::Duration> PeerTimeoutFromFlags() {
  const double timeout = absl::GetFlag(FLAGS_timeout_s);
  if (!(timeout > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout_s=", timeout, " must be positive"));
  }
  return absl::Seconds(timeout);
}

absl::StatusOr<CoordinatorSecurity> CoordinatorSecurityFromFlags() {
  CoordinatorSecurity security;
  ASSIGN_OR_RETURN(security.job_token,
                   LoadJobToken(absl::GetFlag(FLAGS_job_token_file)));
  ASSIGN_OR_RETURN(security.tls, LoadTlsConfig(absl::GetFlag(FLAGS_tls_cert),
                                               absl::GetFlag(FLAGS_tls_key),
                                               absl::GetFlag(FLAGS_tls_ca)));
  return security;
}

std::string ApplyBindFlag(const std::string& bind_address) {
  std::string host = absl::GetFlag(FLAGS_bind);
  if (host.empty()) return bind_address;
  const size_t colon = bind_address.rfind(':');
  const std::string port =
      colon == std::string::npos ? "0" : bind_address.substr(colon + 1);
  // An IPv6 address needs brackets before its port.
  if (host.find(':') != std::string::npos && host.front() != '[') {
    host = absl::StrCat("[", host, "]");
  }
  return absl::StrCat(host, ":", port);
}

void SetJobTokenFileFromFlag() {
  SetJobTokenFileOfThisProcess(absl::GetFlag(FLAGS_job_token_file));
}

}  // namespace gradsync
