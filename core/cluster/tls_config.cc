#include "core/cluster/tls_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace gradsync {
namespace {

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "--", flag, "=", path, ": cannot read it: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": not a PEM file"));
  }
  return text.str();
}

}  // namespace

std::string TlsConfig::Describe() const {
  if (!enabled()) return "plaintext";
  return ca_pem.empty() || cert_pem.empty() ? "tls" : "tls (mutual)";
}

absl::StatusOr<TlsConfig> LoadTlsConfig(const std::string& cert_path,
                                        const std::string& key_path,
                                        const std::string& ca_path) {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  TlsConfig tls;
  auto cert = ReadPem("tls_cert", cert_path);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("tls_key", key_path);
  if (!key.ok()) return key.status();
  auto ca = ReadPem("tls_ca", ca_path);
  if (!ca.ok()) return ca.status();
  tls.cert_pem = *std::move(cert);
  tls.key_pem = *std::move(key);
  tls.ca_pem = *std::move(ca);
  return tls;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "TLS is on (--tls_ca) but this process serves and has no "
        "certificate: give it --tls_cert and --tls_key");
  }
  grpc::SslServerCredentialsOptions options(
      tls.ca_pem.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;  // empty: the system's roots
  options.pem_private_key = tls.key_pem;
  options.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(options);
}

}  // namespace gradsync
