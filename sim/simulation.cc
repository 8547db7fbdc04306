#include "sim/simulation.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simgrid/s4u.hpp"

namespace gradsync {
namespace sim {
namespace sg4 = simgrid::s4u;
namespace {

// What every actor of the run shares; SimGrid runs actors one at a time, so
// no lock is needed.
struct Run {
  SimulationOptions options;
  std::vector<int64_t> sent;      // bytes out of each host, per step
  std::vector<int64_t> received;  // bytes into each host
  std::vector<double> worker_done;
  double first_ready_s = 0;
  int64_t messages = 0;
};

int64_t Share(int64_t bytes, int parts, int index) {
  // The real code's split: the first `bytes % parts` parts one byte larger.
  return bytes / parts + (index < bytes % parts ? 1 : 0);
}

sg4::Mailbox* Box(const std::string& kind, int to, int bucket) {
  return sg4::Mailbox::by_name(absl::StrCat(kind, "-", to, "-", bucket));
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
  // refuses a null one.
  static int payload = 0;
  return box->put_async(&payload, std::max<int64_t>(bytes, 1));
}

sg4::CommPtr Receive(sg4::Mailbox* box) {
  void* ignored = nullptr;
  return box->get_async<void>(&ignored);
}

double BucketReadySeconds(const StepProfile& profile, int bucket) {
  return (profile.forward_ms + profile.buckets[bucket].ready_ms) / 1e3;
}

void RingWorker(Run* run, int rank) {
  const int n = run->options.cluster.workers;
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  const StepProfile& profile = run->options.profile;
  for (int b = 0; b < static_cast<int>(profile.buckets.size()); ++b) {
    sg4::this_actor::sleep_until(BucketReadySeconds(profile, b));
    const int64_t bytes = profile.buckets[b].bytes;
    for (int step = 0; step < 2 * (n - 1); ++step) {
      // Step s of the reduce-scatter and the all-gather moves chunk
      // (rank - s) mod n: its size is that chunk's share.
      const int chunk = ((rank - step) % n + n) % n;
      sg4::CommPtr out =
          Send(*run, rank, right, Box(absl::StrCat("ring", step), right, b),
               Share(bytes, n, chunk));
      sg4::CommPtr in = Receive(Box(absl::StrCat("ring", step), rank, b));
      in->wait();
      out->wait();
    }
  }
  run->worker_done[rank] = sg4::Engine::get_clock();
}

int ServerHost(const ClusterSpec& cluster, int server) {
  return cluster.colocated ? server : cluster.workers + server;
}

void PsWorker(Run* run, int rank) {
  const ClusterSpec& cluster = run->options.cluster;
  const StepProfile& profile = run->options.profile;
  for (int b = 0; b < static_cast<int>(profile.buckets.size()); ++b) {
    sg4::this_actor::sleep_until(BucketReadySeconds(profile, b));
    std::vector<sg4::CommPtr> comms;
    for (int s = 0; s < cluster.servers; ++s) {
      comms.push_back(Send(*run, rank, ServerHost(cluster, s),
                           Box("push", s, b),
                           Share(profile.buckets[b].bytes, cluster.servers, s)));
    }
    for (int s = 0; s < cluster.servers; ++s) {
      comms.push_back(Receive(Box(absl::StrCat("pull", s), rank, b)));
    }
    sg4::Comm::wait_all(comms);
  }
  run->worker_done[rank] = sg4::Engine::get_clock();
}

void PsServer(Run* run, int server) {
  const ClusterSpec& cluster = run->options.cluster;
  const StepProfile& profile = run->options.profile;
  const int host = ServerHost(cluster, server);
  for (int b = 0; b < static_cast<int>(profile.buckets.size()); ++b) {
    const int64_t bytes = Share(profile.buckets[b].bytes, cluster.servers, server);
    std::vector<sg4::CommPtr> pushes;
    for (int w = 0; w < cluster.workers; ++w) {
      pushes.push_back(Receive(Box("push", server, b)));
    }
    sg4::Comm::wait_all(pushes);
    std::vector<sg4::CommPtr> answers;
    for (int w = 0; w < cluster.workers; ++w) {
      answers.push_back(Send(*run, host, w,
                             Box(absl::StrCat("pull", server), w, b), bytes));
    }
    sg4::Comm::wait_all(answers);
  }
}

absl::Status Check(const SimulationOptions& options) {
  const ClusterSpec& c = options.cluster;
  if (c.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers=", c.workers, ": give at least 1 worker"));
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

double AlphaBetaBucketSeconds(Strategy strategy, const ClusterSpec& cluster,
                              int64_t bytes) {
  const double n = cluster.workers, b = cluster.link_bytes_per_s,
               a = cluster.latency_s;
  if (strategy == Strategy::kRing) {
    if (cluster.workers == 1) return 0;
    return 2 * (n - 1) * (a + bytes / n / b);
  }
  const double k = cluster.servers, share = bytes / k;
  if (cluster.colocated) {
    // A host pushes N-1 shares out and takes N-1 in, then answers N-1 and
    // takes N-1 answers: (N-1)/N of the bucket each way, twice.
    return 2 * (a + (n - 1) * share / b);
  }
  // Each way, a worker's link carries S and a server's link N shares of
  // S/K: the busier of the two sets the time.
  return 2 * (a + std::max(bytes / b, n * share / b));
}

absl::StatusOr<StepResult> SimulateStep(const SimulationOptions& options) {
  const absl::Status valid = Check(options);
  if (!valid.ok()) return valid;
  const ClusterSpec& cluster = options.cluster;
  const bool ps = options.strategy == Strategy::kParameterServer;
  const int hosts =
      cluster.workers + (ps && !cluster.colocated ? cluster.servers : 0);

  int argc = 2;
  std::string program = "gradsync-simulate", quiet = "--log=root.thresh:critical";
  char* argv[] = {program.data(), quiet.data(), nullptr};
  sg4::Engine engine(&argc, argv);
  sg4::Engine::set_config("network/model:" + options.network_model);
  // A transfer's rate is bounded only by the links, not by a TCP window
  // over the route's latency (SimGrid's TCP-gamma), as on a data centre's
  // small bandwidth-delay products.
  sg4::Engine::set_config("network/TCP-gamma", 1e18);
  if (options.network_model == "CM02") {
    // Plain max-min sharing: no reverse-direction load for the ACKs (which
    // LV08 models), so an idle network gives the alpha-beta figures.
    sg4::Engine::set_config("network/crosstraffic", false);
  }

  sg4::NetZone* zone = sg4::create_star_zone("cluster");
  std::vector<sg4::Host*> host_list;
  for (int h = 0; h < hosts; ++h) {
    sg4::Host* host = zone->create_host(absl::StrCat("host", h), "1Gf");
    sg4::Link* link = zone->create_split_duplex_link(absl::StrCat("link", h),
                                                     cluster.link_bytes_per_s);
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

  auto run = std::make_unique<Run>();
  run->options = options;
  run->sent.assign(hosts, 0);
  run->received.assign(hosts, 0);
  run->worker_done.assign(cluster.workers, 0);
  for (int w = 0; w < cluster.workers; ++w) {
    if (ps) {
      sg4::Actor::create(absl::StrCat("worker", w), host_list[w], PsWorker,
                         run.get(), w);
    } else {
      sg4::Actor::create(absl::StrCat("worker", w), host_list[w], RingWorker,
                         run.get(), w);
    }
  }
  if (ps) {
    for (int s = 0; s < cluster.servers; ++s) {
      sg4::Actor::create(absl::StrCat("server", s),
                         host_list[ServerHost(cluster, s)], PsServer, run.get(),
                         s);
    }
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
    result.busiest_link_bytes = std::max(
        {result.busiest_link_bytes, run->sent[h], run->received[h]});
  }
  result.messages = run->messages;
  return result;
}

}  // namespace sim
}  // namespace gradsync
