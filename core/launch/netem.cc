// The emulated cluster network (see netem.h).
#include "core/launch/netem.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// tbf's bucket: it must hold the largest packet the veth hands it (GSO
// packets reach 64 KiB; smaller buckets make tbf split them, costing CPU),
// and on fast links about a millisecond of traffic, or TCP cannot keep the
// link busy (measured: 64 KiB at 1 Gbit/s gave 80-90% of the rate with
// drops, 128 KiB and more gave 94-95%, the TCP goodput of 1500-byte frames).
constexpr int64_t kMinBurstBytes = 128 << 10;
constexpr double kBurstSeconds = 1e-3;
// How long a packet may wait in tbf's queue before it is dropped. Deep
// enough that N senders converging on one parameter server queue rather
// than lose packets (TCP then shares the link evenly), shallow enough that
// the queue does not add visible latency to small messages after a burst.
constexpr char kQueueLatency[] = "20ms";

std::string FindTool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string path = absl::StrCat(dir, name);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// "1gbit" -> 1e9. Units as tc's (bit, kbit, mbit, gbit; decimal).
absl::StatusOr<int64_t> ParseRate(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "none" || lower == "0") return 0;
  struct Unit {
    const char* suffix;
    double scale;
  };
  for (const Unit& unit : {Unit{"gbit", 1e9}, Unit{"mbit", 1e6},
                           Unit{"kbit", 1e3}, Unit{"bit", 1}}) {
    if (!absl::EndsWith(lower, unit.suffix)) continue;
    double value = 0;
    const absl::string_view number = absl::string_view(lower).substr(
        0, lower.size() - std::strlen(unit.suffix));
    if (!absl::SimpleAtod(number, &value) || !(value > 0)) break;
    const double bits = value * unit.scale;
    if (bits < 8e3 || bits > 4e11) {
      return absl::InvalidArgumentError(
          absl::StrCat("link rate ", text, " is outside 8kbit..400gbit"));
    }
    return static_cast<int64_t>(std::llround(bits));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "link rate '", text, "' is not like 1gbit, 100mbit, 500kbit or none"));
}

absl::StatusOr<absl::Duration> ParseLatency(absl::string_view text) {
  if (text == "0") return absl::ZeroDuration();
  absl::Duration latency;
  if (!absl::ParseDuration(text, &latency) || latency < absl::ZeroDuration() ||
      latency > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("link latency '", text,
                     "' is not a duration like 200us, 1ms or 0 (at most 1s)"));
  }
  return latency;
}

// tc's rate syntax in bits per second ("1000000000bit").
std::string TcRate(int64_t bits_per_s) {
  return absl::StrCat(bits_per_s, "bit");
}

std::string TcMicros(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Microseconds(d), "us");
}

}  // namespace

absl::StatusOr<LinkSpec> ParseLinkSpec(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.empty() || parts.size() > 2 || parts[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--netem='", text, "' must be RATE[,LATENCY], like 1gbit,200us"));
  }
  LinkSpec spec;
  spec.text = text;
  ASSIGN_OR_RETURN(spec.rate_bits_per_s, ParseRate(parts[0]));
  if (parts.size() == 2) {
    ASSIGN_OR_RETURN(spec.latency, ParseLatency(parts[1]));
  }
  return spec;
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (std::string& arg : copy) args.push_back(arg.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer, n);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        "`", absl::StrJoin(argv, " "), "` failed (",
        WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        "): ", absl::StripAsciiWhitespace(output)));
  }
  return output;
}

absl::Status CheckEmulationPrerequisites() {
  if (geteuid() != 0) {
    return absl::PermissionDeniedError(
        "network emulation (--netem) needs root: it creates network "
        "namespaces, "
        "veth pairs, a bridge and tc qdiscs. Run as root (sudo), or leave out "
        "--netem to run on loopback");
  }
  if (FindTool("ip").empty() || FindTool("tc").empty()) {
    return absl::FailedPreconditionError(
        "network emulation (--netem) needs `ip` and `tc`: apt-get install "
        "iproute2");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListNamespaces(
    const std::string& prefix) {
  const std::string ip = FindTool("ip");
  if (ip.empty())
    return absl::FailedPreconditionError("`ip` not found (iproute2)");
  ASSIGN_OR_RETURN(std::string output, RunCommand({ip, "netns", "list"}));
  std::vector<std::string> names;
  for (absl::string_view line :
       absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    // Lines read "name" or "name (id: 3)".
    const std::string name(line.substr(0, line.find(' ')));
    if (absl::StartsWith(name, prefix)) names.push_back(name);
  }
  return names;
}

absl::StatusOr<int> RemoveNamespaces(const std::string& prefix) {
  if (prefix.empty())
    return absl::InvalidArgumentError("no network prefix given");
  ASSIGN_OR_RETURN(std::vector<std::string> names,
                   ListNamespaces(prefix + "-"));
  // Nodes before the bridge, as EmulatedNetwork::Destroy does.
  std::stable_sort(names.begin(), names.end(),
                   [](const std::string& a, const std::string& b) {
                     return absl::EndsWith(a, "-br") < absl::EndsWith(b, "-br");
                   });
  absl::Status first;
  int removed = 0;
  for (const std::string& name : names) {
    const absl::Status status =
        RunCommand({FindTool("ip"), "netns", "del", name}).status();
    if (status.ok()) ++removed;
    if (!status.ok() && first.ok()) first = status;
  }
  if (!first.ok()) return first;
  return removed;
}

absl::StatusOr<std::unique_ptr<EmulatedNetwork>> EmulatedNetwork::Create(
    const EmulatedNetworkOptions& options) {
  RETURN_IF_ERROR(CheckEmulationPrerequisites());
  // Node addresses are 10.213.(1 + i / 250).(1 + i % 250): 250 per /24,
  // all inside 10.213.0.0/16.
  if (options.nodes < 1 || options.nodes > 250 * 250) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an emulated network of ", options.nodes, " nodes; need 1..62500"));
  }
  EmulatedNetworkOptions resolved = options;
  if (resolved.prefix.empty()) {
    std::random_device random;
    resolved.prefix =
        absl::StrCat("gs", absl::Hex(random() & 0xffff, absl::kZeroPad4));
  }
  for (char c : resolved.prefix) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
        resolved.prefix.size() > 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("network prefix '", resolved.prefix,
                       "' must be at most 16 letters or digits"));
    }
  }
  std::unique_ptr<EmulatedNetwork> network(new EmulatedNetwork(resolved));
  network->ip_path_ = FindTool("ip");
  network->tc_path_ = FindTool("tc");
  ASSIGN_OR_RETURN(std::vector<std::string> existing,
                   ListNamespaces(resolved.prefix + "-"));
  if (!existing.empty()) {
    return absl::AlreadyExistsError(
        absl::StrCat("network namespaces with prefix ", resolved.prefix,
                     "- exist already (", absl::StrJoin(existing, ", "),
                     "); another job uses them, or remove them "
                     "with `ip netns del`"));
  }
  const absl::Status built = network->Build();
  if (!built.ok()) {
    const absl::Status cleanup = network->Destroy();
    if (!cleanup.ok()) {
      GS_LOG(ERROR) << "cleaning up after a failed set-up: "
                    << cleanup.message();
    }
    return Annotate(
        built, absl::StrCat("building the emulated network ", resolved.prefix));
  }
  return network;
}

EmulatedNetwork::~EmulatedNetwork() {
  const absl::Status status = Destroy();
  if (!status.ok()) {
    GS_LOG(ERROR) << status.message();
  }
}

std::string EmulatedNetwork::NodeNamespace(int node) const {
  return absl::StrCat(options_.prefix, "-n", node);
}

std::string EmulatedNetwork::BridgeNamespace() const {
  return absl::StrCat(options_.prefix, "-br");
}

std::string EmulatedNetwork::NodeAddress(int node) const {
  return absl::StrCat("10.213.", 1 + node / 250, ".", 1 + node % 250);
}

std::vector<std::string> EmulatedNetwork::ExecPrefix(int node) const {
  return {ip_path_, "netns", "exec", NodeNamespace(node)};
}

std::string EmulatedNetwork::Describe() const {
  const LinkSpec& link = options_.link;
  std::string rate =
      link.rate_bits_per_s == 0
          ? "unlimited"
          : absl::StrFormat("%g Mbit/s", link.rate_bits_per_s / 1e6);
  std::string latency =
      link.latency == absl::ZeroDuration()
          ? "no added latency"
          : absl::StrCat(absl::FormatDuration(link.latency), " one-way latency",
                         latency_emulated_
                             ? ""
                             : " NOT EMULATED (kernel lacks sch_netem)");
  return absl::StrCat(options_.nodes, " nodes, ", rate, " full-duplex links, ",
                      latency, " (namespaces ", options_.prefix, "-*, ",
                      NodeAddress(0), "..", NodeAddress(options_.nodes - 1),
                      ")");
}

absl::Status EmulatedNetwork::Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip_path_};
  argv.insert(argv.end(), args.begin(), args.end());
  if (options_.verbose) {
    GS_LOG(DEBUG) << absl::StrJoin(argv, " ");
  }
  return RunCommand(argv).status();
}

// Shapes traffic leaving `device` in namespace `ns`: tbf for the rate, and
// netem below it for half the one-way latency.
absl::Status EmulatedNetwork::Shape(const std::string& ns,
                                    const std::string& device) {
  const LinkSpec& link = options_.link;
  auto tc = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {tc_path_, "-n", ns};
    argv.insert(argv.end(), args.begin(), args.end());
    if (options_.verbose) {
      GS_LOG(DEBUG) << absl::StrJoin(argv, " ");
    }
    return RunCommand(argv).status();
  };
  std::string parent = "root";
  if (link.rate_bits_per_s > 0) {
    const int64_t burst = std::max<int64_t>(
        kMinBurstBytes,
        static_cast<int64_t>(link.rate_bits_per_s / 8 * kBurstSeconds));
    RETURN_IF_ERROR(tc({"qdisc", "add", "dev", device, "root", "handle", "1:",
                        "tbf", "rate", TcRate(link.rate_bits_per_s), "burst",
                        absl::StrCat(burst), "latency", kQueueLatency}));
    parent = "1:1";
  }
  if (link.latency > absl::ZeroDuration() && latency_emulated_) {
    std::vector<std::string> args = {"qdisc", "add", "dev", device};
    if (parent == "root") {
      args.push_back("root");
    } else {
      args.insert(args.end(), {"parent", parent});
    }
    args.insert(args.end(), {"handle", "10:", "netem", "delay",
                             TcMicros(link.latency / 2), "limit", "100000"});
    const absl::Status delay = tc(args);
    if (!delay.ok()) {
      if (!absl::StrContains(delay.message(), "qdisc kind is unknown"))
        return delay;
      latency_emulated_ = false;
      GS_LOG(WARNING)
          << "this kernel has no netem qdisc (sch_netem): the links get their "
             "rate but not the "
          << absl::FormatDuration(link.latency)
          << " latency; the cost model uses the latency it measures";
    }
  }
  return absl::OkStatus();
}

absl::Status EmulatedNetwork::Build() {
  const std::string bridge_ns = BridgeNamespace();
  RETURN_IF_ERROR(Ip({"netns", "add", bridge_ns}));
  namespaces_.push_back(bridge_ns);
  RETURN_IF_ERROR(
      Ip({"-n", bridge_ns, "link", "add", "br0", "type", "bridge"}));
  RETURN_IF_ERROR(Ip({"-n", bridge_ns, "link", "set", "br0", "up"}));
  for (int node = 0; node < options_.nodes; ++node) {
    const std::string ns = NodeNamespace(node);
    const std::string port = absl::StrCat("p", node);
    RETURN_IF_ERROR(Ip({"netns", "add", ns}));
    namespaces_.push_back(ns);
    // Both ends are created directly inside our namespaces, so no name ever
    // appears (or can collide) in the host's namespace.
    RETURN_IF_ERROR(Ip({"-n", bridge_ns, "link", "add", port, "type", "veth",
                        "peer", "name", "eth0", "netns", ns}));
    RETURN_IF_ERROR(
        Ip({"-n", bridge_ns, "link", "set", port, "master", "br0", "up"}));
    // Loopback matters: a process reaches its own address through it (a
    // colocated parameter server, the coordinator on worker 0).
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "lo", "up"}));
    RETURN_IF_ERROR(Ip(
        {"-n", ns, "addr", "add", NodeAddress(node) + "/16", "dev", "eth0"}));
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "eth0", "up"}));
    RETURN_IF_ERROR(Shape(ns, "eth0"));       // the node's uplink
    RETURN_IF_ERROR(Shape(bridge_ns, port));  // its downlink
  }
  return absl::OkStatus();
}

absl::Status EmulatedNetwork::Destroy() {
  absl::Status first;
  // Node namespaces first: deleting one removes its veth and so the bridge
  // port; the bridge namespace goes last.
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    const absl::Status status = Ip({"netns", "del", *it});
    if (!status.ok() && first.ok()) first = status;
  }
  namespaces_.clear();
  return first;
}

}  // namespace gradsync
