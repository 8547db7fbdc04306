// The emulated cluster network (see netem.h).
#include "core/launch/netem.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

// tbf's bucket: it must hold the largest packet the veth hands it (GSO
// packets reach 64 KiB; smaller buckets make tbf split them, costing CPU),
// and on fast links about a millisecond of traffic, or TCP cannot keep the
// link busy (the buckets tried, and what each gave: docs/results/
// performance.md, "Notes from the code").
constexpr int64_t kMinBurstBytes = 128 << 10;
constexpr double kBurstSeconds = 1e-3;
// A switch port's buffer toward its node, unless buffer= says otherwise.
// Data-centre switches share their packet memory among ports with dynamic
// thresholds, so one congested port may take a large part of it: Broadcom
// Trident II (Arista 7050X and kin) has 12 MB for 32 x 40G ports, Tomahawk
// 16 MB for 32 x 100G; the DCTCP paper (Alizadeh et al., SIGCOMM 2010) saw
// about 700 KB usable by one congested 1 Gbit/s port of a 4 MB Triumph. One
// port holding 1 MiB is that class of switch; it holds 8 full initial
// windows (10 packets each) of 8 senders converging on one receiver, the
// incast of a parameter server with N = 8.
constexpr int64_t kDefaultSwitchBufferBytes = 1 << 20;
// The node's own uplink is its NIC's transmit queue, which on a real host
// does not drop: TCP small queues hold each socket's bytes in the qdisc
// below tcp_limit_output_bytes (4 MiB here) and keep the rest in the socket.
// Its limit only bounds a pathological case.
constexpr int64_t kHostQueueBytes = 16 << 20;

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

// "512kb" -> 524288, "1mb" -> 1048576, "4000000" -> 4000000 (binary units,
// as tc's).
absl::StatusOr<int64_t> ParseBytes(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  struct Unit {
    const char* suffix;
    int64_t scale;
  };
  for (const Unit& unit :
       {Unit{"kb", 1 << 10}, Unit{"mb", 1 << 20}, Unit{"b", 1}, Unit{"", 1}}) {
    if (!absl::EndsWith(lower, unit.suffix)) continue;
    double value = 0;
    const absl::string_view number = absl::string_view(lower).substr(
        0, lower.size() - std::strlen(unit.suffix));
    if (!absl::SimpleAtod(number, &value)) break;
    const double bytes = value * static_cast<double>(unit.scale);
    if (!(bytes >= 16 << 10) || bytes > 1e9) break;
    return static_cast<int64_t>(bytes);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("switch buffer '", text,
                   "' is not a size like 512kb, 1mb or 4000000 (16kb..1e9)"));
}

}  // namespace

absl::StatusOr<LinkSpec> ParseLinkSpec(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  const std::string usage = absl::StrCat(
      "--netem='", text,
      "' must be RATE[,LATENCY][,buffer=BYTES][,rto_min=DURATION][,cc=NAME]"
      "[,ecn], like 1gbit,200us or 100mbit,buffer=1mb,rto_min=5ms");
  if (parts.empty() || parts[0].empty()) {
    return absl::InvalidArgumentError(usage);
  }
  LinkSpec spec;
  spec.text = text;
  ASSIGN_OR_RETURN(spec.rate_bits_per_s, ParseRate(parts[0]));
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const size_t eq = part.find('=');
    const std::string name = part.substr(0, eq);
    const std::string value =
        eq == std::string::npos ? "" : part.substr(eq + 1);
    if (eq == std::string::npos && part == "ecn") {
      spec.ecn = true;
    } else if (eq == std::string::npos && i == 1) {
      ASSIGN_OR_RETURN(spec.latency, ParseLatency(part));
    } else if (name == "buffer") {
      ASSIGN_OR_RETURN(spec.switch_buffer_bytes, ParseBytes(value));
    } else if (name == "rto_min") {
      absl::Duration rto;
      if (!absl::ParseDuration(value, &rto) || rto < absl::Milliseconds(1) ||
          rto > absl::Seconds(1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rto_min '", value, "' is not a duration from 1ms to 1s: ", usage));
      }
      spec.rto_min = rto;
    } else if (name == "cc" && !value.empty() &&
               std::all_of(value.begin(), value.end(), [](char c) {
                 return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                        c == '_';
               })) {
      spec.congestion_control = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown part '", part, "': ", usage));
    }
  }
  return spec;
}

int64_t SwitchBufferBytes(const LinkSpec& link) {
  return link.switch_buffer_bytes > 0 ? link.switch_buffer_bytes
                                      : kDefaultSwitchBufferBytes;
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
  std::vector<std::pair<std::string, absl::Status>> failed;
  int removed = 0;
  for (const std::string& name : names) {
    const absl::Status status =
        RunCommand({FindTool("ip"), "netns", "del", name}).status();
    if (status.ok()) {
      ++removed;
    } else {
      failed.emplace_back(name, status);
    }
  }
  if (failed.empty()) return removed;
  // Two processes sweeping the same leftover network (two launchers starting
  // at once after a killed job) each list it, and one deletes a namespace
  // between the other's listing and its `ip netns del`. Gone is what was
  // asked for: only a namespace still there is a failure.
  ASSIGN_OR_RETURN(const std::vector<std::string> left,
                   ListNamespaces(prefix + "-"));
  for (const auto& [name, status] : failed) {
    if (std::find(left.begin(), left.end(), name) != left.end()) return status;
  }
  return removed;
}

namespace {

// The bridge's alias: "gradsync-owner pid=P start=T pidns=pid:[N]" while a
// process owns the network, "gradsync-kept" once `netem up` released it.
constexpr char kOwnerTag[] = "gradsync-owner";
constexpr char kKeptTag[] = "gradsync-kept";

// Field 22 of /proc/PID/stat, the process's start time in clock ticks since
// boot: with the PID it names one process, whatever reuses the PID later.
// Empty when there is no such process.
std::string ProcessStartTicks(int64_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces; fields after it do not.
  const size_t end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos) return "";
  const std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(end_of_name + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (the state), so field 22 is fields[19].
  return fields.size() > 19 ? std::string(fields[19]) : "";
}

std::string PidNamespace() {
  char target[128];
  const ssize_t n = readlink("/proc/self/ns/pid", target, sizeof(target) - 1);
  return n > 0 ? std::string(target, n) : "";
}

std::string OwnerAlias() {
  return absl::StrCat(kOwnerTag, " pid=", getpid(),
                      " start=", ProcessStartTicks(getpid()),
                      " pidns=", PidNamespace());
}

// The value of `key=` in an alias, empty when absent.
std::string AliasField(absl::string_view alias, absl::string_view key) {
  for (absl::string_view word : absl::StrSplit(alias, ' ')) {
    if (absl::ConsumePrefix(&word, absl::StrCat(key, "="))) {
      return std::string(word);
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<LeftoverNetwork>> RemoveLeftoverNetworks() {
  const std::string ip = FindTool("ip");
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListNamespaces(""));
  std::vector<LeftoverNetwork> found;
  for (const std::string& name : names) {
    if (!absl::EndsWith(name, "-br")) continue;
    auto shown =
        RunCommand({ip, "-n", name, "-o", "link", "show", "dev", "br0"});
    // No br0: a namespace that is not one of ours.
    if (!shown.ok()) continue;
    const size_t at = shown->find(" alias ");
    const std::string alias =
        at == std::string::npos
            ? ""
            : std::string(absl::StripAsciiWhitespace(shown->substr(at + 7)));
    LeftoverNetwork network;
    network.prefix = name.substr(0, name.size() - 3);
    if (absl::StartsWith(alias, kKeptTag)) continue;
    if (!absl::StartsWith(alias, kOwnerTag)) {
      network.owner =
          "no owner recorded (a build before the record, or a "
          "network being built now)";
      found.push_back(network);
      continue;
    }
    const std::string pid = AliasField(alias, "pid");
    int64_t pid_value = 0;
    if (!absl::SimpleAtoi(pid, &pid_value) || pid_value <= 0) continue;
    // Another PID namespace's PIDs cannot be looked up from here.
    if (AliasField(alias, "pidns") != PidNamespace()) continue;
    if (ProcessStartTicks(pid_value) == AliasField(alias, "start")) continue;
    network.owner = absl::StrCat("launcher PID ", pid, ", which is gone");
    // OK: none of its namespaces is left, whoever removed them.
    RETURN_IF_ERROR(RemoveNamespaces(network.prefix).status());
    network.removed = true;
    found.push_back(network);
  }
  return found;
}

void EmulatedNetwork::Release() {
  const absl::Status marked =
      Ip({"-n", BridgeNamespace(), "link", "set", "br0", "alias", kKeptTag});
  if (!marked.ok()) {
    GS_LOG(WARNING) << "the emulated network " << options_.prefix
                    << " stays, but could not be marked as kept: "
                    << marked.message();
  }
  namespaces_.clear();
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
  ASSIGN_OR_RETURN(const std::vector<LeftoverNetwork> leftovers,
                   RemoveLeftoverNetworks());
  for (const LeftoverNetwork& leftover : leftovers) {
    if (leftover.removed) {
      GS_LOG(WARNING) << "removed the emulated network " << leftover.prefix
                      << " that a killed job left (" << leftover.owner << ")";
    } else {
      GS_LOG(WARNING) << "the emulated network " << leftover.prefix
                      << " is on this machine with " << leftover.owner
                      << "; if no job uses it, remove it with "
                         "`netem down --prefix="
                      << leftover.prefix
                      << "` (the netem program beside gradsync)";
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
  std::string model = absl::StrFormat(
      "switch ports of %d KiB%s, TCP %s, min RTO %s",
      SwitchBufferBytes(link) >> 10, link.ecn ? " marking ECN" : "",
      congestion_control_.empty() ? link.congestion_control
                                  : congestion_control_,
      link.rto_min > absl::ZeroDuration() ? absl::FormatDuration(link.rto_min)
                                          : "200ms (kernel default)");
  return absl::StrCat(options_.nodes, " nodes, ", rate, " full-duplex links, ",
                      latency, ", ", model, " (namespaces ", options_.prefix,
                      "-*, ", NodeAddress(0), "..",
                      NodeAddress(options_.nodes - 1), ")");
}

absl::Status EmulatedNetwork::Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip_path_};
  argv.insert(argv.end(), args.begin(), args.end());
  if (options_.verbose) {
    GS_LOG(DEBUG) << absl::StrJoin(argv, " ");
  }
  return RunCommand(argv).status();
}

// Shapes traffic leaving `device` in namespace `ns`: tbf for the rate, its
// queue the host's (uplink) or the switch port's buffer (downlink), and
// netem below it for half the one-way latency, or, on a switch port with
// ecn, red marking above DCTCP's threshold.
absl::Status EmulatedNetwork::Shape(const std::string& ns,
                                    const std::string& device, bool uplink) {
  const LinkSpec& link = options_.link;
  auto tc = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {tc_path_, "-n", ns};
    argv.insert(argv.end(), args.begin(), args.end());
    if (options_.verbose) {
      GS_LOG(DEBUG) << absl::StrJoin(argv, " ");
    }
    return RunCommand(argv).status();
  };
  const int64_t queue_bytes =
      uplink ? kHostQueueBytes : SwitchBufferBytes(link);
  std::string parent = "root";
  if (link.rate_bits_per_s > 0) {
    const int64_t burst = std::max<int64_t>(
        kMinBurstBytes,
        static_cast<int64_t>(link.rate_bits_per_s / 8 * kBurstSeconds));
    RETURN_IF_ERROR(
        tc({"qdisc", "add", "dev", device, "root", "handle", "1:", "tbf",
            "rate", TcRate(link.rate_bits_per_s), "burst", absl::StrCat(burst),
            "limit", absl::StrCat(queue_bytes)}));
    parent = "1:1";
  }
  auto child = [&](std::vector<std::string> qdisc) {
    std::vector<std::string> args = {"qdisc", "add", "dev", device};
    if (parent == "root") {
      args.push_back("root");
    } else {
      args.insert(args.end(), {"parent", parent});
    }
    args.insert(args.end(), qdisc.begin(), qdisc.end());
    return tc(args);
  };
  if (link.ecn && !uplink) {
    // DCTCP's marking (Alizadeh et al.): every packet above K is marked, K
    // a sixth of the buffer (about 170 KB of 1 MiB; DCTCP used 65 packets
    // at 10 Gbit/s). red with min = K, max just above and probability 1 is
    // that step function; `burst` is the smallest tc accepts.
    const int64_t k = queue_bytes / 6;
    const int64_t avpkt = 1500;
    const int64_t burst = (2 * k + (k + avpkt)) / (3 * avpkt) + 1;
    const absl::Status marking =
        child({"handle", "20:", "red", "limit", absl::StrCat(queue_bytes),
               "min", absl::StrCat(k), "max", absl::StrCat(k + avpkt), "avpkt",
               absl::StrCat(avpkt), "burst", absl::StrCat(burst), "probability",
               "1", "bandwidth",
               TcRate(std::max<int64_t>(link.rate_bits_per_s, 1e6)), "ecn"});
    if (!marking.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ecn needs the red qdisc (sch_red) to mark packets on the switch "
          "ports; this kernel refused it (",
          marking.message(), "). Leave out ecn"));
    }
    return absl::OkStatus();
  }
  if (link.latency > absl::ZeroDuration() && latency_emulated_) {
    const absl::Status delay =
        child({"handle", "10:", "netem", "delay", TcMicros(link.latency / 2),
               "limit", "100000"});
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

// The node's TCP: congestion control, ECN, and the minimum RTO on the route
// to every other node.
absl::Status EmulatedNetwork::ConfigureTcp(int node) {
  const LinkSpec& link = options_.link;
  const std::string ns = NodeNamespace(node);
  const std::string sysctl = FindTool("sysctl");
  if (sysctl.empty()) {
    return absl::FailedPreconditionError(
        "the emulated network sets each node's TCP with `sysctl`: apt-get "
        "install procps");
  }
  auto set = [&](const std::string& key, const std::string& value) {
    return RunCommand({ip_path_, "netns", "exec", ns, sysctl, "-q", "-w",
                       absl::StrCat(key, "=", value)})
        .status();
  };
  if (congestion_control_.empty()) {
    congestion_control_ = link.congestion_control;
    absl::Status chosen =
        set("net.ipv4.tcp_congestion_control", congestion_control_);
    if (!chosen.ok() && congestion_control_ == "cubic") {
      // Some kernels allow a namespace only the congestion controls in
      // net.ipv4.tcp_allowed_congestion_control; reno is always there.
      GS_LOG(INFO) << "this kernel refuses cubic as a network namespace's "
                      "congestion control; the nodes use reno (the same "
                      "window growth at a data centre's round trips)";
      congestion_control_ = "reno";
      chosen = set("net.ipv4.tcp_congestion_control", congestion_control_);
    }
    if (!chosen.ok()) {
      return Annotate(
          chosen, absl::StrCat("congestion control cc=", congestion_control_,
                               " (see sysctl "
                               "net.ipv4.tcp_available_congestion_"
                               "control)"));
    }
  } else {
    RETURN_IF_ERROR(
        set("net.ipv4.tcp_congestion_control", congestion_control_));
  }
  RETURN_IF_ERROR(set("net.ipv4.tcp_ecn", link.ecn ? "1" : "0"));
  if (link.rto_min > absl::ZeroDuration()) {
    RETURN_IF_ERROR(
        Ip({"-n", ns, "route", "replace", "10.213.0.0/16", "dev",
            kNodeInterface, "proto", "kernel", "scope", "link", "src",
            NodeAddress(node), "rto_min",
            absl::StrCat(absl::ToInt64Milliseconds(link.rto_min), "ms")}));
  }
  return absl::OkStatus();
}

absl::Status EmulatedNetwork::Build() {
  const std::string bridge_ns = BridgeNamespace();
  RETURN_IF_ERROR(Ip({"netns", "add", bridge_ns}));
  namespaces_.push_back(bridge_ns);
  RETURN_IF_ERROR(
      Ip({"-n", bridge_ns, "link", "add", "br0", "type", "bridge"}));
  // Who made the network, for RemoveLeftoverNetworks after a kill.
  RETURN_IF_ERROR(
      Ip({"-n", bridge_ns, "link", "set", "br0", "alias", OwnerAlias()}));
  RETURN_IF_ERROR(Ip({"-n", bridge_ns, "link", "set", "br0", "up"}));
  for (int node = 0; node < options_.nodes; ++node) {
    const std::string ns = NodeNamespace(node);
    const std::string port = absl::StrCat("p", node);
    RETURN_IF_ERROR(Ip({"netns", "add", ns}));
    namespaces_.push_back(ns);
    // Both ends are created directly inside our namespaces, so no name ever
    // appears (or can collide) in the host's namespace.
    RETURN_IF_ERROR(Ip({"-n", bridge_ns, "link", "add", port, "type", "veth",
                        "peer", "name", kNodeInterface, "netns", ns}));
    RETURN_IF_ERROR(
        Ip({"-n", bridge_ns, "link", "set", port, "master", "br0", "up"}));
    // Loopback matters: a process reaches its own address through it (a
    // colocated parameter server, the coordinator on worker 0).
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "lo", "up"}));
    RETURN_IF_ERROR(Ip({"-n", ns, "addr", "add", NodeAddress(node) + "/16",
                        "dev", kNodeInterface}));
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", kNodeInterface, "up"}));
    RETURN_IF_ERROR(Shape(ns, kNodeInterface, /*uplink=*/true));
    RETURN_IF_ERROR(Shape(bridge_ns, port, /*uplink=*/false));
    RETURN_IF_ERROR(ConfigureTcp(node));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EmulatedNetwork::QueueCountersJson() {
  // tc -s -j: [{"kind":"tbf",...,"drops":N,...}, ...]; red adds "marked".
  auto counters = [&](const std::string& ns, const std::string& device,
                      int64_t* drops, int64_t* marks) -> absl::Status {
    ASSIGN_OR_RETURN(std::string text,
                     RunCommand({tc_path_, "-n", ns, "-s", "-j", "qdisc",
                                 "show", "dev", device}));
    const nlohmann::json qdiscs =
        nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!qdiscs.is_array()) {
      return absl::InternalError(absl::StrCat("unreadable `tc -s -j qdisc` of ",
                                              ns, " ", device, ": ", text));
    }
    *drops = *marks = 0;
    for (const nlohmann::json& q : qdiscs) {
      *drops += q.value("drops", int64_t{0});
      *marks += q.value("marked", int64_t{0});
    }
    return absl::OkStatus();
  };
  nlohmann::json out = {{"uplink_drops", nlohmann::json::array()},
                        {"port_drops", nlohmann::json::array()},
                        {"port_marks", nlohmann::json::array()}};
  for (int node = 0; node < options_.nodes; ++node) {
    int64_t drops = 0, marks = 0;
    RETURN_IF_ERROR(
        counters(NodeNamespace(node), kNodeInterface, &drops, &marks));
    out["uplink_drops"].push_back(drops);
    RETURN_IF_ERROR(
        counters(BridgeNamespace(), absl::StrCat("p", node), &drops, &marks));
    out["port_drops"].push_back(drops);
    out["port_marks"].push_back(marks);
  }
  return out.dump();
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
