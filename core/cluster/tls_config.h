// Optional TLS for gradsync's gRPC services (the coordinator), from three
// files that every process of a job is given alike (the command line's flags,
// tools/cluster_flags.h):
//
//   --tls_cert, --tls_key  this process's certificate chain and private key
//                          (PEM); the coordinator host needs them to serve TLS,
//                          other processes present them as client certificates
//   --tls_ca               the CA that signed the job's certificates: clients
//                          verify the coordinator with it, and the coordinator
//                          then requires and verifies client certificates
//                          (mutual TLS)
//
// None set: plaintext, as before. The certificate must name the address the
// processes dial (MASTER_ADDR) as a subject alternative name.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace gradsync {

struct TlsConfig {
  // PEM contents, not paths: the files are read once, by LoadTlsConfig.
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
  bool enabled() const { return !cert_pem.empty() || !ca_pem.empty(); }
  // "tls (mutual)", "tls", "plaintext": for logs.
  std::string Describe() const;
};

// Reads the files named by --tls_cert, --tls_key and --tls_ca (empty: not
// given). A certificate without a key (or the other way round), or an
// unreadable or empty file, is an error naming the flag.
absl::StatusOr<TlsConfig> LoadTlsConfig(const std::string& cert_path,
                                        const std::string& key_path,
                                        const std::string& ca_path);

// Credentials for a server and for a channel: insecure when `tls` is not
// enabled. A TLS server needs a certificate and key.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsConfig& tls);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(
    const TlsConfig& tls);

}  // namespace gradsync
