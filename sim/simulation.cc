#include "sim/simulation.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/cost_model.h"
#include "allreduce/algorithms/peer_exchange.h"
#include "allreduce/algorithms/ring_allgather.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "allreduce/allreduce_table.h"
#include "core/base/power_of_two.h"
#include "core/sync/link_cost.h"
#include "simgrid/s4u.hpp"

namespace gradsync {
namespace sim {
namespace sg4 = simgrid::s4u;
namespace {

// What every actor of the run shares; SimGrid runs actors one at a time, so
// no lock is needed.
struct Run {
  SimulationOptions options;
  DoubleBinaryTrees trees;       // the tree's shapes
  std::vector<Strategy> picks;   // the selector's, per bucket
  std::vector<WireBucket> wire;  // per bucket: what the all-reduce moves
  // PS, per bucket, server and key: one worker's push and one answer.
  std::vector<std::vector<std::vector<int64_t>>> push_bytes, answer_bytes;
  // Per endpoint (a rank, a merged PS worker host, a separate server): the
  // NIC it is behind and its ToR (-1: one switch).
  std::vector<int> nic_of;
  std::vector<int> tor_of;
  std::vector<int> copies;               // per NIC: real hosts it stands for
  std::vector<int64_t> sent;             // per NIC: bytes out of the host
  std::vector<int64_t> received;         // per NIC: bytes into the host
  // Per NIC's token bucket (ClusterSpec::link_burst_bytes): when the bytes
  // it did not cover have left at the rate, and its tokens then.
  std::vector<double> backlog_end;
  std::vector<double> tokens_at_backlog_end;
  std::vector<int64_t> uplink_sent;      // per ToR
  std::vector<int64_t> uplink_received;  // per ToR
  std::vector<double> last_hop_rate;     // per endpoint: from its left rank
  std::vector<double> worker_done;       // per worker endpoint
  sg4::BarrierPtr ring_barrier;          // the ring's bucket ends together
  std::vector<sg4::BarrierPtr> tree_barriers;  // per rank: its two trees
  // The cores every rank's per-message software time runs on
  // (ClusterSpec::message_cpu_s); null when messages cost no CPU.
  sg4::Host* cpu = nullptr;
  int64_t messages = 0;
};

// The shared CPU host's speed: a message's software time in seconds is
// this many flops.
constexpr double kCpuFlopsPerSecond = 1e9;

int64_t Share(int64_t bytes, int parts, int index) {
  // The real code's split: the first `bytes % parts` parts one byte larger.
  return bytes / parts + (index < bytes % parts ? 1 : 0);
}

// Block b of `blocks` over `count` units, as halving_doubling_allreduce.cc
// and hierarchical_allreduce.cc cut their buffers: the first count % blocks
// one unit larger.
int64_t BlockOffset(int64_t count, int blocks, int b) {
  return b * (count / blocks) + std::min<int64_t>(b, count % blocks);
}

sg4::Mailbox* Box(const std::string& name) {
  return sg4::Mailbox::by_name(name);
}

sg4::CommPtr Send(Run& run, int from, int to, sg4::Mailbox* box,
                  int64_t bytes) {
  // Bytes that stay inside a host (a colocated server and its worker, two
  // ranks of one host) cross no NIC.
  const int from_nic = run.nic_of[from], to_nic = run.nic_of[to];
  if (from_nic != to_nic) {
    run.sent[from_nic] += bytes;
    run.received[to_nic] += bytes;
    const int from_tor = run.tor_of[from], to_tor = run.tor_of[to];
    if (from_tor != to_tor) {
      run.uplink_sent[from_tor] += bytes;
      run.uplink_received[to_tor] += bytes;
    }
  }
  ++run.messages;
  const double burst = run.options.cluster.link_burst_bytes;
  if (burst > 0 && from_nic != to_nic && bytes > 0) {
    // The token bucket (ClusterSpec::link_burst_bytes): what the bucket
    // covers leaves at once; the flow carries the rest.
    // A merged PS host stands for `copies` NICs, each with its bucket.
    const double copies = run.copies[from_nic];
    const double rate = run.options.cluster.link_bytes_per_s * copies;
    const double now = sg4::Engine::get_clock();
    double& backlog_end = run.backlog_end[from_nic];
    double& tokens_then = run.tokens_at_backlog_end[from_nic];
    // No tokens while bytes wait for the rate; after that they refill.
    const double tokens =
        now < backlog_end
            ? 0.0
            : std::min(copies * burst,
                       tokens_then + (now - backlog_end) * rate);
    const double covered = std::min(static_cast<double>(bytes), tokens);
    const double rest = bytes - covered;
    if (rest > 0) {
      backlog_end = std::max(backlog_end, now) + rest / rate;
      tokens_then = 0;
    } else {
      backlog_end = now;
      tokens_then = tokens - covered;
    }
    bytes = std::llround(rest);
  }
  // The payload is never read (only its simulated size matters); SimGrid
  // refuses a null one. A tail is 0 bytes: its latency only.
  static int payload = 0;
  return box->put_async(&payload, bytes);
}

sg4::CommPtr Receive(sg4::Mailbox* box) {
  // SimGrid writes the payload's address here when the message lands, long
  // after this function has returned: a static, never a local.
  static void* ignored = nullptr;
  return box->get_async<void>(&ignored);
}

// The ring's loop's software time per step (ClusterSpec::ring_message_cpu_s).
double RingMessageCpuSeconds(const ClusterSpec& cluster) {
  return cluster.ring_message_cpu_s < 0 ? cluster.message_cpu_s
                                        : cluster.ring_message_cpu_s;
}

// The software time of one message this rank has taken in, on the cores
// all ranks share: `seconds`, or a peer exchange's (ClusterSpec::
// message_cpu_s) when negative.
void MessageCpu(Run* run, double seconds = -1) {
  if (run->cpu == nullptr) return;
  if (seconds < 0) seconds = run->options.cluster.message_cpu_s;
  if (seconds <= 0) return;
  // An activity of its own on the shared host (Host::exec_async would run
  // on the actor's own host).
  sg4::this_actor::exec_init(seconds * kCpuFlopsPerSecond)
      ->set_host(run->cpu)
      ->wait();
}

// A message a peer exchange (halving-doubling's rounds, the tree's edges)
// has taken in: its software time on the shared cores, then its rank's
// wake-up behind the other ranks of the machine (ClusterSpec::
// message_wake_s), busy or not.
void PeerMessage(Run* run) {
  MessageCpu(run);
  const ClusterSpec& cluster = run->options.cluster;
  if (cluster.message_wake_s > 0) {
    sg4::this_actor::sleep_for(cluster.message_wake_s * cluster.workers /
                               cluster.cpu_cores);
  }
}

double BucketReadySeconds(const StepProfile& profile, int bucket) {
  return (profile.forward_ms + profile.buckets[bucket].ready_ms) / 1e3;
}

// When worker (or merged worker endpoint) `worker` has bucket `bucket`:
// the straggler's sleep comes before its forward, and delays its buckets
// unless it overlaps the previous step's communication
// (SimulationOptions::overlap_next_forward).
double WorkerReadySeconds(const Run& run, int worker, int bucket) {
  const double sleep_s = worker == run.options.straggler_rank &&
                                 !run.options.overlap_next_forward
                             ? run.options.straggler_ms / 1e3
                             : 0;
  return sleep_s + BucketReadySeconds(run.options.profile, bucket);
}

int BucketCount(const Run& run) {
  return static_cast<int>(run.options.profile.buckets.size());
}

void Done(Run* run, int rank) {
  run->worker_done[rank] =
      std::max(run->worker_done[rank], sg4::Engine::get_clock());
}

// The ring where each step costs its loop's software time on shared cores
// or an overhead of its own (ClusterSpec::ring_message_cpu_s,
// ring_step_overhead_s): every rank forwards the first byte of each of its
// 2(N-1) steps itself, once the one of its previous step has come in from
// its left and it has spent the step's software time and overhead on it,
// so all N ranks' steps contend for the cores as the emulated ranks do. The
// bytes are one flow per rank as in RingBucket; every rank's last segment
// follows its last step's first byte.
void RingBucketSteps(Run* run, int rank, int b) {
  const int n = run->options.cluster.workers;
  const int steps = 2 * (n - 1);
  const int right = (rank + 1) % n;
  const int64_t bytes = run->wire[b].dense_bytes;
  auto segment = [&](int step) {
    return Share(bytes, n, ((rank - step) % n + n) % n);
  };
  // The stream holds every step's segment but the last; the last step's
  // first byte carries its segment with it, so the last segment follows
  // the last hop as it does in the real code.
  int64_t stream = 0;
  for (int step = 0; step + 1 < steps; ++step) stream += segment(step);
  std::vector<sg4::CommPtr> comms = {
      Send(*run, rank, right, Box(absl::StrCat("ring-", right)), stream),
      Receive(Box(absl::StrCat("ring-", rank)))};
  sg4::Mailbox* tail_box = Box(absl::StrCat("ring-step-", right));
  std::vector<sg4::CommPtr> tails_in;
  for (int step = 0; step < steps; ++step) {
    tails_in.push_back(Receive(Box(absl::StrCat("ring-step-", rank))));
  }
  const double cpu_s = RingMessageCpuSeconds(run->options.cluster);
  const double overhead_s = run->options.cluster.ring_step_overhead_s;
  auto take_in = [&](int step) {
    tails_in[step]->wait();
    MessageCpu(run, cpu_s);
    if (overhead_s > 0) sg4::this_actor::sleep_for(overhead_s);
  };
  for (int step = 0; step < steps; ++step) {
    if (step > 0) take_in(step - 1);
    comms.push_back(
        Send(*run, rank, right, tail_box, step + 1 < steps ? 0 : segment(step)));
  }
  take_in(steps - 1);
  for (auto& comm : comms) comm->wait();
  run->ring_barrier->wait();
}

// One bucket of the ring (ring_allreduce.cc) among all N ranks.
void RingBucket(Run* run, int rank, int b) {
  if (run->cpu != nullptr || run->options.cluster.ring_step_overhead_s > 0) {
    RingBucketSteps(run, rank, b);
    return;
  }
  const int n = run->options.cluster.workers;
  const int steps = 2 * (n - 1);
  const int right = (rank + 1) % n;
  const int64_t bytes = run->wire[b].dense_bytes;
  // Step s sends chunk (rank - s) mod n: its share of the bucket.
  int64_t stream = 0;
  for (int step = 0; step < steps; ++step) {
    stream += Share(bytes, n, ((rank - step) % n + n) % n);
  }
  std::vector<sg4::CommPtr> comms = {
      Send(*run, rank, right, Box(absl::StrCat("ring-", right)), stream),
      Receive(Box(absl::StrCat("ring-", rank)))};
  sg4::Mailbox* tail_box = Box(absl::StrCat("ring-tail-", right));
  sg4::Mailbox* own_tail_box = Box(absl::StrCat("ring-tail-", rank));
  // Tail hop k leaves rank k mod n once hop k - 1 has arrived. The next
  // hop's receive is posted before it is due: SimGrid starts a message's
  // latency when both ends have met.
  sg4::CommPtr tail_in;
  if (rank > 0 && rank <= steps) tail_in = Receive(own_tail_box);
  for (int hop = rank; hop < steps; hop += n) {
    if (hop > 0) tail_in->wait();
    if (hop + n <= steps) tail_in = Receive(own_tail_box);
    comms.push_back(Send(*run, rank, right, tail_box, 0));
  }
  if (rank == steps % n) {
    // The last hop's receiver: the last segment follows the tail, at the
    // rate of the hop it crosses.
    tail_in->wait();
    sg4::this_actor::sleep_for(static_cast<double>(Share(bytes, n, 0)) /
                               run->last_hop_rate[rank]);
  }
  for (auto& comm : comms) comm->wait();
  run->ring_barrier->wait();
}

// Halving-doubling among `members` (global ranks; this one is
// members[index]) on `bytes`, as HalvingDoublingInGroup runs it: the fold of
// the extra members, the power-of-two core's halving and doubling rounds, the
// result's return. `tag` keeps the mailboxes of different uses apart.
void HalvingDoublingRounds(Run* run, const std::vector<int>& members, int index,
                           int64_t bytes, const std::string& tag) {
  const int n = static_cast<int>(members.size());
  if (n == 1) return;
  const int p = static_cast<int>(LargestPowerOfTwoAtMost(n));
  const int extra = n - p;
  const int rank = members[index];
  // Where virtual index v of the power-of-two core sits.
  auto member = [&](int v) {
    return members[v < extra ? 2 * v + 1 : v + extra];
  };
  // One round with `partner`: `send_bytes` out (-1: none), `receive_bytes`
  // in (-1: none). A round in which both send waits for the partner's clear
  // to send past the eager prefix (peer_exchange.h), unless the partner is
  // the previous round's single peer; the partner decides the same, so the
  // receiver knows how many pieces come. The message taken in costs its
  // software time (MessageCpu).
  int last_peer = -1;
  const int64_t eager = PeerExchange::kDefaultEagerBytes;
  auto exchange = [&](int partner, int64_t send_bytes, int64_t receive_bytes) {
    const bool two_way = send_bytes >= 0 && receive_bytes >= 0;
    const bool clear = two_way && partner != last_peer;
    sg4::Mailbox* out = Box(absl::StrCat(tag, partner, "-", rank));
    sg4::Mailbox* in = Box(absl::StrCat(tag, rank, "-", partner));
    std::vector<sg4::CommPtr> comms, receives;
    sg4::CommPtr header_in;
    if (clear) {
      comms.push_back(Send(*run, rank, partner,
                           Box(absl::StrCat(tag, "h", partner, "-", rank)), 0));
      header_in = Receive(Box(absl::StrCat(tag, "h", rank, "-", partner)));
    }
    if (receive_bytes >= 0) {
      receives.push_back(Receive(in));
      if (clear && receive_bytes > eager) receives.push_back(Receive(in));
    }
    if (send_bytes >= 0) {
      if (clear && send_bytes > eager) {
        comms.push_back(Send(*run, rank, partner, out, eager));
        header_in->wait();
        header_in = nullptr;
        comms.push_back(Send(*run, rank, partner, out, send_bytes - eager));
      } else {
        comms.push_back(Send(*run, rank, partner, out, send_bytes));
      }
    }
    if (header_in) comms.push_back(header_in);
    for (auto& comm : receives) comm->wait();
    if (!receives.empty()) PeerMessage(run);
    for (auto& comm : comms) comm->wait();
    last_peer = partner;
  };
  if (index < 2 * extra && index % 2 == 0) {
    exchange(members[index + 1], bytes, -1);  // the fold
    exchange(members[index + 1], -1, bytes);  // the result's return
    return;
  }
  if (index < 2 * extra) exchange(members[index - 1], -1, bytes);
  const int v = index < 2 * extra ? index / 2 : index - extra;
  int lo = 0, hi = p;
  auto span = [&](int from, int to) {
    return BlockOffset(bytes, p, to) - BlockOffset(bytes, p, from);
  };
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (v & mask) == 0;
    const int send_lo = lower ? mid : lo, send_hi = lower ? hi : mid;
    const int keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
    exchange(member(v ^ mask), span(send_lo, send_hi), span(keep_lo, keep_hi));
    lo = keep_lo;
    hi = keep_hi;
  }
  for (int mask = 1; mask < p; mask *= 2) {
    const int size = hi - lo;
    const bool lower = (v & mask) == 0;
    const int their_lo = lower ? hi : lo - size;
    exchange(member(v ^ mask), span(lo, hi), span(their_lo, their_lo + size));
    lo = std::min(lo, their_lo);
    hi = std::max(hi, their_lo + size);
  }
  if (index < 2 * extra) exchange(members[index - 1], bytes, -1);
}

std::vector<int> AllRanks(int n) {
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// hierarchical_allreduce.cc with R = G: reduce-scatter inside the host,
// halving-doubling of the own shard across hosts, all-gather inside.
void HierarchicalBucket(Run* run, int rank, int b) {
  const ClusterSpec& cluster = run->options.cluster;
  const int r = cluster.gpus_per_host;
  const int node = rank / r, local = rank % r;
  const int64_t floats = (run->wire[b].dense_bytes + 3) / 4;
  auto shard_bytes = [&](int j) {
    return 4 * (BlockOffset(floats, r, j + 1) - BlockOffset(floats, r, j));
  };
  // Inside the host every transfer of a phase runs at once (PeerExchange).
  auto local_phase = [&](const char* what, bool own_shard_out) {
    std::vector<sg4::CommPtr> comms;
    for (int j = 0; j < r; ++j) {
      if (j == local) continue;
      const int peer = node * r + j;
      comms.push_back(Send(*run, rank, peer,
                           Box(absl::StrCat(what, peer, "-", rank)),
                           shard_bytes(own_shard_out ? local : j)));
      comms.push_back(Receive(Box(absl::StrCat(what, rank, "-", peer))));
    }
    for (auto& comm : comms) comm->wait();
  };
  if (r > 1) local_phase("hier-rs-", false);
  std::vector<int> cross;
  for (int m = 0; m < cluster.workers / r; ++m) cross.push_back(m * r + local);
  HalvingDoublingRounds(run, cross, node, shard_bytes(local), "hier-hd-");
  if (r > 1) local_phase("hier-ag-", true);
}

// One rank's part in tree `tree` (0 or 1) for bucket `b`; the two trees of a
// rank meet at the end of every bucket, as one Run of the real code ends
// when both do.
void TreeBucket(Run* run, int rank, int tree, int b) {
  const TreeNode& node = run->trees.nodes[tree][rank];
  auto box = [tree](const char* what, int to, int from) {
    return Box(absl::StrCat("tree", tree, what, to, "-", from));
  };
  // Tree 0 carries the first (count + 1) / 2 floats (tree_allreduce.cc).
  const int64_t bytes = run->wire[b].dense_bytes;
  const int64_t first_half = 4 * ((bytes / 4 + 1) / 2);
  const int64_t half = tree == 0 ? first_half : bytes - first_half;
  // Every receive is posted at once: SimGrid starts a message's latency
  // when both ends have met, and a tail must not wait for this rank.
  // Every tree edge carries data both ways in the one round of the real
  // code, so a half above the eager prefix goes out in two pieces: the
  // prefix at once, the rest once the peer's header (its clear to send,
  // peer_exchange.h) has arrived; the header leaves as the rank enters.
  const int64_t eager = PeerExchange::kDefaultEagerBytes;
  const bool split = half > eager;
  std::vector<int> peers = node.children;
  if (node.parent >= 0) peers.push_back(node.parent);
  std::vector<sg4::CommPtr> flows, child_flows, child_tails, sends, headers;
  for (int peer : peers) {
    sends.push_back(Send(*run, rank, peer, box("-hdr-", peer, rank), 0));
    headers.push_back(Receive(box("-hdr-", rank, peer)));
  }
  auto receive_flow = [&](sg4::Mailbox* in, std::vector<sg4::CommPtr>& to) {
    to.push_back(Receive(in));
    if (split) to.push_back(Receive(in));
  };
  auto send_first = [&](int peer, sg4::Mailbox* out) {
    flows.push_back(Send(*run, rank, peer, out, split ? eager : half));
  };
  std::vector<sg4::CommPtr> from_parent;
  sg4::CommPtr parent_tail;
  if (node.parent >= 0) {
    receive_flow(box("-down-", rank, node.parent), from_parent);
    parent_tail = Receive(box("-down-tail-", rank, node.parent));
  }
  for (int child : node.children) {
    receive_flow(box("-up-", rank, child), child_flows);
    child_tails.push_back(Receive(box("-up-tail-", rank, child)));
    send_first(child, box("-down-", child, rank));
  }
  if (node.parent >= 0) send_first(node.parent, box("-up-", node.parent, rank));
  if (split) {
    for (size_t i = 0; i < peers.size(); ++i) {
      headers[i]->wait();
      const bool up = peers[i] == node.parent;
      flows.push_back(Send(*run, rank, peers[i],
                           up ? box("-up-", peers[i], rank)
                              : box("-down-", peers[i], rank),
                           half - eager));
    }
  } else {
    for (auto& comm : headers) sends.push_back(comm);
  }
  // The reduce: a child's sum is in when its flow and its tail are (the
  // message taken in costs its software time); this rank's own sum then
  // has all its inputs, and its last byte leaves (the tail: one latency,
  // the same hop the flow's bytes pay theirs on).
  for (auto& comm : child_flows) comm->wait();
  for (auto& comm : child_tails) {
    comm->wait();
    PeerMessage(run);
  }
  if (node.parent >= 0) {
    sends.push_back(
        Send(*run, rank, node.parent, box("-up-tail-", node.parent, rank), 0));
    // The broadcast: the parent's result is here when its flow and its
    // tail are.
    for (auto& comm : from_parent) comm->wait();
    parent_tail->wait();
    PeerMessage(run);
  }
  for (int child : node.children) {
    sends.push_back(
        Send(*run, rank, child, box("-down-tail-", child, rank), 0));
  }
  for (auto& comm : flows) comm->wait();
  for (auto& comm : sends) comm->wait();
}

// ring_allgather.h for one bucket: N-1 steps, in each every rank passes one
// encoding (behind its frame header) to its right neighbour, forwarded only
// once it has arrived whole. One flow per rank of its N-1 blobs shares the
// links; a tail of N-1 hops, each leaving a blob's transfer time after the
// last one arrived, carries the store-and-forward order.
void RingAllGatherBucket(Run* run, int rank, int64_t payload_bytes) {
  const int n = run->options.cluster.workers;
  const int right = (rank + 1) % n;
  const int64_t blob = payload_bytes + RingAllGather::kHeaderBytes;
  std::vector<sg4::CommPtr> comms = {
      Send(*run, rank, right, Box(absl::StrCat("ag-", right)), (n - 1) * blob),
      Receive(Box(absl::StrCat("ag-", rank)))};
  sg4::Mailbox* tail_box = Box(absl::StrCat("ag-tail-", right));
  const double blob_s = static_cast<double>(blob) / run->last_hop_rate[right];
  if (rank == 0) {
    sg4::this_actor::sleep_for(blob_s);
    comms.push_back(Send(*run, rank, right, tail_box, 0));
  } else {
    Receive(Box(absl::StrCat("ag-tail-", rank)))->wait();
    if (rank < n - 1) {
      sg4::this_actor::sleep_for(blob_s);
      comms.push_back(Send(*run, rank, right, tail_box, 0));
    }
  }
  for (auto& comm : comms) comm->wait();
  run->ring_barrier->wait();
}

// One all-reduce rank's actor (two per rank where trees run: `part` is the
// tree it carries). A bucket runs when backward has made it and the one
// before is done, under the strategy or the selector's pick for it.
void AllReduceWorker(Run* run, int rank, int part) {
  const int n = run->options.cluster.workers;
  const bool two_parts = !run->tree_barriers.empty();
  for (int b = 0; b < BucketCount(*run); ++b) {
    sg4::this_actor::sleep_until(WorkerReadySeconds(*run, rank, b));
    if (n > 1) {
      const Strategy strategy = run->picks[b];
      // A row-sparse bucket's sizes go round first; every part waits for
      // them, as the real code decides its route from them.
      if (run->wire[b].size_exchange) {
        if (part == 0) RingAllGatherBucket(run, rank, 8);
        if (two_parts) run->tree_barriers[rank]->wait();
      }
      if (run->wire[b].gathered) {
        if (part == 0) {
          RingAllGatherBucket(run, rank, run->wire[b].dense_bytes);
        }
      } else if (strategy == Strategy::kTree) {
        TreeBucket(run, rank, part, b);
      } else if (part == 0) {
        switch (strategy) {
          case Strategy::kRing:
            RingBucket(run, rank, b);
            break;
          case Strategy::kHalvingDoubling:
            HalvingDoublingRounds(run, AllRanks(n), rank,
                                  run->wire[b].dense_bytes, "hd-");
            break;
          case Strategy::kHierarchical:
            HierarchicalBucket(run, rank, b);
            break;
          default:
            break;
        }
      }
    }
    if (two_parts) run->tree_barriers[rank]->wait();
  }
  if (part == 0) Done(run, rank);
}

// How many servers sit inside workers' hosts: all, some, or none.
int ColocatedServers(const ClusterSpec& cluster) {
  return cluster.colocated ? cluster.servers : cluster.colocated_servers;
}

int ServerEndpoint(const ClusterSpec& cluster, int server) {
  const int colocated = ColocatedServers(cluster);
  return server < colocated
             ? server
             : cluster.workers / cluster.worker_group + server - colocated;
}

const std::vector<int64_t>& PsKeys(const Run& run, int bucket, int server) {
  return run.options.ps_keys[bucket][server];
}

// One simulated worker's stream to one server: worker_group workers, each
// pushing the same keys. As the real client (ps/ps_sync.cc) starts a bucket
// as soon as backward has made it, not after the last one's answers, a
// stream pushes every bucket's keys in turn from its ready time and takes
// the answers whenever they come.
void PsStream(Run* run, int worker, int server) {
  const ClusterSpec& cluster = run->options.cluster;
  const int server_endpoint = ServerEndpoint(cluster, server);
  sg4::Mailbox* push_box = Box(absl::StrCat("push-", server, "-", worker));
  sg4::Mailbox* pull_box = Box(absl::StrCat("pull-", worker, "-", server));
  std::vector<sg4::CommPtr> answers;
  for (int b = 0; b < BucketCount(*run); ++b) {
    for (size_t k = 0; k < PsKeys(*run, b, server).size(); ++k) {
      answers.push_back(Receive(pull_box));
    }
  }
  for (int b = 0; b < BucketCount(*run); ++b) {
    sg4::this_actor::sleep_until(WorkerReadySeconds(*run, worker, b));
    // One stream: a key's bytes after the last one's (two in flight would
    // share the link and delay the first key's answers).
    for (int64_t push : run->push_bytes[b][server]) {
      Send(*run, worker, server_endpoint, push_box, cluster.worker_group * push)
          ->wait();
    }
  }
  for (auto& comm : answers) comm->wait();
  Done(run, worker);
}

void PsServer(Run* run, int server) {
  const ClusterSpec& cluster = run->options.cluster;
  const int workers = cluster.workers / cluster.worker_group;
  const int endpoint = ServerEndpoint(cluster, server);
  std::vector<sg4::Mailbox*> push_boxes, pull_boxes;
  for (int w = 0; w < workers; ++w) {
    push_boxes.push_back(Box(absl::StrCat("push-", server, "-", w)));
    pull_boxes.push_back(Box(absl::StrCat("pull-", w, "-", server)));
  }
  std::vector<sg4::CommPtr> answers;
  // Every push of the step is expected at once (each worker's arrive in
  // bucket and key order): SimGrid starts a message's latency when both
  // ends have met, and a push must not wait for the server to get to it.
  std::vector<std::vector<std::vector<sg4::CommPtr>>> pushes(BucketCount(*run));
  for (int b = 0; b < BucketCount(*run); ++b) {
    pushes[b].resize(PsKeys(*run, b, server).size());
    for (auto& key_pushes : pushes[b]) {
      for (int w = 0; w < workers; ++w) {
        key_pushes.push_back(Receive(push_boxes[w]));
      }
    }
  }
  for (int b = 0; b < BucketCount(*run); ++b) {
    const std::vector<int64_t>& answer = run->answer_bytes[b][server];
    for (size_t k = 0; k < answer.size(); ++k) {
      for (auto& comm : pushes[b][k]) comm->wait();
      for (int w = 0; w < workers; ++w) {
        answers.push_back(Send(*run, endpoint, w, pull_boxes[w],
                               cluster.worker_group * answer[k]));
      }
    }
  }
  for (auto& comm : answers) comm->wait();
}

absl::Status Check(const SimulationOptions& options) {
  const ClusterSpec& c = options.cluster;
  if (c.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers=", c.workers, ": give at least 1 worker"));
  }
  if (c.gpus_per_host < 1 || c.workers % c.gpus_per_host != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus_per_host=", c.gpus_per_host,
        " does not divide --workers=", c.workers, " into whole hosts"));
  }
  if (c.gpus_per_host > 1 && !(c.intra_bytes_per_s > 0)) {
    return absl::InvalidArgumentError(
        "--intra_link: several ranks per host need an intra-host rate above 0");
  }
  if (c.intra_latency_s < 0) {
    return absl::InvalidArgumentError(
        "--intra_link: the latency must not be negative");
  }
  if (!(c.oversubscription >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--oversubscription=", c.oversubscription,
        ": a ToR's uplink carries at most what its hosts send; give 1 (one "
        "switch of full bisection) or more"));
  }
  if (c.oversubscription > 1 && c.hosts_per_tor < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hosts_per_tor=", c.hosts_per_tor,
        ": an oversubscribed switch needs at least 1 host per ToR"));
  }
  if (c.worker_group < 1 || c.workers % c.worker_group != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker_group=", c.worker_group,
                     ": give a divisor of --workers=", c.workers));
  }
  if (options.strategy == Strategy::kParameterServer) {
    if (c.servers < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--servers=", c.servers, ": a parameter server needs K >= 1"));
    }
    if (c.colocated && c.servers != c.workers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--placement=colocated puts one server beside each worker: "
          "give --servers=",
          c.workers, " (N), not ", c.servers));
    }
    if (c.colocated_servers < 0 || c.colocated_servers > c.workers ||
        c.colocated_servers > c.servers) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ps_colocated_servers=", c.colocated_servers,
                       ": at most one per worker (", c.workers,
                       ") and at most K (", c.servers, ")"));
    }
    if (ColocatedServers(c) > 0 && c.worker_group != 1) {
      return absl::InvalidArgumentError(
          "--worker_group merges workers for separate servers only; a "
          "colocated server keeps its own worker's share inside its host");
    }
    if (c.worker_group > 1 && (c.worker_group % c.gpus_per_host != 0 ||
                               LargestWorkerGroup(c) % c.worker_group != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--worker_group=", c.worker_group,
                       ": merge whole hosts under one switch, a divisor of ",
                       LargestWorkerGroup(c),
                       " and a multiple of --gpus_per_host=", c.gpus_per_host));
    }
    if (!options.ps_keys.empty() &&
        (options.ps_keys.size() != options.profile.buckets.size() ||
         options.ps_keys[0].size() != static_cast<size_t>(c.servers))) {
      return absl::InvalidArgumentError(
          "the PS plan's buckets or servers do not match the profile's");
    }
  } else if (c.worker_group != 1) {
    return absl::InvalidArgumentError(
        "--worker_group merges a PS's workers; an all-reduce's ranks are "
        "not interchangeable");
  }
  const CompressionMethod method = options.compression.method;
  if ((method == CompressionMethod::kFp16 ||
       method == CompressionMethod::kBf16) &&
      options.strategy != Strategy::kRing &&
      options.strategy != Strategy::kParameterServer) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compression=", options.compression.ToString(),
                     " with --strategy=", StrategyName(options.strategy),
                     ": 16-bit values travel on the ring only "
                     "(allreduce/bucket_reducer.h)"));
  }
  if (options.straggler_rank >= c.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler=", options.straggler_rank, ":",
                     options.straggler_ms, ": rank ", options.straggler_rank,
                     " is not one of the ", c.workers, " workers"));
  }
  if (options.straggler_rank >= 0 &&
      options.strategy == Strategy::kParameterServer && c.worker_group != 1) {
    return absl::InvalidArgumentError(
        "--straggler: a straggling PS worker is not like the others; give "
        "--worker_group=1");
  }
  for (const double cpu_s : {c.message_cpu_s, RingMessageCpuSeconds(c)}) {
    if (cpu_s < 0 || (cpu_s > 0 && c.cpu_cores < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a message's software time (", cpu_s * 1e6,
          " us) needs 0 or more and at least 1 core to run on (", c.cpu_cores,
          ")"));
    }
  }
  if (c.message_wake_s < 0 || (c.message_wake_s > 0 && c.cpu_cores < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a message's wake-up per rank (", c.message_wake_s * 1e6,
        " us) needs 0 or more and at least 1 core (", c.cpu_cores, ")"));
  }
  if (c.ring_step_overhead_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ring's step overhead (", c.ring_step_overhead_s * 1e6,
                     " us) needs 0 or more"));
  }
  if (options.row_sparse.row_width < 0 || options.row_sparse.rows < 0 ||
      (options.row_sparse.row_width > 0) != (options.row_sparse.rows > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--row_sparse=", options.row_sparse.row_width, ":",
        options.row_sparse.rows,
        ": give WIDTH:ROWS, a row of WIDTH floats and ROWS touched rows, both "
        "at least 1"));
  }
  if (options.row_sparse.row_width > 0 && method != CompressionMethod::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--row_sparse with --compression=", options.compression.ToString(),
        ": the real code sends a row-sparse bucket's rows as they are "
        "(--compression=none)"));
  }
  if (!(c.link_bytes_per_s > 0)) {
    return absl::InvalidArgumentError("the link's rate must be above 0");
  }
  if (c.latency_s < 0) {
    return absl::InvalidArgumentError(
        "the link's latency must not be negative");
  }
  if (options.profile.buckets.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the profile ", options.profile.name,
                     " has no buckets to synchronize"));
  }
  if (options.network_model != "CM02" && options.network_model != "LV08") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--network_model=", options.network_model,
        ": CM02 (alpha-beta) or LV08 (SimGrid's TCP corrections)"));
  }
  return absl::OkStatus();
}

// The host link as the α–β model and the selector see it: a rank on
// another host is the NIC's latency plus the intra-host one away.
LinkCost HostLink(const ClusterSpec& cluster) {
  LinkCost link;
  link.alpha_s = cluster.latency_s +
                 (cluster.gpus_per_host > 1 ? cluster.intra_latency_s : 0);
  link.bytes_per_s = cluster.link_bytes_per_s;
  return link;
}

// The cluster as SimGrid's graph (simulation.h's drawing): every endpoint's
// host, with the NIC and ToR each one is behind recorded in `run`.
std::vector<sg4::Host*> BuildPlatform(Run& run) {
  const ClusterSpec& cluster = run.options.cluster;
  const bool ps = run.options.strategy == Strategy::kParameterServer;
  const int g = cluster.gpus_per_host;
  const int worker_endpoints = cluster.workers / cluster.worker_group;
  // A merged PS worker is one endpoint for worker_group / G hosts; otherwise
  // each host holds G rank endpoints.
  const bool merged = cluster.worker_group > 1;
  const int ranks_per_nic = merged ? 1 : g;
  const int copies = merged ? cluster.worker_group / g : 1;
  const int worker_nics = worker_endpoints / ranks_per_nic;
  const int server_nics = ps ? cluster.servers - ColocatedServers(cluster) : 0;
  const bool tors = cluster.oversubscription > 1;

  sg4::NetZone* zone = sg4::create_dijkstra_zone("cluster", true);
  simgrid::kernel::routing::NetPoint* spine = zone->create_router("switch");
  std::vector<simgrid::kernel::routing::NetPoint*> tor_routers;
  auto up = [](sg4::Link* link) {
    return std::vector<sg4::LinkInRoute>{
        sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)};
  };
  auto tor_of_real_host = [&](int real_host) {
    if (!tors) return -1;
    const int t = real_host / cluster.hosts_per_tor;
    while (static_cast<int>(tor_routers.size()) <= t) {
      const int id = static_cast<int>(tor_routers.size());
      tor_routers.push_back(zone->create_router(absl::StrCat("tor", id)));
      // A ToR's ports to its hosts carry hosts_per_tor·B; its uplink that
      // over the ratio. No latency of its own: α stays NIC to NIC.
      sg4::Link* uplink = zone->create_split_duplex_link(
          absl::StrCat("uplink", id), cluster.hosts_per_tor *
                                          cluster.link_bytes_per_s /
                                          cluster.oversubscription);
      zone->add_route(tor_routers[id], spine, nullptr, nullptr, up(uplink),
                      true);
    }
    return t;
  };
  std::vector<sg4::Host*> hosts;
  auto add_host = [&](const std::string& name,
                      simgrid::kernel::routing::NetPoint* to, sg4::Link* link) {
    sg4::Host* host = zone->create_host(name, "1Gf");
    zone->add_route(host->get_netpoint(), to, nullptr, nullptr, up(link), true);
    // Within a host (a colocated server and its worker): a memory copy,
    // next to free beside the links.
    sg4::Link* loopback =
        zone->create_link(name + "-loopback", 1e15)->set_latency(0);
    zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr,
                    nullptr, {sg4::LinkInRoute(loopback)}, false);
    hosts.push_back(host);
  };
  // One NIC: its host's endpoints behind it, `real_hosts` hosts' worth.
  auto add_nic = [&](int nic, int first_real_host, int real_hosts,
                     int endpoints) {
    const int t = tor_of_real_host(first_real_host);
    simgrid::kernel::routing::NetPoint* to = t >= 0 ? tor_routers[t] : spine;
    sg4::Link* link = zone->create_split_duplex_link(
        absl::StrCat("nic", nic), cluster.link_bytes_per_s * real_hosts);
    link->set_latency(cluster.latency_s / 2);
    run.copies.push_back(real_hosts);
    if (endpoints == 1) {
      add_host(absl::StrCat("host", nic), to, link);
    } else {
      simgrid::kernel::routing::NetPoint* fabric =
          zone->create_router(absl::StrCat("host", nic, "-fabric"));
      zone->add_route(fabric, to, nullptr, nullptr, up(link), true);
      for (int e = 0; e < endpoints; ++e) {
        sg4::Link* rank_link = zone->create_split_duplex_link(
            absl::StrCat("host", nic, "-rank", e), cluster.intra_bytes_per_s);
        rank_link->set_latency(cluster.intra_latency_s / 2);
        add_host(absl::StrCat("host", nic, "-rank", e), fabric, rank_link);
      }
    }
    for (int e = 0; e < endpoints; ++e) {
      run.nic_of.push_back(nic);
      run.tor_of.push_back(t);
    }
  };
  for (int nic = 0; nic < worker_nics; ++nic) {
    add_nic(nic, nic * copies, copies, ranks_per_nic);
  }
  for (int s = 0; s < server_nics; ++s) {
    add_nic(worker_nics + s, worker_nics * copies + s, 1, 1);
  }
  if ((cluster.message_cpu_s > 0 || RingMessageCpuSeconds(cluster) > 0) &&
      !ps) {
    run.cpu = zone->create_host("cpu", kCpuFlopsPerSecond)
                  ->set_core_count(cluster.cpu_cores);
  }
  zone->seal();

  run.sent.assign(run.copies.size(), 0);
  run.received.assign(run.copies.size(), 0);
  run.backlog_end.assign(run.copies.size(), 0);
  for (int copies : run.copies) {
    run.tokens_at_backlog_end.push_back(copies * cluster.link_burst_bytes);
  }
  run.uplink_sent.assign(tor_routers.size(), 0);
  run.uplink_received.assign(tor_routers.size(), 0);
  // The ring's last hop into each rank: inside the host or over the NIC.
  run.last_hop_rate.assign(hosts.size(), cluster.link_bytes_per_s);
  for (int e = 0; e < static_cast<int>(hosts.size()) && !ps; ++e) {
    const int left = (e + cluster.workers - 1) % cluster.workers;
    if (g > 1) {
      run.last_hop_rate[e] =
          run.nic_of[left] == run.nic_of[e]
              ? cluster.intra_bytes_per_s
              : std::min(cluster.intra_bytes_per_s, cluster.link_bytes_per_s);
    }
  }
  return hosts;
}

Strategy StrategyOf(AllReduceKind kind) {
  switch (kind) {
    case AllReduceKind::kHalvingDoubling:
      return Strategy::kHalvingDoubling;
    case AllReduceKind::kTree:
      return Strategy::kTree;
    default:
      return Strategy::kRing;
  }
}

}  // namespace

absl::StatusOr<Strategy> ParseStrategy(const std::string& name) {
  for (Strategy s : {Strategy::kRing, Strategy::kHalvingDoubling,
                     Strategy::kTree, Strategy::kHierarchical,
                     Strategy::kSelecting, Strategy::kParameterServer}) {
    if (name == StrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--strategy=", name,
                   ": ring, halving_doubling, tree, hierarchical, allreduce "
                   "(the selector) or ps"));
}

const char* StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kRing:
      return "ring";
    case Strategy::kHalvingDoubling:
      return "halving_doubling";
    case Strategy::kTree:
      return "tree";
    case Strategy::kHierarchical:
      return "hierarchical";
    case Strategy::kSelecting:
      return "allreduce";
    case Strategy::kParameterServer:
      return "ps";
  }
  return "?";
}

int LargestWorkerGroup(const ClusterSpec& cluster) {
  const int g = std::max(1, cluster.gpus_per_host);
  const int hosts = std::max(1, cluster.workers / g);
  if (cluster.oversubscription > 1 && cluster.hosts_per_tor >= 1) {
    return g * std::gcd(hosts, cluster.hosts_per_tor);
  }
  return g * hosts;
}

WireBucket AllReduceWire(const CompressionSpec& compression, int64_t bytes) {
  const int64_t numel = (bytes + 3) / 4;
  EncodedBucket encoded;
  encoded.numel = numel;
  switch (compression.method) {
    case CompressionMethod::kNone:
      return {bytes, false};
    case CompressionMethod::kFp16:
    case CompressionMethod::kBf16:
      return {2 * numel, false};
    case CompressionMethod::kRandomK:
      return {4 * compression.KeptElements(numel), false};
    case CompressionMethod::kTopK: {
      const int64_t k = compression.KeptElements(numel);
      encoded.encoding = Encoding::kSparse;
      encoded.index.resize(k);
      encoded.values.resize(k);
      return {SerializedBytes(encoded), true};
    }
    case CompressionMethod::kOneBit:
      encoded.encoding = Encoding::kOneBit;
      encoded.signs.resize((numel + 63) / 64);
      return {SerializedBytes(encoded), true};
  }
  return {bytes, false};
}

namespace {

// The serialized size of k (index, value) pairs of one key.
int64_t SparseBytes(int64_t numel, int64_t k) {
  EncodedBucket encoded;
  encoded.encoding = Encoding::kSparse;
  encoded.numel = numel;
  encoded.index.resize(k);
  encoded.values.resize(k);
  return SerializedBytes(encoded);
}

}  // namespace

int64_t PsPushBytes(const CompressionSpec& compression, int64_t key_bytes) {
  const int64_t numel = (key_bytes + 3) / 4;
  switch (compression.method) {
    case CompressionMethod::kNone:
      return key_bytes;
    case CompressionMethod::kFp16:
    case CompressionMethod::kBf16:
      return 2 * numel;
    case CompressionMethod::kTopK:
    case CompressionMethod::kRandomK:
      return SparseBytes(numel, compression.KeptElements(numel));
    case CompressionMethod::kOneBit: {
      EncodedBucket encoded;
      encoded.encoding = Encoding::kOneBit;
      encoded.numel = numel;
      encoded.signs.resize((numel + 63) / 64);
      return SerializedBytes(encoded);
    }
  }
  return key_bytes;
}

int64_t PsAnswerBytes(const CompressionSpec& compression, int64_t key_bytes,
                      int workers) {
  const int64_t numel = (key_bytes + 3) / 4;
  switch (compression.method) {
    case CompressionMethod::kNone:
    case CompressionMethod::kOneBit:
      return key_bytes;
    case CompressionMethod::kFp16:
    case CompressionMethod::kBf16:
      return 2 * numel;
    case CompressionMethod::kRandomK:
      // Every worker pushed the same indices: the union is k of them.
      return std::min(key_bytes,
                      SparseBytes(numel, compression.KeptElements(numel)));
    case CompressionMethod::kTopK: {
      // The union's size depends on the gradients; with each worker's top k
      // drawn independently it is numel·(1 - (1 - k/numel)^N) in
      // expectation, which is what is sent (float32 once that is smaller).
      const double kept = static_cast<double>(compression.KeptElements(numel));
      const double union_size =
          numel * (1.0 - std::pow(1.0 - kept / numel, workers));
      return std::min(
          key_bytes,
          SparseBytes(numel, static_cast<int64_t>(std::ceil(union_size))));
    }
  }
  return key_bytes;
}

int64_t RowSparseBytes(int64_t numel, int64_t row_width, int64_t rows) {
  EncodedBucket encoded;
  encoded.encoding = Encoding::kSparse;
  encoded.numel = numel;
  encoded.row_width = static_cast<int32_t>(row_width);
  encoded.index.resize(rows);
  encoded.values.resize(rows * row_width);
  return SerializedBytes(encoded);
}

namespace {

// The rows of `rows.rows` touched in a span of `span_bytes` of a table of
// `bucket_bytes`, and the span's rows.
int64_t TableRows(const RowSparseSpec& rows, int64_t bytes) {
  return std::max<int64_t>(1, bytes / 4 / rows.row_width);
}
int64_t TouchedRows(const RowSparseSpec& rows, int64_t span_bytes,
                    int64_t bucket_bytes) {
  const int64_t table = TableRows(rows, bucket_bytes);
  const int64_t span = TableRows(rows, span_bytes);
  const int64_t touched = std::min(rows.rows, table);
  return std::min(span, (touched * span + table - 1) / table);
}

}  // namespace

WireBucket RowSparseWire(const RowSparseSpec& rows, int64_t bytes,
                         int workers) {
  const int64_t numel = bytes / 4;
  const int64_t blob = RowSparseBytes(
      numel, rows.row_width, std::min(rows.rows, TableRows(rows, bytes)));
  // bucket_reducer.cc: the gather's busiest link carries the N encodings
  // less the smallest (all equal here) against the dense ring's share.
  const double gather_link_bytes = static_cast<double>(workers - 1) * blob;
  const double dense_link_bytes =
      2.0 * (workers - 1) / workers * 4.0 * numel;
  WireBucket wire;
  wire.size_exchange = true;
  wire.gathered = gather_link_bytes < dense_link_bytes;
  wire.dense_bytes = wire.gathered ? blob : bytes;
  return wire;
}

int64_t RowSparsePushBytes(const RowSparseSpec& rows, int64_t key_bytes,
                           int64_t bucket_bytes) {
  return RowSparseBytes(key_bytes / 4, rows.row_width,
                        TouchedRows(rows, key_bytes, bucket_bytes));
}

int64_t RowSparseAnswerBytes(const RowSparseSpec& rows, int64_t key_bytes,
                             int64_t bucket_bytes, int workers) {
  // Each worker's rows drawn independently: the union holds
  // rows·(1 - (1 - t/rows)^N) of the key's rows in expectation.
  const double key_rows = static_cast<double>(TableRows(rows, key_bytes));
  const double touched =
      static_cast<double>(TouchedRows(rows, key_bytes, bucket_bytes));
  const double union_rows =
      key_rows * (1.0 - std::pow(1.0 - touched / key_rows, workers));
  return RowSparseBytes(key_bytes / 4, rows.row_width,
                        static_cast<int64_t>(std::ceil(union_rows - 1e-9)));
}

namespace {

// What bucket `bytes` all-reduces as under the options: rows, or its
// compression's encoding.
WireBucket BucketWire(const SimulationOptions& options, int64_t bytes) {
  if (options.row_sparse.row_width > 0) {
    return RowSparseWire(options.row_sparse, bytes, options.cluster.workers);
  }
  return AllReduceWire(options.compression, bytes);
}

int64_t PushBytes(const SimulationOptions& options, int64_t key_bytes,
                  int64_t bucket_bytes) {
  if (options.row_sparse.row_width > 0) {
    return RowSparsePushBytes(options.row_sparse, key_bytes, bucket_bytes);
  }
  return PsPushBytes(options.compression, key_bytes);
}

int64_t AnswerBytes(const SimulationOptions& options, int64_t key_bytes,
                    int64_t bucket_bytes) {
  if (options.row_sparse.row_width > 0) {
    return RowSparseAnswerBytes(options.row_sparse, key_bytes, bucket_bytes,
                                options.cluster.workers);
  }
  return PsAnswerBytes(options.compression, key_bytes,
                       options.cluster.workers);
}

}  // namespace

Strategy SelectorPick(const SimulationOptions& options, int bucket) {
  return StrategyOf(ChooseAllReduce(
      options.cluster.workers,
      static_cast<double>(
          BucketWire(options, options.profile.buckets[bucket].bytes)
              .dense_bytes),
      CandidateLinks::Uniform(HostLink(options.cluster)),
      static_cast<double>(PeerExchange::kDefaultEagerBytes)));
}

double AlphaBetaBucketSeconds(const SimulationOptions& options, int bucket) {
  const ClusterSpec& cluster = options.cluster;
  const int n = cluster.workers;
  const LinkCost link = HostLink(cluster);
  const int64_t bucket_bytes = options.profile.buckets[bucket].bytes;
  const WireBucket wire = BucketWire(options, bucket_bytes);
  // A row-sparse bucket's sizes go round first (8 bytes a rank).
  const double sizes_seconds =
      options.strategy != Strategy::kParameterServer && wire.size_exchange
          ? RingAllGatherSeconds(n, 8, link)
          : 0;
  if (options.strategy != Strategy::kParameterServer && wire.gathered) {
    return sizes_seconds +
           RingAllGatherSeconds(n, static_cast<double>(wire.dense_bytes), link);
  }
  if (sizes_seconds > 0) {
    SimulationOptions dense = options;
    dense.row_sparse = RowSparseSpec();
    return sizes_seconds + AlphaBetaBucketSeconds(dense, bucket);
  }
  const double bytes = options.strategy == Strategy::kParameterServer
                           ? options.profile.buckets[bucket].bytes
                           : wire.dense_bytes;
  // The family's clear to send, as the simulated rounds wait for it.
  const double eager = static_cast<double>(PeerExchange::kDefaultEagerBytes);
  switch (options.strategy) {
    case Strategy::kRing:
      return RingAllReduceSeconds(n, bytes, link);
    case Strategy::kHalvingDoubling:
      return HalvingDoublingAllReduceSeconds(n, bytes, link, eager);
    case Strategy::kTree:
      return TreeAllReduceSeconds(n, bytes, link, eager);
    case Strategy::kSelecting: {
      const Strategy pick = SelectorPick(options, bucket);
      const AllReduceKind kind = pick == Strategy::kTree ? AllReduceKind::kTree
                                 : pick == Strategy::kHalvingDoubling
                                     ? AllReduceKind::kHalvingDoubling
                                     : AllReduceKind::kRing;
      return PredictAllReduce(
          kind, n, bytes, link,
          static_cast<double>(PeerExchange::kDefaultEagerBytes));
    }
    case Strategy::kHierarchical: {
      // Inside the host each rank's own link; across, the G ranks of a
      // host share its NIC.
      const int g = cluster.gpus_per_host;
      LinkCost intra{cluster.intra_latency_s, cluster.intra_bytes_per_s};
      LinkCost inter{link.alpha_s, link.bytes_per_s / g};
      return HierarchicalAllReduceSeconds(n, g, bytes, intra, inter, eager);
    }
    case Strategy::kParameterServer:
      break;
  }
  // The busiest link sets the time: a worker's carries the bucket each
  // way, a separate server's N shares; a colocated host's the bucket less
  // its own share one way, N-1 shares the other. Pushes and answers overlap
  // key by key, except the answers of a server's last key, which wait for
  // its N pushes (a key's answers leave N times, or N-1 colocated); a
  // stream's keys pay a latency each (simulation.h):
  //   T = 2α + (busiest + N·last key) / B + (most keys on a server - 1)·α.
  // With G ranks per host a worker's NIC carries G buckets (separate
  // servers; the colocated figure stays one rank per host's). Under
  // compression pushes and answers carry their own sizes (PsPushBytes,
  // PsAnswerBytes), each direction its own.
  const int g = cluster.gpus_per_host;
  std::vector<std::vector<int64_t>> keys;
  for (int s = 0; s < cluster.servers; ++s) {
    keys.push_back(options.ps_keys.empty()
                       ? std::vector<int64_t>{Share(static_cast<int64_t>(bytes),
                                                    cluster.servers, s)}
                       : options.ps_keys[bucket][s]);
  }
  double pushed = 0, answered = 0;  // one worker's, the whole bucket
  for (const auto& server_keys : keys) {
    for (int64_t key : server_keys) {
      pushed += PushBytes(options, key, bucket_bytes);
      answered += AnswerBytes(options, key, bucket_bytes);
    }
  }
  double busiest = 0, tail = 0, last_keys = 0;
  size_t most_keys = 1;
  const int colocated_servers = ColocatedServers(cluster);
  for (int s = 0; s < cluster.servers; ++s) {
    const std::vector<int64_t>& server_keys = keys[s];
    const bool inside = s < colocated_servers;
    double share_in = 0, share_out = 0, last_key = 0;
    for (int64_t key : server_keys) {
      share_in += PushBytes(options, key, bucket_bytes);
      share_out += AnswerBytes(options, key, bucket_bytes);
    }
    if (!server_keys.empty()) {
      last_key = AnswerBytes(options, server_keys.back(), bucket_bytes);
    }
    most_keys = std::max(most_keys, server_keys.size());
    busiest = std::max(
        busiest, inside ? std::max({pushed - share_in, answered - share_out,
                                    (n - 1) * share_in, (n - 1) * share_out})
                        : std::max({g * pushed, g * answered, n * share_in,
                                    n * share_out}));
    tail = std::max(tail, (inside ? n - 1 : n) * last_key);
    last_keys += last_key;
  }
  // A NIC of G workers takes G answers of every server's last key after
  // their pushes.
  if (g > 1 && colocated_servers == 0) tail = std::max(tail, g * last_keys);
  return (1.0 + most_keys) * link.alpha_s + (busiest + tail) / link.bytes_per_s;
}

absl::StatusOr<StepResult> SimulateStep(const SimulationOptions& given) {
  const absl::Status valid = Check(given);
  if (!valid.ok()) return valid;
  auto run = std::make_unique<Run>();
  run->options = given;
  const SimulationOptions& options = run->options;
  const ClusterSpec& cluster = options.cluster;
  const bool ps = options.strategy == Strategy::kParameterServer;
  if (ps && run->options.ps_keys.empty()) {
    for (const Bucket& bucket : options.profile.buckets) {
      std::vector<std::vector<int64_t>> keys;
      for (int s = 0; s < cluster.servers; ++s) {
        keys.push_back({Share(bucket.bytes, cluster.servers, s)});
      }
      run->options.ps_keys.push_back(keys);
    }
  }
  const int worker_endpoints = cluster.workers / cluster.worker_group;
  for (const Bucket& bucket : options.profile.buckets) {
    run->wire.push_back(BucketWire(options, bucket.bytes));
  }
  if (ps) {
    run->push_bytes = run->answer_bytes = options.ps_keys;
    for (size_t b = 0; b < options.ps_keys.size(); ++b) {
      const int64_t bucket_bytes = options.profile.buckets[b].bytes;
      for (auto& keys : run->push_bytes[b]) {
        for (int64_t& key : keys) key = PushBytes(options, key, bucket_bytes);
      }
      for (auto& keys : run->answer_bytes[b]) {
        for (int64_t& key : keys) key = AnswerBytes(options, key, bucket_bytes);
      }
    }
  }

  int argc = 2;
  std::string program = "gradsync-simulate",
              quiet = "--log=root.thresh:critical";
  char* argv[] = {program.data(), quiet.data(), nullptr};
  sg4::Engine engine(&argc, argv);
  sg4::Engine::set_config("network/model:" + options.network_model);
  // A transfer's rate is bounded only by the links, not by a TCP window
  // over the route's latency (SimGrid's TCP-gamma), as on a data centre's
  // small bandwidth-delay products.
  sg4::Engine::set_config("network/TCP-gamma", 1e18);
  // Every share recomputed at every event. SimGrid 3.32's default for CM02,
  // the lazy update, lets a flow whose neighbours on a link have finished
  // run past that link's rate: a PS server with more keys than the others
  // took its N pushes faster than its link allows (simulate_test,
  // test_merged_workers_give_the_same_step, catches it).
  sg4::Engine::set_config("network/optim:Full");
  // A colocated PS has one actor per worker and server stream (N² of them):
  // small stacks without guard pages keep them within the kernel's limit
  // on a process's memory mappings. The actors' frames are shallow.
  sg4::Engine::set_config("contexts/stack-size:256");
  sg4::Engine::set_config("contexts/guard-size:0");
  if (options.network_model == "CM02") {
    // Plain max-min sharing: no reverse-direction load for the ACKs (which
    // LV08 models), so an idle network gives the alpha-beta figures.
    sg4::Engine::set_config("network/crosstraffic", false);
  }

  const std::vector<sg4::Host*> hosts = BuildPlatform(*run);
  run->worker_done.assign(worker_endpoints, 0);
  int actors = 0;
  auto spawn = [&](const std::string& name, int endpoint, auto function,
                   auto... args) {
    sg4::Actor::create(name, hosts[endpoint], function, run.get(), args...);
    ++actors;
  };
  if (ps) {
    for (int w = 0; w < worker_endpoints; ++w) {
      for (int s = 0; s < cluster.servers; ++s) {
        spawn(absl::StrCat("worker", w, "-stream", s), w, PsStream, w, s);
      }
    }
    for (int s = 0; s < cluster.servers; ++s) {
      spawn(absl::StrCat("server", s), ServerEndpoint(cluster, s), PsServer, s);
    }
  } else {
    for (int b = 0; b < BucketCount(*run); ++b) {
      run->picks.push_back(options.strategy == Strategy::kSelecting
                               ? SelectorPick(options, b)
                               : options.strategy);
    }
    const auto uses = [&](Strategy s) {
      return std::find(run->picks.begin(), run->picks.end(), s) !=
             run->picks.end();
    };
    const bool gathers =
        std::any_of(run->wire.begin(), run->wire.end(),
                    [](const WireBucket& w) { return w.gathered; });
    if (uses(Strategy::kRing) || gathers) {
      run->ring_barrier = sg4::Barrier::create(cluster.workers);
    }
    const bool trees = uses(Strategy::kTree) && cluster.workers > 1;
    if (trees) run->trees = BuildDoubleBinaryTrees(cluster.workers);
    for (int w = 0; w < cluster.workers; ++w) {
      if (trees) run->tree_barriers.push_back(sg4::Barrier::create(2));
      for (int part = 0; part < (trees ? 2 : 1); ++part) {
        spawn(absl::StrCat("rank", w, "-", part), w, AllReduceWorker, w, part);
      }
    }
  }
  engine.run();

  const StepProfile& profile = options.profile;
  StepResult result;
  const double backward_end_ms = profile.forward_ms + profile.backward_ms;
  // The straggler's compute ends after its sleep either way; with the next
  // forward overlapped its buckets were not delayed (WorkerReadySeconds),
  // so the sleep only bounds the step from below.
  const double slowest_backward_end_ms =
      backward_end_ms +
      (options.straggler_rank >= 0 ? options.straggler_ms : 0);
  const double sync_end_ms =
      1e3 * *std::max_element(run->worker_done.begin(), run->worker_done.end());
  result.compute_ms = backward_end_ms + profile.optimizer_ms;
  result.step_ms =
      std::max(slowest_backward_end_ms, sync_end_ms) + profile.optimizer_ms;
  result.exposed_ms = result.step_ms - result.compute_ms;
  result.sync_ms = sync_end_ms - 1e3 * BucketReadySeconds(profile, 0);
  for (size_t nic = 0; nic < run->copies.size(); ++nic) {
    result.busiest_link_bytes =
        std::max({result.busiest_link_bytes, run->sent[nic] / run->copies[nic],
                  run->received[nic] / run->copies[nic]});
  }
  for (size_t t = 0; t < run->uplink_sent.size(); ++t) {
    result.busiest_uplink_bytes =
        std::max({result.busiest_uplink_bytes, run->uplink_sent[t],
                  run->uplink_received[t]});
  }
  result.messages = run->messages;
  result.actors = actors;
  return result;
}

}  // namespace sim
}  // namespace gradsync
