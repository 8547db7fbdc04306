// netem: the emulated cluster network on its own, for checking it and for
// measuring what the cost model needs. `gradsync launch --netem=...` builds
// the same network around a job; this tool is for everything around that.
//
//   netem probe --link=1gbit,200us [--json]   α and B between two namespaces
//   netem probe --link=loopback                the same over 127.0.0.1
//   netem probe --listen=PORT                  between two hosts of a real
//   netem probe --peer=HOST:PORT               cluster (no root): prints the
//                                              GRADSYNC_LINK for job scripts
//   netem check --link=1gbit,200us             iperf3 forward, reverse and
//                                              both at once, against the rate
//   netem up --nodes=4 --link=1gbit [--prefix=gsdemo]   build and leave it
//   netem down --prefix=gsdemo                 remove what `up` built
//
// probe (but --listen/--peer), check and up need root (network namespaces,
// tc).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/launch/link_probe.h"
#include "core/launch/netem.h"
#include "tools/emulated_link.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, link, "1gbit",
          "RATE[,LATENCY][,buffer=BYTES][,rto_min=DURATION][,cc=NAME][,ecn] "
          "of every node's link and the switch (1gbit,200us; "
          "100mbit,buffer=1mb); for probe also 'loopback' (no namespaces, no "
          "root)");
ABSL_FLAG(int, nodes, 2, "up: number of nodes");
ABSL_FLAG(std::string, prefix, "",
          "up/down: name prefix (default gs + 4 random hex digits)");
ABSL_FLAG(bool, json, false, "probe: print one JSON object instead of a table");
ABSL_FLAG(int, repeats, 3, "probe: transfers per size (the median is kept)");
ABSL_FLAG(double, seconds, 3, "check: seconds per iperf3 run");
ABSL_FLAG(int, listen, -1,
          "probe between two hosts: serve one peer's probe on this TCP port "
          "(0: any free port, printed), then exit");
ABSL_FLAG(std::string, bind, "0.0.0.0",
          "probe --listen: the IPv4 address to listen on");
ABSL_FLAG(int, wait_for_peer_s, 300,
          "probe --listen: seconds to wait for the peer before giving up");
ABSL_FLAG(std::string, peer, "",
          "probe between two hosts: HOST:PORT of a `netem probe --listen` on "
          "the other host; prints the link and the GRADSYNC_LINK line that "
          "gives it to the parameter server's window rule");

namespace gradsync {
namespace {

// Ctrl-C while a network exists must not leave it behind: the handler only
// records the signal; the work in progress is short and checks nothing, so
// the teardown runs right after it.
volatile sig_atomic_t g_interrupted = 0;

void OnSignal(int) { g_interrupted = 1; }

void DeferSignals() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

absl::StatusOr<std::unique_ptr<EmulatedNetwork>> BuildNetwork(int nodes) {
  ASSIGN_OR_RETURN(LinkSpec link, ParseLinkSpec(absl::GetFlag(FLAGS_link)));
  EmulatedNetworkOptions options;
  options.nodes = nodes;
  options.link = link;
  options.prefix = absl::GetFlag(FLAGS_prefix);
  DeferSignals();
  ASSIGN_OR_RETURN(std::unique_ptr<EmulatedNetwork> network,
                   EmulatedNetwork::Create(options));
  GS_LOG(INFO) << "emulated network: " << network->Describe();
  return network;
}

void PrintProbe(const LinkProbeResult& r, const std::string& link) {
  if (absl::GetFlag(FLAGS_json)) {
    printf("%s\n", r.ToJson().c_str());
    return;
  }
  printf("link %s (GB/s = 1e9 bytes/s)\n", link.c_str());
  printf("  round trip of 1 byte   %10.1f us   ->  alpha = %.1f us\n",
         r.round_trip_us, r.alpha_us);
  printf("  %12s  %12s  %12s  %12s\n", "bytes", "forward ms", "reverse ms",
         "forward GB/s");
  for (const LinkProbeSample& s : r.samples) {
    printf("  %12lld  %12.3f  %12.3f  %12.4f\n",
           static_cast<long long>(s.bytes), s.forward_ms, s.reverse_ms,
           s.bytes / (s.forward_ms / 1000) / 1e9);
  }
  printf(
      "  B (slope, forward)     %10.4f GB/s  (%.0f Mbit/s), intercept %.3f "
      "ms\n",
      r.bandwidth_bytes_per_s / 1e9, r.bandwidth_bytes_per_s * 8 / 1e6,
      r.intercept_ms);
  printf("  B (slope, reverse)     %10.4f GB/s  (%.0f Mbit/s)\n",
         r.reverse_bandwidth_bytes_per_s / 1e9,
         r.reverse_bandwidth_bytes_per_s * 8 / 1e6);
  printf("  both directions at once%10.4f GB/s each (%.0f Mbit/s)\n",
         r.duplex_bytes_per_s / 1e9, r.duplex_bytes_per_s * 8 / 1e6);
}

// Between two hosts: one serves, the other measures and prints the job's
// link as GRADSYNC_LINK takes it (tools/emulated_link.h).
absl::Status ProbeBetweenHosts(const LinkProbeOptions& options) {
  const int listen = absl::GetFlag(FLAGS_listen);
  const std::string peer = absl::GetFlag(FLAGS_peer);
  if (listen >= 0 && !peer.empty()) {
    return absl::InvalidArgumentError(
        "netem probe: give --listen=PORT on one host and --peer=HOST:PORT on "
        "the other, not both");
  }
  if (listen >= 0) {
    LinkProbeServeOptions serve;
    serve.bind_address = absl::GetFlag(FLAGS_bind);
    serve.port = listen;
    serve.wait_for_peer_s = absl::GetFlag(FLAGS_wait_for_peer_s);
    serve.max_bytes =
        *std::max_element(options.sizes.begin(), options.sizes.end());
    serve.on_listening = [&serve](int port) {
      printf("listening on %s:%d for one probe; on the other host run\n"
             "  netem probe --peer=<this host>:%d\n",
             serve.bind_address.c_str(), port, port);
      fflush(stdout);
    };
    RETURN_IF_ERROR(ServeLinkProbe(serve));
    printf("probe served\n");
    return absl::OkStatus();
  }
  const size_t colon = peer.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(peer.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "netem probe: --peer=", peer,
        " is not HOST:PORT (the port `netem probe --listen` printed)"));
  }
  ASSIGN_OR_RETURN(LinkProbeResult result,
                   ProbeRemoteLink(peer.substr(0, colon), port, options));
  PrintProbe(result, absl::StrCat("to ", peer));
  if (!absl::GetFlag(FLAGS_json)) {
    printf(
        "\nFor the parameter server's stream windows on this cluster (every "
        "worker and server\nof the job reads it; the slowest direction and "
        "alpha above):\n  export %s=%s\n",
        kJobLinkEnv, JobLinkSpecFromProbe(result).c_str());
  }
  return absl::OkStatus();
}

absl::Status Probe() {
  LinkProbeOptions options;
  options.repeats = absl::GetFlag(FLAGS_repeats);
  if (absl::GetFlag(FLAGS_listen) >= 0 || !absl::GetFlag(FLAGS_peer).empty()) {
    return ProbeBetweenHosts(options);
  }
  const std::string link = absl::GetFlag(FLAGS_link);
  if (link == "loopback") {
    ASSIGN_OR_RETURN(LinkProbeResult result, ProbeLink(options));
    PrintProbe(result, link);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<EmulatedNetwork> network, BuildNetwork(2));
  options.client_namespace = network->NodeNamespace(0);
  options.server_namespace = network->NodeNamespace(1);
  options.server_address = network->NodeAddress(1);
  absl::StatusOr<LinkProbeResult> result = ProbeLink(options);
  RETURN_IF_ERROR(network->Destroy());
  if (!result.ok()) return result.status();
  PrintProbe(*result, link);
  return absl::OkStatus();
}

// The receiver's rate in each direction from iperf3's JSON: "end" holds
// "sum_received" and, with --bidir, "sum_received_bidir_reverse", each with
// its "bits_per_second".
absl::StatusOr<std::vector<double>> ReceivedRates(const std::string& json) {
  const nlohmann::json report =
      nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.is_object()) {
    return absl::DataLossError("iperf3's output is not JSON");
  }
  // iperf3 -J reports its own failures as a top-level "error" string.
  const nlohmann::json error = report.value("error", nlohmann::json());
  const std::string why =
      error.is_string()
          ? absl::StrCat(" (iperf3: ", error.get<std::string>(), ")")
          : "";
  const nlohmann::json end = report.value("end", nlohmann::json::object());
  if (!end.is_object()) {
    return absl::DataLossError(
        absl::StrCat("no sum_received in iperf3's output", why));
  }
  std::vector<double> rates;
  // Forward first, then the reverse direction of a --bidir run.
  for (const char* key : {"sum_received", "sum_received_bidir_reverse"}) {
    const nlohmann::json sum = end.value(key, nlohmann::json());
    if (!sum.is_object()) continue;
    const nlohmann::json rate = sum.value("bits_per_second", nlohmann::json());
    if (rate.is_number()) rates.push_back(rate.get<double>());
  }
  if (rates.empty()) {
    return absl::DataLossError(
        absl::StrCat("no sum_received in iperf3's output", why));
  }
  return rates;
}

absl::Status Check() {
  std::string iperf3;
  for (const char* path : {"/usr/bin/iperf3", "/bin/iperf3"}) {
    if (access(path, X_OK) == 0) iperf3 = path;
  }
  if (iperf3.empty()) {
    return absl::FailedPreconditionError(
        "netem check runs iperf3: apt-get install iperf3 "
        "(tools/install_deps.sh lists it)");
  }
  ASSIGN_OR_RETURN(LinkSpec link, ParseLinkSpec(absl::GetFlag(FLAGS_link)));
  ASSIGN_OR_RETURN(std::unique_ptr<EmulatedNetwork> network, BuildNetwork(2));
  const std::string seconds =
      absl::StrFormat("%g", absl::GetFlag(FLAGS_seconds));
  printf("%-34s %14s %14s\n", "iperf3 (TCP, 1 stream)", "Mbit/s",
         "of the rate");
  struct Run {
    const char* name;
    std::vector<std::string> extra;
  };
  absl::Status status;
  for (const Run& run :
       {Run{"node 0 -> node 1", {}}, Run{"node 1 -> node 0", {"-R"}},
        Run{"both at once (each direction)", {"--bidir"}}}) {
    if (g_interrupted) break;
    // The server serves one test and exits (-1); bounded by timeout(1).
    std::vector<std::string> server = network->ExecPrefix(1);
    server.insert(server.end(), {"/usr/bin/timeout", "60", iperf3, "-s", "-1",
                                 "-B", network->NodeAddress(1)});
    absl::StatusOr<std::string> server_output;
    std::thread server_thread([&] { server_output = RunCommand(server); });
    std::vector<std::string> client = network->ExecPrefix(0);
    client.insert(client.end(), {"/usr/bin/timeout", "60", iperf3, "-c",
                                 network->NodeAddress(1), "-t", seconds, "-J",
                                 "--connect-timeout", "5000"});
    client.insert(client.end(), run.extra.begin(), run.extra.end());
    absl::StatusOr<std::string> output;
    // The server needs a moment to listen; iperf3 -c does not retry.
    for (int attempt = 0; attempt < 20; ++attempt) {
      usleep(100000);
      output = RunCommand(client);
      if (output.ok() || output.status().message().find("Connection refused") ==
                             std::string::npos) {
        break;
      }
    }
    server_thread.join();
    if (!output.ok()) {
      status = output.status();
      break;
    }
    absl::StatusOr<std::vector<double>> rates = ReceivedRates(*output);
    if (!rates.ok()) {
      status = rates.status();
      break;
    }
    for (double rate : *rates) {
      printf(
          "%-34s %14.1f %13.1f%%\n", run.name, rate / 1e6,
          link.rate_bits_per_s > 0 ? 100 * rate / link.rate_bits_per_s : 0.0);
    }
  }
  printf(
      "(TCP goodput over 1500-byte frames is at most 95.6%% of the line "
      "rate)\n");
  const absl::Status destroyed = network->Destroy();
  RETURN_IF_ERROR(status);
  return destroyed;
}

absl::Status Up() {
  ASSIGN_OR_RETURN(std::unique_ptr<EmulatedNetwork> network,
                   BuildNetwork(absl::GetFlag(FLAGS_nodes)));
  for (int node = 0; node < network->nodes(); ++node) {
    printf("%s %s\n", network->NodeNamespace(node).c_str(),
           network->NodeAddress(node).c_str());
  }
  printf("remove with: netem down --prefix=%s\n", network->prefix().c_str());
  network->Release();
  return absl::OkStatus();
}

absl::Status Down() {
  const std::string prefix = absl::GetFlag(FLAGS_prefix);
  if (prefix.empty())
    return absl::InvalidArgumentError("netem down needs --prefix");
  ASSIGN_OR_RETURN(int removed, RemoveNamespaces(prefix));
  printf("removed %d namespace(s) with prefix %s-\n", removed, prefix.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "netem probe|check|up|down [flags]: the emulated cluster network (see "
      "tools/netem.h)");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() != 2) {
    fprintf(stderr,
            "usage: netem probe|check|up|down [--link=1gbit,200us] [--nodes=N] "
            "[--prefix=P]\n");
    return 2;
  }
  gradsync::SetLogTag("netem");
  const std::string command = rest[1];
  absl::Status status;
  if (command == "probe") {
    status = gradsync::Probe();
  } else if (command == "check") {
    status = gradsync::Check();
  } else if (command == "up") {
    status = gradsync::Up();
  } else if (command == "down") {
    status = gradsync::Down();
  } else {
    fprintf(stderr, "netem: unknown command '%s'\n", command.c_str());
    return 2;
  }
  if (!status.ok()) {
    GS_LOG(ERROR) << status.message();
    return 1;
  }
  return gradsync::g_interrupted ? 130 : 0;
}
