#include "sim/simulation.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/cost_model.h"
#include "core/sync/link_cost.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "core/base/power_of_two.h"
#include "simgrid/s4u.hpp"

namespace gradsync {
namespace sim {
namespace sg4 = simgrid::s4u;
namespace {

// What every actor of the run shares; SimGrid runs actors one at a time, so
// no lock is needed.
struct Run {
  SimulationOptions options;
  DoubleBinaryTrees trees;          // the tree's shapes
  std::vector<int> copies;          // real hosts each simulated host stands for
  std::vector<int64_t> sent;        // bytes out of each simulated host
  std::vector<int64_t> received;    // bytes into each simulated host
  std::vector<double> worker_done;  // per actor's rank
  sg4::BarrierPtr ring_barrier;     // the ring's bucket ends together
  std::vector<sg4::BarrierPtr> tree_barriers;  // per rank: its two trees
  int64_t messages = 0;
};

int64_t Share(int64_t bytes, int parts, int index) {
  // The real code's split: the first `bytes % parts` parts one byte larger.
  return bytes / parts + (index < bytes % parts ? 1 : 0);
}

// Block b of `blocks` over `count` units, as halving_doubling_allreduce.cc
// cuts its buffer: the first count % blocks one unit larger.
int64_t BlockOffset(int64_t count, int blocks, int b) {
  return b * (count / blocks) + std::min<int64_t>(b, count % blocks);
}

sg4::Mailbox* Box(const std::string& name) {
  return sg4::Mailbox::by_name(name);
}

sg4::CommPtr Send(Run& run, int from_host, int to_host, sg4::Mailbox* box,
                  int64_t bytes) {
  // A colocated server's share of its own worker stays in the host.
  if (from_host != to_host) {
    run.sent[from_host] += bytes;
    run.received[to_host] += bytes;
  }
  ++run.messages;
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

double BucketReadySeconds(const StepProfile& profile, int bucket) {
  return (profile.forward_ms + profile.buckets[bucket].ready_ms) / 1e3;
}

int BucketCount(const Run& run) {
  return static_cast<int>(run.options.profile.buckets.size());
}

void Done(Run* run, int rank) {
  run->worker_done[rank] =
      std::max(run->worker_done[rank], sg4::Engine::get_clock());
}

void RingWorker(Run* run, int rank) {
  const int n = run->options.cluster.workers;
  const int steps = 2 * (n - 1);
  const int right = (rank + 1) % n;
  const std::string stream_box = absl::StrCat("ring-", right);
  const std::string tail_box = absl::StrCat("ring-tail-", right);
  const std::string own_stream_box = absl::StrCat("ring-", rank);
  const std::string own_tail_box = absl::StrCat("ring-tail-", rank);
  const StepProfile& profile = run->options.profile;
  for (int b = 0; b < BucketCount(*run); ++b) {
    sg4::this_actor::sleep_until(BucketReadySeconds(profile, b));
    if (n == 1) continue;
    const int64_t bytes = profile.buckets[b].bytes;
    // Step s sends chunk (rank - s) mod n: its share of the bucket.
    int64_t stream = 0;
    for (int step = 0; step < steps; ++step) {
      stream += Share(bytes, n, ((rank - step) % n + n) % n);
    }
    std::vector<sg4::CommPtr> comms = {
        Send(*run, rank, right, Box(stream_box), stream),
        Receive(Box(own_stream_box))};
    // Tail hop k leaves rank k mod n once hop k - 1 has arrived. The next
    // hop's receive is posted before it is due: SimGrid starts a message's
    // latency when both ends have met.
    sg4::CommPtr tail_in;
    if (rank > 0 && rank <= steps) tail_in = Receive(Box(own_tail_box));
    for (int hop = rank; hop < steps; hop += n) {
      if (hop > 0) tail_in->wait();
      if (hop + n <= steps) tail_in = Receive(Box(own_tail_box));
      comms.push_back(Send(*run, rank, right, Box(tail_box), 0));
    }
    if (rank == steps % n) {
      // The last hop's receiver: the last segment follows the tail.
      tail_in->wait();
      sg4::this_actor::sleep_for(static_cast<double>(Share(bytes, n, 0)) /
                                 run->options.cluster.link_bytes_per_s);
    }
    for (auto& comm : comms) comm->wait();
    run->ring_barrier->wait();
  }
  Done(run, rank);
}

void HalvingDoublingWorker(Run* run, int rank) {
  const int n = run->options.cluster.workers;
  const int p = static_cast<int>(LargestPowerOfTwoAtMost(n));
  const int extra = n - p;
  // Where virtual rank v of the power-of-two core sits
  // (halving_doubling_allreduce.cc).
  auto member = [extra](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  auto exchange = [run, rank](int partner, int64_t bytes, bool receive) {
    std::vector<sg4::CommPtr> comms;
    if (bytes >= 0) {
      comms.push_back(Send(*run, rank, partner,
                           Box(absl::StrCat("hd-", partner, "-", rank)), bytes));
    }
    if (receive) {
      comms.push_back(Receive(Box(absl::StrCat("hd-", rank, "-", partner))));
    }
    for (auto& comm : comms) comm->wait();
  };
  const StepProfile& profile = run->options.profile;
  for (int b = 0; b < BucketCount(*run); ++b) {
    sg4::this_actor::sleep_until(BucketReadySeconds(profile, b));
    if (n == 1) continue;
    const int64_t bytes = profile.buckets[b].bytes;
    if (rank < 2 * extra && rank % 2 == 0) {
      exchange(rank + 1, bytes, false);  // the fold
      exchange(rank + 1, -1, true);      // the result's return
      continue;
    }
    if (rank < 2 * extra) exchange(rank - 1, -1, true);
    const int v = rank < 2 * extra ? rank / 2 : rank - extra;
    int lo = 0, hi = p;
    for (int mask = p / 2; mask >= 1; mask /= 2) {
      const int mid = lo + (hi - lo) / 2;
      const bool lower = (v & mask) == 0;
      const int send_lo = lower ? mid : lo, send_hi = lower ? hi : mid;
      exchange(member(v ^ mask),
               BlockOffset(bytes, p, send_hi) - BlockOffset(bytes, p, send_lo),
               true);
      lo = lower ? lo : mid;
      hi = lower ? mid : hi;
    }
    for (int mask = 1; mask < p; mask *= 2) {
      const int size = hi - lo;
      const bool lower = (v & mask) == 0;
      const int their_lo = lower ? hi : lo - size;
      exchange(member(v ^ mask),
               BlockOffset(bytes, p, hi) - BlockOffset(bytes, p, lo), true);
      lo = std::min(lo, their_lo);
      hi = std::max(hi, their_lo + size);
    }
    if (rank < 2 * extra) exchange(rank - 1, bytes, false);
  }
  Done(run, rank);
}

// One rank's part in tree `tree` (0 or 1); the two trees of a rank meet at
// the end of every bucket, as one Run of the real code ends when both do.
void TreeWorker(Run* run, int rank, int tree) {
  const int n = run->options.cluster.workers;
  const TreeNode& node = run->trees.nodes[tree][rank];
  auto box = [tree](const char* what, int to, int from) {
    return Box(absl::StrCat("tree", tree, what, to, "-", from));
  };
  const StepProfile& profile = run->options.profile;
  for (int b = 0; b < BucketCount(*run); ++b) {
    sg4::this_actor::sleep_until(BucketReadySeconds(profile, b));
    if (n == 1) continue;
    // Tree 0 carries the first (count + 1) / 2 floats (tree_allreduce.cc).
    const int64_t bytes = profile.buckets[b].bytes;
    const int64_t first_half = 4 * ((bytes / 4 + 1) / 2);
    const int64_t half = tree == 0 ? first_half : bytes - first_half;
    // Every receive is posted at once: SimGrid starts a message's latency
    // when both ends have met, and a tail must not wait for this rank.
    std::vector<sg4::CommPtr> flows, child_flows, child_tails, sends;
    sg4::CommPtr from_parent, parent_tail;
    if (node.parent >= 0) {
      flows.push_back(
          Send(*run, rank, node.parent, box("-up-", node.parent, rank), half));
      from_parent = Receive(box("-down-", rank, node.parent));
      parent_tail = Receive(box("-down-tail-", rank, node.parent));
    }
    std::vector<sg4::CommPtr> to_children;
    for (int child : node.children) {
      child_flows.push_back(Receive(box("-up-", rank, child)));
      child_tails.push_back(Receive(box("-up-tail-", rank, child)));
      to_children.push_back(
          Send(*run, rank, child, box("-down-", child, rank), half));
    }
    // The reduce: a child's sum is in when its flow and its tail are; this
    // rank's own sum then has all its inputs, and its last byte leaves (the
    // tail: one latency, the same hop the flow's bytes pay theirs on).
    for (auto& comm : child_flows) comm->wait();
    for (auto& comm : child_tails) comm->wait();
    if (node.parent >= 0) {
      sends.push_back(
          Send(*run, rank, node.parent, box("-up-tail-", node.parent, rank), 0));
      // The broadcast: the parent's result is here when its flow and its
      // tail are.
      from_parent->wait();
      parent_tail->wait();
    }
    for (int child : node.children) {
      sends.push_back(
          Send(*run, rank, child, box("-down-tail-", child, rank), 0));
    }
    for (auto& comm : flows) comm->wait();
    for (auto& comm : to_children) comm->wait();
    for (auto& comm : sends) comm->wait();
    run->tree_barriers[rank]->wait();
  }
  Done(run, rank);
}

int ServerHost(const ClusterSpec& cluster, int server) {
  return cluster.colocated ? server
                           : cluster.workers / cluster.worker_group + server;
}

const std::vector<int64_t>& PsKeys(const Run& run, int bucket, int server) {
  return run.options.ps_keys[bucket][server];
}

// One simulated worker host's stream to one server: worker_group workers,
// each pushing the same keys. As the real client (ps/ps_sync.cc) starts a
// bucket as soon as backward has made it, not after the last one's
// answers, a stream pushes every bucket's keys in turn from its ready time
// and takes the answers whenever they come.
void PsStream(Run* run, int host, int server) {
  const ClusterSpec& cluster = run->options.cluster;
  const StepProfile& profile = run->options.profile;
  const int server_host = ServerHost(cluster, server);
  sg4::Mailbox* push_box = Box(absl::StrCat("push-", server, "-", host));
  sg4::Mailbox* pull_box = Box(absl::StrCat("pull-", host, "-", server));
  std::vector<sg4::CommPtr> answers;
  for (int b = 0; b < BucketCount(*run); ++b) {
    for (size_t k = 0; k < PsKeys(*run, b, server).size(); ++k) {
      answers.push_back(Receive(pull_box));
    }
  }
  for (int b = 0; b < BucketCount(*run); ++b) {
    sg4::this_actor::sleep_until(BucketReadySeconds(profile, b));
    // One stream: a key's bytes after the last one's (two in flight would
    // share the link and delay the first key's answers).
    for (int64_t key : PsKeys(*run, b, server)) {
      Send(*run, host, server_host, push_box, cluster.worker_group * key)
          ->wait();
    }
  }
  for (auto& comm : answers) comm->wait();
  Done(run, host);
}

void PsServer(Run* run, int server) {
  const ClusterSpec& cluster = run->options.cluster;
  const int worker_hosts = cluster.workers / cluster.worker_group;
  const int host = ServerHost(cluster, server);
  std::vector<sg4::Mailbox*> push_boxes, pull_boxes;
  for (int w = 0; w < worker_hosts; ++w) {
    push_boxes.push_back(Box(absl::StrCat("push-", server, "-", w)));
    pull_boxes.push_back(Box(absl::StrCat("pull-", w, "-", server)));
  }
  std::vector<sg4::CommPtr> answers;
  // Every push of the step is expected at once (each host's arrive in
  // bucket and key order): SimGrid starts a message's latency when both
  // ends have met, and a push must not wait for the server to get to it.
  std::vector<std::vector<std::vector<sg4::CommPtr>>> pushes(BucketCount(*run));
  for (int b = 0; b < BucketCount(*run); ++b) {
    pushes[b].resize(PsKeys(*run, b, server).size());
    for (auto& key_pushes : pushes[b]) {
      for (int w = 0; w < worker_hosts; ++w) {
        key_pushes.push_back(Receive(push_boxes[w]));
      }
    }
  }
  for (int b = 0; b < BucketCount(*run); ++b) {
    const std::vector<int64_t>& keys = PsKeys(*run, b, server);
    for (size_t k = 0; k < keys.size(); ++k) {
      const int64_t key = keys[k];
      for (auto& comm : pushes[b][k]) comm->wait();
      for (int w = 0; w < worker_hosts; ++w) {
        answers.push_back(
            Send(*run, host, w, pull_boxes[w], cluster.worker_group * key));
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
          "--placement=colocated puts one server on each worker's host: "
          "give --servers=", c.workers, " (N), not ", c.servers));
    }
    if (c.colocated && c.worker_group != 1) {
      return absl::InvalidArgumentError(
          "--worker_group merges workers for separate servers only; a "
          "colocated server keeps its own worker's share inside its host");
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
  if (!(c.link_bytes_per_s > 0)) {
    return absl::InvalidArgumentError("the link's rate must be above 0");
  }
  if (c.latency_s < 0) {
    return absl::InvalidArgumentError("the link's latency must not be negative");
  }
  if (options.profile.buckets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the profile ", options.profile.name, " has no buckets to synchronize"));
  }
  if (options.network_model != "CM02" && options.network_model != "LV08") {
    return absl::InvalidArgumentError(
        absl::StrCat("--network_model=", options.network_model,
                     ": CM02 (alpha-beta) or LV08 (SimGrid's TCP corrections)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Strategy> ParseStrategy(const std::string& name) {
  for (Strategy s : {Strategy::kRing, Strategy::kHalvingDoubling,
                     Strategy::kTree, Strategy::kParameterServer}) {
    if (name == StrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--strategy=", name, ": ring, halving_doubling, tree or ps"));
}

const char* StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kRing:
      return "ring";
    case Strategy::kHalvingDoubling:
      return "halving_doubling";
    case Strategy::kTree:
      return "tree";
    case Strategy::kParameterServer:
      return "ps";
  }
  return "?";
}

int AutomaticWorkerGroup(int workers, int min_hosts) {
  if (min_hosts <= 1) return std::max(1, workers);
  for (int group = workers / std::max(1, min_hosts); group > 1; --group) {
    if (workers % group == 0) return group;
  }
  return 1;
}

double AlphaBetaBucketSeconds(const SimulationOptions& options, int bucket) {
  const ClusterSpec& cluster = options.cluster;
  const int n = cluster.workers;
  const double bytes = options.profile.buckets[bucket].bytes;
  LinkCost link;
  link.alpha_s = cluster.latency_s;
  link.bytes_per_s = cluster.link_bytes_per_s;
  switch (options.strategy) {
    case Strategy::kRing:
      return RingAllReduceSeconds(n, bytes, link);
    case Strategy::kHalvingDoubling:
      return HalvingDoublingAllReduceSeconds(n, bytes, link);
    case Strategy::kTree:
      return TreeAllReduceSeconds(n, bytes, link);
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
  double busiest = 0, tail = 0;
  size_t most_keys = 1;
  for (int s = 0; s < cluster.servers; ++s) {
    double share = 0, last_key = 0;
    if (options.ps_keys.empty()) {
      share = last_key = Share(bytes, cluster.servers, s);
    } else {
      for (int64_t key : options.ps_keys[bucket][s]) share += key;
      if (!options.ps_keys[bucket][s].empty()) {
        last_key = options.ps_keys[bucket][s].back();
      }
      most_keys = std::max(most_keys, options.ps_keys[bucket][s].size());
    }
    busiest = std::max(busiest, cluster.colocated
                                    ? std::max(bytes - share, (n - 1) * share)
                                    : std::max(bytes, n * share));
    tail = std::max(tail, (cluster.colocated ? n - 1 : n) * last_key);
  }
  return (1.0 + most_keys) * cluster.latency_s +
         (busiest + tail) / cluster.link_bytes_per_s;
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
  const int worker_hosts = cluster.workers / cluster.worker_group;
  const int hosts = worker_hosts + (ps && !cluster.colocated ? cluster.servers : 0);

  int argc = 2;
  std::string program = "gradsync-simulate", quiet = "--log=root.thresh:critical";
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

  sg4::NetZone* zone = sg4::create_star_zone("cluster");
  std::vector<sg4::Host*> host_list;
  run->copies.assign(hosts, 1);
  for (int h = 0; h < hosts; ++h) {
    if (h < worker_hosts) run->copies[h] = cluster.worker_group;
    sg4::Host* host = zone->create_host(absl::StrCat("host", h), "1Gf");
    sg4::Link* link = zone->create_split_duplex_link(
        absl::StrCat("link", h), cluster.link_bytes_per_s * run->copies[h]);
    link->set_latency(cluster.latency_s / 2);
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)},
                    true);
    // Within a host (a colocated server and its worker): a memory copy,
    // next to free beside the link; without this route a star zone would
    // send it out and back over the host's own link.
    sg4::Link* loopback =
        zone->create_link(absl::StrCat("loopback", h), 1e15)->set_latency(0);
    zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr,
                    nullptr, {sg4::LinkInRoute(loopback)}, false);
    host_list.push_back(host);
  }
  zone->seal();

  run->sent.assign(hosts, 0);
  run->received.assign(hosts, 0);
  run->worker_done.assign(worker_hosts, 0);
  int actors = 0;
  auto spawn = [&](const std::string& name, int host, auto function,
                   auto... args) {
    sg4::Actor::create(name, host_list[host], function, run.get(), args...);
    ++actors;
  };
  switch (options.strategy) {
    case Strategy::kRing:
      run->ring_barrier = sg4::Barrier::create(cluster.workers);
      for (int w = 0; w < cluster.workers; ++w) {
        spawn(absl::StrCat("ring", w), w, RingWorker, w);
      }
      break;
    case Strategy::kHalvingDoubling:
      for (int w = 0; w < cluster.workers; ++w) {
        spawn(absl::StrCat("hd", w), w, HalvingDoublingWorker, w);
      }
      break;
    case Strategy::kTree:
      run->trees = BuildDoubleBinaryTrees(cluster.workers);
      for (int w = 0; w < cluster.workers; ++w) {
        run->tree_barriers.push_back(sg4::Barrier::create(2));
        for (int t = 0; t < 2; ++t) {
          spawn(absl::StrCat("tree", t, "-", w), w, TreeWorker, w, t);
        }
      }
      break;
    case Strategy::kParameterServer:
      for (int h = 0; h < worker_hosts; ++h) {
        for (int s = 0; s < cluster.servers; ++s) {
          spawn(absl::StrCat("worker", h, "-stream", s), h, PsStream, h, s);
        }
      }
      for (int s = 0; s < cluster.servers; ++s) {
        spawn(absl::StrCat("server", s), ServerHost(cluster, s), PsServer, s);
      }
      break;
  }
  engine.run();

  const StepProfile& profile = options.profile;
  StepResult result;
  const double backward_end_ms = profile.forward_ms + profile.backward_ms;
  const double sync_end_ms =
      1e3 * *std::max_element(run->worker_done.begin(), run->worker_done.end());
  result.compute_ms = backward_end_ms + profile.optimizer_ms;
  result.step_ms = std::max(backward_end_ms, sync_end_ms) + profile.optimizer_ms;
  result.exposed_ms = result.step_ms - result.compute_ms;
  result.sync_ms = sync_end_ms - 1e3 * BucketReadySeconds(profile, 0);
  for (int h = 0; h < hosts; ++h) {
    result.busiest_link_bytes =
        std::max({result.busiest_link_bytes, run->sent[h] / run->copies[h],
                  run->received[h] / run->copies[h]});
  }
  result.messages = run->messages;
  result.actors = actors;
  return result;
}

}  // namespace sim
}  // namespace gradsync
