#include "core/telemetry/process_counters.h"

#include <sys/resource.h>

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

// "Tcp: A B\nTcp: 1 2\n..." -> {"Tcp.A": 1, "Tcp.B": 2, ...}.
absl::Status ParsePairs(const std::string& text, const std::string& file,
                        std::map<std::string, int64_t>* values) {
  const std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  for (size_t i = 0; i < lines.size(); i += 2) {
    if (i + 1 >= lines.size()) {
      return absl::DataLossError(absl::StrCat(
          file, ": the header line '", lines[i], "' has no values line"));
    }
    const std::vector<std::string> names =
        absl::StrSplit(lines[i], ' ', absl::SkipEmpty());
    const std::vector<std::string> numbers =
        absl::StrSplit(lines[i + 1], ' ', absl::SkipEmpty());
    if (names.empty() || numbers.size() != names.size() ||
        names[0] != numbers[0]) {
      return absl::DataLossError(
          absl::StrCat(file, ": lines '", lines[i], "' and '", lines[i + 1],
                       "' are not a header and its values"));
    }
    const std::string group = names[0].substr(0, names[0].size() - 1);
    for (size_t k = 1; k < names.size(); ++k) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(numbers[k], &value)) {
        return absl::DataLossError(absl::StrCat(file, ": ", group, ".",
                                                names[k], " is '", numbers[k],
                                                "', not a number"));
      }
      (*values)[absl::StrCat(group, ".", names[k])] = value;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<TcpCounters> ParseTcpCounters(const std::string& snmp,
                                             const std::string& netstat) {
  std::map<std::string, int64_t> values;
  if (absl::Status s = ParsePairs(snmp, "snmp", &values); !s.ok()) return s;
  if (absl::Status s = ParsePairs(netstat, "netstat", &values); !s.ok())
    return s;
  auto get = [&](const char* name) {
    auto it = values.find(name);
    return it == values.end() ? int64_t{0} : it->second;
  };
  TcpCounters c;
  c.out_segments = get("Tcp.OutSegs");
  c.retrans_segments = get("Tcp.RetransSegs");
  c.timeouts = get("TcpExt.TCPTimeouts");
  c.loss_probes = get("TcpExt.TCPLossProbes");
  c.fast_retrans = get("TcpExt.TCPFastRetrans");
  c.spurious_rtos = get("TcpExt.TCPSpuriousRTOs");
  return c;
}

absl::StatusOr<TcpCounters> ReadNamespaceTcpCounters() {
  absl::StatusOr<std::string> snmp = ReadText("/proc/self/net/snmp");
  if (!snmp.ok()) return snmp.status();
  absl::StatusOr<std::string> netstat = ReadText("/proc/self/net/netstat");
  if (!netstat.ok()) return netstat.status();
  return ParseTcpCounters(*snmp, *netstat);
}

absl::StatusOr<InterfaceBytes> ParseInterfaceBytes(
    const std::string& net_dev, const std::string& interface) {
  for (absl::string_view line : absl::StrSplit(net_dev, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) != interface) {
      continue;
    }
    const std::vector<std::string> fields =
        absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipEmpty());
    InterfaceBytes bytes;
    if (fields.size() < 9 || !absl::SimpleAtoi(fields[0], &bytes.rx_bytes) ||
        !absl::SimpleAtoi(fields[8], &bytes.tx_bytes)) {
      return absl::DataLossError(
          absl::StrCat("net/dev: the line of ", interface, " ('", line,
                       "') does not have the receive and transmit bytes"));
    }
    return bytes;
  }
  return absl::NotFoundError(
      absl::StrCat("net/dev: no interface ", interface));
}

absl::StatusOr<InterfaceBytes> ReadNamespaceInterfaceBytes(
    const std::string& interface) {
  absl::StatusOr<std::string> net_dev = ReadText("/proc/self/net/dev");
  if (!net_dev.ok()) return net_dev.status();
  return ParseInterfaceBytes(*net_dev, interface);
}

double ProcessCpuSeconds() {
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string ProcessCountersJson() {
  nlohmann::ordered_json j;
  j["cpu_s"] = static_cast<double>(
                   static_cast<int64_t>(ProcessCpuSeconds() * 1000 + 0.5)) /
               1000;
  j["tcp_scope"] = "namespace";
  absl::StatusOr<TcpCounters> tcp = ReadNamespaceTcpCounters();
  if (tcp.ok()) {
    j["tcp"] = {{"out_segments", tcp->out_segments},
                {"retrans_segments", tcp->retrans_segments},
                {"timeouts", tcp->timeouts},
                {"loss_probes", tcp->loss_probes},
                {"fast_retrans", tcp->fast_retrans},
                {"spurious_rtos", tcp->spurious_rtos}};
  } else {
    j["tcp_error"] = std::string(tcp.status().message());
  }
  return j.dump();
}

}  // namespace gradsync
