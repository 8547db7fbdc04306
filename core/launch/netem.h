// An emulated cluster network on one machine: one Linux network namespace per
// rank (worker or server), all joined by a bridge that lives in a namespace of
// its own, each rank with its own full-duplex link of a given rate and
// latency.
//
//            rank 0 ns            bridge ns              rank 1 ns
//   [eth0 10.213.1.1] ==veth== [p0]--br0--[p1] ==veth== [eth0 10.213.1.2]
//     ^ tbf: rank 0's uplink     ^ tbf: rank 0's downlink (toward rank 0)
//
// Both ends of every veth are shaped, so a rank can neither send nor receive
// faster than its link: with egress-only shaping, N workers could push N
// times the link rate into one parameter server and its bottleneck — the
// point of the study — would vanish. Latency is a netem delay of half the
// configured one-way latency on each end (a packet crosses its sender's
// uplink and its receiver's downlink); kernels without sch_netem get the
// rate only, with a warning.
//
// Addresses come only from 10.213.0.0/16 and exist only inside namespaces we
// create; every name starts with a per-job prefix ("gs" + 4 hex digits), so
// concurrent jobs never collide and cleanup can never touch anything else.
// Destroy() (also run by the destructor) deletes every namespace, which
// takes the veths, the bridge and the qdiscs with it. Needs root
// (CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip` and `tc` (Debian's iproute2).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradsync {

// The switch model. Each node's link is a host NIC (its uplink) and a port of
// one switch (its downlink, where N senders converging on one receiver meet:
// incast). Defaults behave like a data-centre cluster, not a worst case; the
// README of this folder says where they come from.
struct LinkSpec {
  int64_t rate_bits_per_s = 0;  // 0: not limited
  absl::Duration latency;       // one-way, rank to rank; zero: none added
  // Bytes a switch port queues toward its node before it drops (or, with
  // ecn, the limit above the marking threshold). 0: the default, 1 MiB.
  int64_t switch_buffer_bytes = 0;
  // TCP's minimum retransmission timeout on every route of every node
  // (`ip route ... rto_min`); zero: the kernel's 200 ms.
  absl::Duration rto_min;
  // Congestion control of every node's TCP; the host's default leaks into
  // new namespaces otherwise (BBR here, which ignores loss and overflows
  // shallow ports under incast). "cubic" falls back to "reno" (the same
  // window growth at a data centre's small bandwidth-delay products) where
  // the kernel refuses cubic as a namespace's default.
  std::string congestion_control = "cubic";
  // Switch ports mark ECN (CE) instead of dropping once their queue exceeds
  // a threshold (DCTCP's K, a sixth of the buffer), and the nodes negotiate
  // ECN: the sender halves its window without losing a packet.
  bool ecn = false;
  std::string text;  // as given, for logs ("1gbit,200us")
};

// Parses "RATE[,LATENCY][,OPTION...]": RATE like 1gbit, 100mbit, 2.5gbit,
// 500kbit or "none"; LATENCY like 200us, 1ms, 0; OPTIONs buffer=BYTES
// (512kb, 1mb, 4000000; the switch port's buffer), rto_min=DURATION (5ms),
// cc=NAME (cubic, reno, bbr, dctcp) and ecn.
// "100mbit,buffer=1mb,rto_min=5ms".
absl::StatusOr<LinkSpec> ParseLinkSpec(const std::string& text);

// The switch port's buffer the spec resolves to (its default applied).
int64_t SwitchBufferBytes(const LinkSpec& link);

struct EmulatedNetworkOptions {
  int nodes = 2;
  LinkSpec link;
  // Names start with this; empty picks "gs" + 4 random hex digits.
  std::string prefix;
  // Echo each ip/tc command to the log (GRADSYNC_LOG_LEVEL=debug).
  bool verbose = false;
};

class EmulatedNetwork {
 public:
  // Builds the namespaces, veths, bridge and qdiscs. On any failure what was
  // already built is removed before the error is returned.
  static absl::StatusOr<std::unique_ptr<EmulatedNetwork>> Create(
      const EmulatedNetworkOptions& options);
  ~EmulatedNetwork();

  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  // Removes everything Create made. Idempotent; reports the first failure
  // but tries every namespace.
  absl::Status Destroy();
  // Forgets the network without removing it (`netem up`: it outlives us),
  // and marks it as kept on purpose, so that RemoveLeftoverNetworks leaves
  // it to `netem down`.
  void Release();

  int nodes() const { return options_.nodes; }
  const std::string& prefix() const { return options_.prefix; }
  std::string NodeNamespace(int node) const;
  // The node's interface to its link, inside its namespace.
  static constexpr char kNodeInterface[] = "eth0";
  std::string BridgeNamespace() const;
  // The node's IPv4 address inside its namespace ("10.213.1.1").
  std::string NodeAddress(int node) const;
  // Prepended to a command to run it inside the node's namespace:
  // {"/usr/sbin/ip", "netns", "exec", "<ns>"}.
  std::vector<std::string> ExecPrefix(int node) const;
  // False when the kernel could not add the latency (no sch_netem).
  bool latency_emulated() const { return latency_emulated_; }
  // "4 nodes, 1 Gbit/s links, 200 us (prefix gs1a2b, 10.213.1.1-10.213.1.4)".
  std::string Describe() const;
  // The congestion control the nodes use (after any fallback).
  const std::string& congestion_control() const { return congestion_control_; }
  // Packets each queue dropped (and, with ecn, marked) so far, as JSON:
  // {"uplink_drops":[per node],"port_drops":[per node],"port_marks":[...]}.
  // Read before Destroy (the counters go with the namespaces).
  absl::StatusOr<std::string> QueueCountersJson();

 private:
  explicit EmulatedNetwork(EmulatedNetworkOptions options)
      : options_(std::move(options)) {}
  absl::Status Build();
  // `uplink`: the node's NIC (deep, never the drop point, like a host's
  // transmit queue under TCP small queues); else a switch port.
  absl::Status Shape(const std::string& ns, const std::string& device,
                     bool uplink);
  absl::Status ConfigureTcp(int node);
  absl::Status Ip(const std::vector<std::string>& args);

  EmulatedNetworkOptions options_;
  std::string ip_path_, tc_path_;
  std::vector<std::string> namespaces_;  // created so far, in creation order
  bool latency_emulated_ = true;
  std::string congestion_control_;
};

// OK when this process may build an emulated network: root, with `ip` and
// `tc` installed. Otherwise says what is missing and how to get it.
absl::Status CheckEmulationPrerequisites();

// Runs argv (argv[0] an absolute path) and returns its stdout+stderr, or an
// error with the command line, its exit code and output.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv);

// The namespaces whose names start with `prefix` ("gs1a2b-n0", ...).
absl::StatusOr<std::vector<std::string>> ListNamespaces(
    const std::string& prefix);

// Deletes the namespaces of the network named `prefix` (`<prefix>-n*` and
// `<prefix>-br`), for a network `netem up` left or a killed job leaked.
// Returns how many this call removed; OK once none is left, also where
// another process removed some of them meanwhile.
absl::StatusOr<int> RemoveNamespaces(const std::string& prefix);

// An emulated network another process left on this machine.
struct LeftoverNetwork {
  std::string prefix;
  std::string owner;  // "launcher PID 1234", or why there is none
  bool removed = false;
};

// Every network records its maker on its bridge (the alias of br0 in
// `<prefix>-br`: PID, the process's start time and PID namespace), so the
// record lives and dies with the network. A network whose maker is provably
// gone (same PID namespace, and no process with that PID and start time: a
// launcher killed before its teardown, by SIGKILL or the OOM killer) is
// removed here. Networks kept on purpose (`netem up`) and networks of live
// makers are left alone; a network with no record (from a build before the
// record, or one being built this instant) is reported with removed = false
// and never touched. EmulatedNetwork::Create calls this first.
absl::StatusOr<std::vector<LeftoverNetwork>> RemoveLeftoverNetworks();

}  // namespace gradsync
