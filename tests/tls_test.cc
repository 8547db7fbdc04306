// TLS for the coordinator (core/cluster/tls_config.h): members with the job's
// CA and certificates get in; a plaintext client, a client that trusts
// another CA, and (mutual TLS) a client without a certificate signed by the
// job's CA do not. Certificates: tests/testdata/tls (gen.sh). And --bind
// (tools/cluster_flags.h), which chooses the address the coordinator listens
// on.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cluster/coordinator.h"
#include "core/cluster/tls_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/cluster_flags.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"),
                      "/gradsync/tests/testdata/tls/", name);
}

TlsConfig Load(const std::string& cert, const std::string& key,
               const std::string& ca) {
  absl::StatusOr<TlsConfig> tls = LoadTlsConfig(
      cert.empty() ? "" : TestData(cert), key.empty() ? "" : TestData(key),
      ca.empty() ? "" : TestData(ca));
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? *tls : TlsConfig();
}

class TlsCoordinatorTest : public ::testing::Test {
 protected:
  void Start(const TlsConfig& tls) {
    auto server = CoordinatorServer::Start("127.0.0.1:0", "job-tls", 1, 0,
                                           CoordinatorSecurity{"", tls});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  // A Set through a client with `tls`; the coordinator is on 127.0.0.1,
  // which the job's certificate names.
  absl::Status SetThrough(const TlsConfig& tls) {
    CoordinatorClientOptions options;
    options.security.tls = tls;
    options.exit_when_member_lost = false;
    auto client = CoordinatorClient::Connect(
        absl::StrCat("127.0.0.1:", server_->port()), "job-tls", Role::kWorker,
        0, absl::Seconds(2), options);
    if (!client.ok()) return client.status();
    return (*client)->Set("k", "v");
  }
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(TlsCoordinatorTest, ServerAuthenticatedTls) {
  Start(Load("job.pem", "job.key", ""));
  // The client trusts the job's CA only.
  EXPECT_TRUE(SetThrough(Load("", "", "ca.pem")).ok());
  // Plaintext to a TLS port never connects.
  absl::Status plaintext = SetThrough(TlsConfig());
  EXPECT_EQ(plaintext.code(), absl::StatusCode::kDeadlineExceeded) << plaintext;
  // Trusting another CA: the server's certificate does not verify.
  absl::Status stranger = SetThrough(Load("", "", "stranger_ca.pem"));
  EXPECT_FALSE(stranger.ok());
  EXPECT_THAT(std::string(stranger.message()), HasSubstr("--tls_ca"));
}

TEST_F(TlsCoordinatorTest, MutualTlsRequiresACertificateFromTheJobCa) {
  Start(Load("job.pem", "job.key", "ca.pem"));
  EXPECT_TRUE(SetThrough(Load("job.pem", "job.key", "ca.pem")).ok());
  // No client certificate.
  EXPECT_FALSE(SetThrough(Load("", "", "ca.pem")).ok());
  // A certificate from another CA.
  EXPECT_FALSE(SetThrough(Load("stranger.pem", "stranger.key", "ca.pem")).ok());
}

TEST(TlsConfigTest, FlagsThatDoNotFitAreErrors) {
  EXPECT_FALSE(LoadTlsConfig(TestData("job.pem"), "", "").ok());
  EXPECT_FALSE(LoadTlsConfig("", TestData("job.key"), "").ok());
  absl::StatusOr<TlsConfig> missing = LoadTlsConfig("", "", "/nonexistent.pem");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--tls_ca"));
  // Something that is not PEM at all.
  EXPECT_EQ(LoadTlsConfig("", "", TestData("gen.sh")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A server needs its own certificate.
  EXPECT_FALSE(ServerCredentialsFor(Load("", "", "ca.pem")).ok());
  EXPECT_EQ(TlsConfig().Describe(), "plaintext");
  EXPECT_EQ(Load("job.pem", "job.key", "ca.pem").Describe(), "tls (mutual)");
}

// The command line's --tls_* reach the coordinator's security
// (tools/cluster_flags.h), and a flag that does not fit is named.
TEST(TlsConfigTest, TheCommandLineReadsTheTlsFlags) {
  absl::SetFlag(&FLAGS_tls_cert, TestData("job.pem"));
  absl::SetFlag(&FLAGS_tls_key, TestData("job.key"));
  absl::SetFlag(&FLAGS_tls_ca, TestData("ca.pem"));
  absl::StatusOr<CoordinatorSecurity> security = CoordinatorSecurityFromFlags();
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->tls.Describe(), "tls (mutual)");
  absl::SetFlag(&FLAGS_tls_key, "");
  EXPECT_THAT(std::string(CoordinatorSecurityFromFlags().status().message()),
              HasSubstr("--tls_cert and --tls_key go together"));
  absl::SetFlag(&FLAGS_tls_cert, "");
  absl::SetFlag(&FLAGS_tls_ca, "");
  security = CoordinatorSecurityFromFlags();
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_FALSE(security->tls.enabled());
}

// The local address of the listening TCP socket on `port`, as
// /proc/net/tcp{,6} write it, or "" if none. gRPC binds IPv4 addresses on
// dual-stack sockets, so 127.0.0.1 may show as ::ffff:127.0.0.1
// ("0000000000000000FFFF00000100007F") and 0.0.0.0 as :: (all zeros).
std::string ListeningAddress(int port) {
  const std::string suffix = absl::StrFormat(":%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "0A" && local.size() > suffix.size() &&
          local.compare(local.size() - suffix.size(), suffix.size(), suffix) ==
              0) {
        return local.substr(0, local.size() - suffix.size());
      }
    }
  }
  return "";
}

TEST(BindFlagTest, ReplacesTheHostTheCoordinatorListensOn) {
  auto everywhere =
      CoordinatorServer::Start(ApplyBindFlag("0.0.0.0:0"), "job-bind", 1, 0);
  ASSERT_TRUE(everywhere.ok()) << everywhere.status();
  EXPECT_THAT(ListeningAddress((*everywhere)->port()),
              ::testing::MatchesRegex("0+"));
  absl::SetFlag(&FLAGS_bind, "127.0.0.1");
  auto loopback =
      CoordinatorServer::Start(ApplyBindFlag("0.0.0.0:0"), "job-bind", 1, 0);
  absl::SetFlag(&FLAGS_bind, "");
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_THAT(ListeningAddress((*loopback)->port()),
              ::testing::EndsWith("0100007F"));
}

}  // namespace
}  // namespace gradsync
