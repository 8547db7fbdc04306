// All-reduce benchmark in the style of nccl-tests: gradsync's TCP all-reduce
// family (ring, halving_doubling, tree, hierarchical, and the α–β selector
// `allreduce`) against Gloo's allreduce_ring, allreduce_ring_chunked,
// allreduce_halving_doubling and allreduce_bcube (Gloo's TCP transport), on
// the same N processes, sizes and machine.
//
// Every gradsync all-reduce row also shows its α–β prediction
// (allreduce/algorithms/cost_model.h) from α and B probed on the job's own
// connections before the first size (allreduce/algorithms/peer_link_probe.h),
// or given with --allreduce_alpha_us and --allreduce_link_gbit, and the
// measured time over the prediction.
//
// `gradsync_ps` puts the parameter server on the same map: --sync=ps as a
// training job runs it with colocated servers (--ps_colocate, K = N: every
// rank process also runs one server shard, BytePS's colocated setting),
// through the same GradientSync seam, client, server and tuning rules
// (ps/settings.h) as training. One "all-reduce" of S bytes is one training
// step of a model whose gradient is one S-byte tensor in one bucket: every
// rank pushes its S bytes, split into keys across the N shards as the
// partitioner splits them, and pulls the average back (--ps_update=worker;
// the row is checked against sum / N in float, the servers' arithmetic).
// Each size is a new job (new servers, new registration), so its key size,
// stream windows and messages are the ones the strategy derives for S, N and
// the emulated link; --ps_chunk_kb, --ps_stream_window_kb and --ps_message_kb
// override them as in training. The table and the JSON record them; the
// α–β column is left empty for this row (bench/cost_model.py's
// colocated_ps_time takes N, S, the key size and the largest server share
// from the JSON).
//
// With a --config=cuda build, --algorithms may also name `nccl`: NCCL's
// all-reduce on device buffers (bench/nccl_allreduce.h), ranks sharing the
// GPUs round-robin.
//
// Each rank is its own process (forked before any thread exists), so the
// kernel schedules them as it would a real job; ranks talk over loopback TCP.
// For every algorithm and size: a barrier, --warmup untimed runs, --iters
// timed runs back to back, then a fresh input and one checked run. Inputs are
// small integers, so the sum is exact and every element is checked (#wrong).
// A run under --relay_latency_us sends every gradsync connection (the ring
// transport's, and the PS's gRPC connections between ranks) through
// userspace relays that delay each byte (bench/delay_line.h).
//
//   bazel run //bench:allreduce_benchmark -- --workers=4 --max_bytes=67108864
//
// With --netem=1gbit (root; see tools/netem.h) every rank runs in a network
// namespace of its own with a full-duplex link of that rate, shaped at both
// ends, instead of on loopback: then the link, not the CPU, bounds the
// all-reduce, and the table adds busbw as a fraction of the line rate.
//
// Columns: time is the mean per all-reduce of the slowest rank; algbw =
// bytes / time; busbw = algbw * 2(N-1)/N, the rate each link carries in a ring
// (nccl-tests' definition, comparable across N); GB/s = 10^9 bytes/s.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "allreduce/algorithms/cost_model.h"
#include "allreduce/algorithms/halving_doubling_allreduce.h"
#include "allreduce/algorithms/hierarchical_allreduce.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/algorithms/selecting_allreduce.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "allreduce/allreduce_flags.h"
#include "allreduce/allreduce_table.h"
#include "allreduce/transport/peer_transport.h"
#include "core/base/logging.h"
#include "core/base/malloc_tuning.h"
#include "core/base/status_macros.h"
#include "core/cluster/coordinator.h"
#include "core/device/device.h"
#include "core/launch/launcher.h"
#include "core/launch/netem.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "core/telemetry/process_counters.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "nlohmann/json.hpp"
#include "ps/ps_sync.h"
#include "tools/cluster_flags.h"
#include "tools/ps_flags.h"
#ifdef GRADSYNC_CUDA
#include "bench/nccl_allreduce.h"
#endif
#include "bench/delay_line.h"

ABSL_FLAG(int, workers, 4, "number of ranks (one process each)");
ABSL_FLAG(int64_t, min_bytes, 1024, "smallest all-reduce, in bytes");
ABSL_FLAG(int64_t, max_bytes, int64_t{256} << 20,
          "largest all-reduce, in bytes");
ABSL_FLAG(int, step_factor, 4, "each size is this many times the previous");
ABSL_FLAG(int, iters, 20, "timed all-reduces per size");
ABSL_FLAG(int, warmup, 5, "untimed all-reduces per size before timing");
ABSL_FLAG(std::string, algorithms,
          "gradsync_ring,gradsync_halving_doubling,gradsync_tree,"
          "gloo_ring,gloo_ring_chunked,gloo_halving_doubling",
          "comma-separated: gradsync_ring, gradsync_halving_doubling, "
          "gradsync_tree, gradsync_hierarchical (nodes of "
          "--allreduce_ranks_per_node ranks; 0: one node), gradsync_allreduce "
          "(the α–β selector), gradsync_ps (--sync=ps, one colocated server "
          "per rank), gloo_ring, gloo_ring_chunked, "
          "gloo_halving_doubling, gloo_bcube, nccl (CUDA builds)");
ABSL_FLAG(std::string, json, "",
          "also write the results here, in Google Benchmark's JSON shape");
ABSL_FLAG(
    int, ranks_per_host, 1,
    "with --netem: ranks share an emulated host (namespace and link) this "
    "many at a time, consecutive ranks together");
ABSL_FLAG(double, relay_latency_us, 0,
          "route gradsync's connections (the ring transport's and the "
          "parameter servers') through userspace relays that delay every "
          "byte this long each way (bench/delay_line.h), for kernels without "
          "sch_netem; Gloo's connections are not delayed");
ABSL_FLAG(std::string, netem, "",
          "run every rank in its own network namespace behind an emulated "
          "link, RATE[,LATENCY] like 1gbit or 1gbit,200us (needs root and "
          "iproute2); empty: loopback");

namespace gradsync {
namespace {

constexpr const char* kKnownAlgorithms[] = {"gradsync_ring",
                                            "gradsync_halving_doubling",
                                            "gradsync_tree",
                                            "gradsync_hierarchical",
                                            "gradsync_allreduce",
                                            "gradsync_ps",
                                            "gloo_ring",
                                            "gloo_ring_chunked",
                                            "gloo_halving_doubling",
                                            "gloo_bcube",
                                            "nccl"};

bool IsGloo(const std::string& name) { return absl::StartsWith(name, "gloo_"); }
bool IsGradsync(const std::string& name) {
  return absl::StartsWith(name, "gradsync_");
}
bool IsPs(const std::string& name) { return name == "gradsync_ps"; }
// The rows that run over gradsync's ring transport.
bool UsesRingTransport(const std::string& name) {
  return IsGradsync(name) && !IsPs(name);
}

// --allreduce_ranks_per_node for gradsync_hierarchical; 0: all on one node.
int HierarchicalRanksPerNode(int workers) {
  const int flag = ReadAllReduceFlags().ranks_per_node;
  return flag > 0 ? flag : workers;
}

// The α–β prediction of an algorithm's time, in microseconds, and the α it
// used; 0 when the model has none (bcube, NCCL, the PS: bench/cost_model.py
// has the PS's). Each of the family is predicted with the α the selector
// measured for it (selecting_allreduce.h); Gloo's rows with the probed link.
struct Prediction {
  double micros = 0;
  double alpha_s = 0;
};

// `eager_bytes`: the family's prefix before a clear to send (peer_exchange.h);
// gradsync's halving-doubling and tree wait for them, Gloo's do not.
Prediction PredictedMicros(const std::string& name, int n, int64_t bytes,
                           const LinkCost& probed, const CandidateLinks& links,
                           double eager_bytes) {
  if (probed.alpha_s <= 0 || probed.bytes_per_s <= 0) return {};
  const double size = static_cast<double>(bytes);
  auto predict = [&](AllReduceKind kind, const LinkCost& link,
                     double eager = 0) {
    return Prediction{1e6 * PredictAllReduce(kind, n, size, link, eager),
                      link.alpha_s};
  };
  using Kind = AllReduceKind;
  if (name == "gradsync_ring") {
    return predict(Kind::kRing, links.For(Kind::kRing));
  }
  if (name == "gloo_ring" || name == "gloo_ring_chunked") {
    return predict(Kind::kRing, probed);
  }
  if (name == "gradsync_halving_doubling") {
    return predict(Kind::kHalvingDoubling, links.For(Kind::kHalvingDoubling),
                   eager_bytes);
  }
  if (name == "gloo_halving_doubling") {
    return predict(Kind::kHalvingDoubling, probed);
  }
  if (name == "gradsync_tree") {
    return predict(Kind::kTree, links.For(Kind::kTree), eager_bytes);
  }
  if (name == "gradsync_hierarchical") {
    // Halving-doubling's rounds; across nodes each rank gets its host link's
    // share.
    const LinkCost& link = links.For(Kind::kHalvingDoubling);
    const LinkCost across{
        link.alpha_s,
        link.bytes_per_s / std::max(1, absl::GetFlag(FLAGS_ranks_per_host))};
    return Prediction{
        1e6 * HierarchicalAllReduceSeconds(n, HierarchicalRanksPerNode(n), size,
                                           link, across, eager_bytes),
        link.alpha_s};
  }
  if (name == "gradsync_allreduce") {
    const Kind pick = ChooseAllReduce(n, size, links, eager_bytes);
    return predict(pick, links.For(pick), eager_bytes);
  }
  return {};
}

struct RingSettings {
  int64_t chunk_bytes;
  int socket_buffer_bytes;
};

RingSettings RingSettingsFromFlags() {
  const AllReduceFlagValues flags = ReadAllReduceFlags();
  return RingSettings{flags.chunk_bytes, flags.socket_buffer_bytes};
}

struct Plan {
  int workers = 4;
  int64_t eager_bytes = 0;     // --allreduce_eager_kb, in bytes
  std::vector<int64_t> sizes;  // bytes, multiples of 4
  std::vector<std::string> algorithms;
  int iters = 20;
  int warmup = 5;
  int coordinator_port = 0;
  std::string store_dir;
  absl::Duration timeout;
  // Where rank r listens and is reached: 127.0.0.1, or its address in the
  // emulated network, whose namespace (netns[r]) it enters after fork.
  std::vector<std::string> hosts;
  std::vector<std::string> netns;
  int64_t link_bits_per_s = 0;  // 0: loopback
  // The emulated link's added round trip (netem's where the kernel added it,
  // plus the relays'): the PS's stream-window rule takes it.
  double link_round_trip_s = 0;
  std::string transport = "loopback TCP";
};

// One rank's figures for one (algorithm, size), written by the rank process
// into memory shared with the parent.
struct Cell {
  double time_us;
  double cpu_us;  // user + system time of the rank's process per all-reduce
  // TCP segments retransmitted in the rank's network namespace during the
  // timed runs (all of them, not per all-reduce); -1: unreadable.
  int64_t retrans_segments;
  // Bytes the namespace's link (eth0) received and sent during the timed
  // runs, and how long they took; -1: not an emulated link, or unreadable.
  int64_t link_rx_bytes;
  int64_t link_tx_bytes;
  double timed_s;
  int64_t wrong;
  int done;
  // The link as gradsync's ranks measured it (or the flags gave it).
  double link_alpha_s;
  double link_bytes_per_s;
  // The α–β prediction of this cell, and the α it was made with.
  double predicted_us;
  double predicted_alpha_s;
  // gradsync_ps only: what the strategy derived for this size (or the
  // --ps_* flags gave), from the job's PsSync::SummaryJson.
  int ps_servers;
  int ps_keys;
  int64_t ps_key_bytes;
  int64_t ps_largest_server_bytes;  // the busiest server's keys, in bytes
  int64_t ps_message_bytes;         // the results' messages: the server's block
  int64_t ps_push_message_bytes;
  int64_t ps_push_window_bytes;
  int64_t ps_pull_window_bytes;
  int ps_key_bytes_from_flag;  // 1: --ps_chunk_kb, 0: the rule's
};

Cell& CellAt(Cell* cells, const Plan& plan, int algorithm, int size, int rank) {
  return cells[(algorithm * plan.sizes.size() + size) * plan.workers + rank];
}

// Inputs repeat with this period, so filling and checking 256 MiB stays cheap
// next to the all-reduces being measured.
constexpr int kPeriod = 23;

float InputValue(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % kPeriod - 11);
}

void FillInput(float* data, int64_t count, int rank) {
  float pattern[kPeriod];
  for (int j = 0; j < kPeriod; ++j) pattern[j] = InputValue(rank, j);
  for (int64_t i = 0; i < count; i += kPeriod) {
    const int64_t n = std::min<int64_t>(kPeriod, count - i);
    std::memcpy(data + i, pattern, n * sizeof(float));
  }
}

// What a row leaves in the buffer: the all-reduces the sum, the parameter
// server (--ps_update=worker) the average, sum / N in float as its servers
// compute it (ps/server/bsp_key.cc); both exact functions of the integer sum.
enum class Reduction { kSum, kAverage };

int64_t CountWrong(const float* data, int64_t count, int workers,
                   Reduction reduction) {
  float expected[kPeriod];
  for (int j = 0; j < kPeriod; ++j) {
    int sum = 0;
    for (int r = 0; r < workers; ++r) sum += static_cast<int>(InputValue(r, j));
    expected[j] = static_cast<float>(sum);
    if (reduction == Reduction::kAverage) {
      expected[j] = expected[j] / static_cast<float>(workers);
    }
  }
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; i += kPeriod) {
    const int64_t n = std::min<int64_t>(kPeriod, count - i);
    for (int64_t j = 0; j < n; ++j) wrong += data[i + j] != expected[j];
  }
  return wrong;
}

double ProcessCpuMicros() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 +
         usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
}

// Where an algorithm's buffer lives away from `data` (NCCL: on the GPU), how
// to move the input there and the result back; both empty for host buffers.
struct DeviceCopies {
  std::function<absl::Status()> upload;
  std::function<absl::Status()> download;
};

// Times one algorithm on one size: barrier, warm-up, timed loop, then a checked
// run on fresh input. `run` and `barrier` throw or return an error.
absl::Status Measure(const Plan& plan, int rank, float* data, int64_t count,
                     const std::function<absl::Status()>& run,
                     const std::function<absl::Status()>& barrier, Cell& cell,
                     const DeviceCopies& copies = {},
                     Reduction reduction = Reduction::kSum) {
  FillInput(data, count, rank);
  if (copies.upload) RETURN_IF_ERROR(copies.upload());
  // The warm-up runs after the barrier: whatever lag the barrier leaves
  // between the ranks' starts, the untimed runs take up, and the timed loop
  // starts on each rank where its last warm-up run ended, as back-to-back
  // all-reduces follow each other in training.
  RETURN_IF_ERROR(barrier());
  for (int i = 0; i < plan.warmup; ++i) RETURN_IF_ERROR(run());
  const absl::StatusOr<TcpCounters> tcp_start = ReadNamespaceTcpCounters();
  // The rank's emulated link (loopback has none).
  auto read_link = [&]() -> absl::StatusOr<InterfaceBytes> {
    if (plan.netns.empty()) return absl::UnavailableError("loopback");
    return ReadNamespaceInterfaceBytes(EmulatedNetwork::kNodeInterface);
  };
  const absl::StatusOr<InterfaceBytes> link_start = read_link();
  const double cpu_start = ProcessCpuMicros();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < plan.iters; ++i) RETURN_IF_ERROR(run());
  const auto end = std::chrono::steady_clock::now();
  cell.cpu_us = (ProcessCpuMicros() - cpu_start) / plan.iters;
  const absl::StatusOr<TcpCounters> tcp_end = ReadNamespaceTcpCounters();
  cell.retrans_segments =
      tcp_start.ok() && tcp_end.ok()
          ? tcp_end->retrans_segments - tcp_start->retrans_segments
          : -1;
  cell.timed_s = std::chrono::duration<double>(end - start).count();
  cell.time_us = cell.timed_s * 1e6 / plan.iters;
  const absl::StatusOr<InterfaceBytes> link_end = read_link();
  const bool link_read = link_start.ok() && link_end.ok();
  cell.link_rx_bytes =
      link_read ? link_end->rx_bytes - link_start->rx_bytes : -1;
  cell.link_tx_bytes =
      link_read ? link_end->tx_bytes - link_start->tx_bytes : -1;
  FillInput(data, count, rank);
  if (copies.upload) RETURN_IF_ERROR(copies.upload());
  RETURN_IF_ERROR(barrier());
  RETURN_IF_ERROR(run());
  if (copies.download) RETURN_IF_ERROR(copies.download());
  cell.wrong = CountWrong(data, count, plan.workers, reduction);
  cell.done = 1;
  return absl::OkStatus();
}

// The connections of one gradsync algorithm (`name`): its own transport, with
// its own rendezvous keys, so that no algorithm of the run starts on TCP
// connections another has left behind (a congestion window and slow-start
// threshold cut by another's losses: halving-doubling after the tree's 16 MiB
// row took 397-410 ms instead of 276-280 at N = 8, 1 ms, on one shared
// transport). Sizes of one algorithm share its connections, as the buckets
// of a training job do.
absl::StatusOr<std::unique_ptr<PeerTransport>> ConnectGradsync(
    const Plan& plan, int rank, Rendezvous* coordinator,
    const std::string& name) {
  const RingSettings settings = RingSettingsFromFlags();
  PeerTransportOptions options;
  options.rank = rank;
  options.world_size = plan.workers;
  options.job_id = "allreduce-benchmark";
  options.key_prefix = absl::StrCat("bench-", name);
  options.timeout = plan.timeout;
  options.socket_buffer_bytes = settings.socket_buffer_bytes;
  options.advertise_host = plan.hosts[rank];
  // The ring's neighbours always; the peers the algorithm adds.
  if (name == "gradsync_halving_doubling") {
    options.peers = HalvingDoublingAllReduce::Peers(rank, plan.workers);
  } else if (name == "gradsync_tree") {
    options.peers = TreeAllReduce::Peers(rank, plan.workers);
  } else if (name == "gradsync_hierarchical") {
    options.peers = HierarchicalAllReduce::Peers(
        rank, plan.workers, HierarchicalRanksPerNode(plan.workers));
  } else if (name == "gradsync_allreduce") {
    options.peers = AllReduceEntryOf(AllReduceKind::kSelecting)
                        .peers(rank, plan.workers, AlgorithmOptions());
  }
  return PeerTransport::Create(options, coordinator);
}

std::shared_ptr<gloo::Context> ConnectGloo(const Plan& plan, int rank) {
  gloo::transport::tcp::attr attr;
  attr.hostname = plan.hosts[rank];
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context =
      std::make_shared<gloo::rendezvous::Context>(rank, plan.workers);
  context->setTimeout(
      std::chrono::milliseconds(absl::ToInt64Milliseconds(plan.timeout)));
  gloo::rendezvous::FileStore store(plan.store_dir);
  context->connectFullMesh(store, device);
  return context;
}

// Measures one Gloo algorithm on `count` floats. Gloo reports failures by
// throwing.
absl::Status MeasureGloo(const Plan& plan, int rank, const std::string& name,
                         const std::shared_ptr<gloo::Context>& context,
                         float* data, int64_t count, Cell& cell) {
  try {
    std::vector<float*> pointers = {data};
    // Constructing an algorithm registers its buffers with the peers (and
    // allocates its inboxes); like Gloo's users we do it once per size,
    // outside the timed loop.
    std::unique_ptr<gloo::Algorithm> instance;
    if (name == "gloo_ring") {
      instance.reset(new gloo::AllreduceRing<float>(context, pointers, count));
    } else if (name == "gloo_ring_chunked") {
      instance.reset(
          new gloo::AllreduceRingChunked<float>(context, pointers, count));
    } else if (name == "gloo_bcube") {
      instance.reset(new gloo::AllreduceBcube<float>(context, pointers, count));
    } else {
      instance.reset(
          new gloo::AllreduceHalvingDoubling<float>(context, pointers, count));
    }
    return Measure(
        plan, rank, data, count,
        [&] {
          instance->run();
          return absl::OkStatus();
        },
        [&] {
          gloo::BarrierAllToAll(context).run();
          return absl::OkStatus();
        },
        cell);
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat("Gloo: ", error.what()));
  }
}

// The rendezvous of one gradsync_ps size. Every size is a job of its own
// (new colocated servers, registered anew for that size's keys), so its keys
// ("ps/colocated/<k>") and barriers carry a prefix of their own and never
// meet another size's.
class ScopedRendezvous : public ForwardingRendezvous {
 public:
  ScopedRendezvous(Rendezvous* inner, std::string prefix)
      : ForwardingRendezvous(inner), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    return inner()->Set(prefix_ + key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    return inner()->Get(prefix_ + key, timeout);
  }
  absl::Status Barrier(const std::string& name, BarrierGroup group,
                       absl::Duration timeout) override {
    return inner()->Barrier(prefix_ + name, group, timeout);
  }

 private:
  std::string prefix_;
};

// The options a training job's --sync=ps --ps_colocate takes from the same
// --ps_* flags (their defaults unless given), with the link this benchmark
// emulates in place of the one `gradsync launch --netem` would announce.
absl::StatusOr<PsSyncOptions> PsOptions(const Plan& plan,
                                        const SyncContext& context) {
  ASSIGN_OR_RETURN(PsSyncOptions options, PsSyncOptionsFromFlags(context));
  options.colocate = true;  // K = N (PlanFromFlags refused anything else)
  options.colocated_servers = 0;
  if (plan.link_bits_per_s > 0) {
    options.link.rate_bytes_per_s = plan.link_bits_per_s / 8.0;
    options.link.round_trip_s = plan.link_round_trip_s;
    options.link.description =
        absl::StrCat(absl::GetFlag(FLAGS_netem), " (allreduce_benchmark)");
  }
  return options;
}

// Measures gradsync_ps on `count` floats: one job of N workers with a
// colocated server each, whose model is one tensor of `count` floats in one
// bucket; one run is one training step's BucketReady + Finish, leaving the
// average in `data`.
absl::Status MeasurePs(const Plan& plan, int rank, Rendezvous* rendezvous,
                       Device& device, float* data, int64_t count, Cell& cell) {
  // Outlives the strategy, which listens to it for lost peers.
  ScopedRendezvous scoped(rendezvous,
                          absl::StrCat("bench-ps/", count * 4, "/"));
  SyncContext context;
  context.identity.rank = rank;
  context.identity.world_size = plan.workers;
  context.identity.job_id = absl::StrCat("allreduce-benchmark-ps-", count * 4);
  context.identity.advertise_host = plan.hosts[rank];
  context.rendezvous = &scoped;
  context.timeout = plan.timeout;
  ASSIGN_OR_RETURN(const PsSyncOptions options, PsOptions(plan, context));
  ASSIGN_OR_RETURN(const ParamLayout layout,
                   ParamLayout::Create({ParamSpec{"gradient", {count}}},
                                       /*bucket_bytes=*/0));
  ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> sync,
                   CreatePsSync(context, options));
  // Worker mode never touches the parameters; Setup wants the buffer.
  std::vector<float> params(count, 0.0f);
  RETURN_IF_ERROR(
      sync->Setup(layout, device, SyncBuffers{data, params.data()}));
  int barriers = 0;
  RETURN_IF_ERROR(Measure(
      plan, rank, data, count,
      [&] {
        sync->BucketReady(0);
        StepStats stats;
        return sync->Finish(stats);
      },
      [&] {
        return scoped.Barrier(absl::StrCat("barrier/", barriers++),
                              BarrierGroup::kWorkers, plan.timeout);
      },
      cell, {}, Reduction::kAverage));
  // What this size ran with, as the strategy reports it to a training run's
  // summary.
  const nlohmann::json summary = nlohmann::json::parse(
      sync->SummaryJson(), nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object()) {
    return absl::InternalError("the PS strategy's summary is not JSON");
  }
  cell.ps_servers = summary.value("servers", 0);
  cell.ps_keys = summary.value("keys", 0);
  cell.ps_key_bytes = summary.value("chunk_bytes", int64_t{0});
  cell.ps_key_bytes_from_flag = summary.value("chunk_source", "") == "flag";
  cell.ps_message_bytes = summary.value("pull_message_bytes", int64_t{0});
  cell.ps_push_message_bytes = summary.value("push_message_bytes", int64_t{0});
  cell.ps_push_window_bytes =
      summary.value("push_stream_window_bytes", int64_t{0});
  cell.ps_pull_window_bytes =
      summary.value("pull_stream_window_bytes", int64_t{0});
  cell.ps_largest_server_bytes = 0;
  if (summary.contains("server_key_bytes")) {
    for (const nlohmann::json& bytes : summary["server_key_bytes"]) {
      cell.ps_largest_server_bytes =
          std::max(cell.ps_largest_server_bytes, bytes.get<int64_t>());
    }
  }
  // Tells the servers this worker is done and waits (deadline: --timeout_s)
  // until every worker has told this rank's server, then stops it.
  return sync->Shutdown();
}

// Moves this (single-threaded, just forked) process into the named network
// namespace, as `ip netns exec` would.
absl::Status EnterNamespace(const std::string& name) {
  const std::string path = absl::StrCat("/run/netns/", name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("opening ", path, ": ", std::strerror(errno)));
  }
  const int result = setns(fd, CLONE_NEWNET);
  const int error = errno;
  close(fd);
  if (result != 0) {
    return absl::UnavailableError(absl::StrCat(
        "entering network namespace ", name, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status RunRank(const Plan& plan, int rank, Cell* cells) {
  SetLogTag(absl::StrCat("rank ", rank));
  if (!plan.netns.empty()) RETURN_IF_ERROR(EnterNamespace(plan.netns[rank]));
  const std::string coordinator_address =
      absl::StrCat(plan.hosts[0], ":", plan.coordinator_port);
  std::unique_ptr<CoordinatorServer> server;
  if (rank == 0) {
    ASSIGN_OR_RETURN(server, CoordinatorServer::Start(coordinator_address,
                                                      "allreduce-benchmark",
                                                      plan.workers, 0));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinatorClient> coordinator,
      CoordinatorClient::Connect(coordinator_address, "allreduce-benchmark",
                                 Role::kWorker, rank, plan.timeout));
  const bool want_ring = std::any_of(plan.algorithms.begin(),
                                     plan.algorithms.end(), UsesRingTransport);
  const bool want_ps =
      std::any_of(plan.algorithms.begin(), plan.algorithms.end(), IsPs);
  const bool want_gloo =
      std::any_of(plan.algorithms.begin(), plan.algorithms.end(), IsGloo);
  const bool want_nccl =
      std::count(plan.algorithms.begin(), plan.algorithms.end(), "nccl") > 0;

  // Declared before the transport: its relays must outlive the connections.
  std::unique_ptr<DelayedRendezvous> delayed;
  Rendezvous* rendezvous = coordinator.get();
  const double relay_latency_us = absl::GetFlag(FLAGS_relay_latency_us);
  if (relay_latency_us > 0) {
    delayed = std::make_unique<DelayedRendezvous>(
        coordinator.get(), plan.hosts[rank],
        absl::Microseconds(relay_latency_us));
    rendezvous = delayed.get();
  }
  // Per gradsync algorithm its transport (ConnectGradsync); the selector's
  // probes the link for every row's prediction.
  std::map<std::string, std::unique_ptr<PeerTransport>> transports;
  std::unique_ptr<RingAllReduce> ring;
  std::map<std::string, std::unique_ptr<AllReduceAlgorithm>> family;
  LinkCost link{0, 0};
  CandidateLinks links = CandidateLinks::Uniform(link);
  if (want_ring) {
    const int64_t chunk = RingSettingsFromFlags().chunk_bytes;
    for (const std::string& name :
         {std::string("gradsync_ring"), std::string("gradsync_allreduce")}) {
      ASSIGN_OR_RETURN(transports[name],
                       ConnectGradsync(plan, rank, rendezvous, name));
    }
    for (const std::string& name : plan.algorithms) {
      if (!UsesRingTransport(name) || transports.count(name) > 0) continue;
      ASSIGN_OR_RETURN(transports[name],
                       ConnectGradsync(plan, rank, rendezvous, name));
    }
    ring = std::make_unique<RingAllReduce>(transports["gradsync_ring"].get(),
                                           chunk);
    const LinkCost given = ReadAllReduceFlags().link;
    AlgorithmOptions selector_options;
    selector_options.chunk_bytes = chunk;
    selector_options.link = given;
    ASSIGN_OR_RETURN(
        std::unique_ptr<SelectingAllReduce> selector,
        SelectingAllReduce::Create(transports["gradsync_allreduce"].get(),
                                   selector_options, SelectorCandidates()));
    link = selector->link();
    links = selector->links();
    if (rank == 0) {
      GS_LOG(INFO) << "link for the predictions: alpha " << link.alpha_s * 1e6
                   << " us, B " << link.bytes_per_s / 1e9 << " GB/s ("
                   << (given.alpha_s > 0 && given.bytes_per_s > 0
                           ? "given"
                           : "probed on the job's connections")
                   << ")";
    }
    family["gradsync_allreduce"] = std::move(selector);
    if (transports.count("gradsync_halving_doubling") > 0) {
      family["gradsync_halving_doubling"] =
          std::make_unique<HalvingDoublingAllReduce>(
              transports["gradsync_halving_doubling"].get(), chunk);
    }
    if (transports.count("gradsync_tree") > 0) {
      auto tree = std::make_unique<TreeAllReduce>(
          transports["gradsync_tree"].get(), chunk);
      tree->SetLink(link);  // as --sync=tree sizes its lead: by the link
      family["gradsync_tree"] = std::move(tree);
    }
    const int ranks_per_node = HierarchicalRanksPerNode(plan.workers);
    if (transports.count("gradsync_hierarchical") > 0) {
      RETURN_IF_ERROR(
          HierarchicalAllReduce::Check(plan.workers, ranks_per_node));
      family["gradsync_hierarchical"] = std::make_unique<HierarchicalAllReduce>(
          transports["gradsync_hierarchical"].get(), chunk, ranks_per_node);
    }
    for (auto& [name, algorithm] : family) {
      // peer_exchange.h's clear to send, as --sync= runs it.
      algorithm->SetEagerBytes(plan.eager_bytes);
    }
  }
  std::shared_ptr<gloo::Context> gloo_context;
  if (want_gloo) {
    try {
      gloo_context = ConnectGloo(plan, rank);
    } catch (const std::exception& error) {
      return absl::InternalError(
          absl::StrCat("connecting Gloo's full mesh: ", error.what()));
    }
  }

#ifdef GRADSYNC_CUDA
  std::unique_ptr<NcclAllReduce> nccl;
  if (want_nccl) {
    ASSIGN_OR_RETURN(
        nccl, NcclAllReduce::Create(rank, plan.workers, coordinator.get(),
                                    plan.timeout, plan.sizes.back() / 4));
  }
#else
  if (want_nccl) {
    return absl::FailedPreconditionError(
        "--algorithms=nccl needs a CUDA build: bazel build --config=cuda "
        "//bench:allreduce_benchmark");
  }
#endif

  std::unique_ptr<Device> device;
  if (want_ps) {
    ASSIGN_OR_RETURN(device, CreateDevice(DeviceOptions()));
  }

  std::vector<float> buffer(plan.sizes.back() / 4);
  // The barrier before each timed loop goes through the coordinator, never
  // through the relays, so the ranks start their loops together (within the
  // coordinator's release of the waiting calls). A one-float ring
  // all-reduce, the barrier this used before, releases the ranks one hop
  // after another as the float comes round: under --relay_latency_us the
  // last starts about N - 2 latencies after the first, which waits for it
  // inside its timed loop. The PS rows, Gloo's and NCCL's had no such lag.
  int timing_barriers = 0;
  auto timing_barrier = [&]() {
    return coordinator->Barrier(absl::StrCat("timing/", timing_barriers++),
                                BarrierGroup::kWorkers, plan.timeout);
  };
  // Sizes outside, algorithms inside: the algorithms compared on one size run
  // close together in time, so a burst of other load on the machine skews
  // them alike rather than one whole column.
  for (size_t s = 0; s < plan.sizes.size(); ++s) {
    const int64_t count = plan.sizes[s] / 4;
    for (size_t a = 0; a < plan.algorithms.size(); ++a) {
      const std::string& name = plan.algorithms[a];
      Cell& cell = CellAt(cells, plan, a, s, rank);
      cell.link_alpha_s = link.alpha_s;
      cell.link_bytes_per_s = link.bytes_per_s;
      const Prediction prediction =
          PredictedMicros(name, plan.workers, count * 4, link, links,
                          static_cast<double>(plan.eager_bytes));
      cell.predicted_us = prediction.micros;
      cell.predicted_alpha_s = prediction.alpha_s;
      absl::Status status;
      if (family.count(name) > 0) {
        AllReduceAlgorithm& algorithm = *family[name];
        status = Measure(
            plan, rank, buffer.data(), count,
            [&] { return algorithm.Run(buffer.data(), count, 1.0f, 0); },
            timing_barrier, cell);
      } else if (name == "gradsync_ring") {
        status = Measure(
            plan, rank, buffer.data(), count,
            [&] { return ring->Run(buffer.data(), count); }, timing_barrier,
            cell);
      } else if (IsPs(name)) {
        status = MeasurePs(plan, rank, rendezvous, *device, buffer.data(),
                           count, cell);
      } else if (name == "nccl") {
#ifdef GRADSYNC_CUDA
        status = Measure(
            plan, rank, buffer.data(), count, [&] { return nccl->Run(count); },
            [&] { return nccl->Barrier(); }, cell,
            DeviceCopies{[&] { return nccl->Upload(buffer.data(), count); },
                         [&] { return nccl->Download(buffer.data(), count); }});
#endif
      } else {
        status = MeasureGloo(plan, rank, name, gloo_context, buffer.data(),
                             count, cell);
      }
      RETURN_IF_ERROR(
          Annotate(status, absl::StrCat(name, ", ", plan.sizes[s], " bytes")));
    }
  }
  // Nobody may leave while a peer could still need the coordinator.
  RETURN_IF_ERROR(coordinator->Barrier("benchmark-done", BarrierGroup::kWorkers,
                                       plan.timeout));
  return absl::OkStatus();
}

// Forks one process per rank, waits for all with a deadline, and stops the
// rest as soon as one fails. Returns whether all succeeded.
bool RunRanks(const Plan& plan, Cell* cells) {
  // SIGCHLD stays blocked in the parent so sigtimedwait can wait for it; so
  // do SIGINT and SIGTERM, so that Ctrl-C stops the ranks and still lets
  // main() remove the emulated network.
  sigset_t child_signal;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  sigaddset(&child_signal, SIGINT);
  sigaddset(&child_signal, SIGTERM);
  sigprocmask(SIG_BLOCK, &child_signal, nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < plan.workers; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      GS_LOG(ERROR) << "fork: " << std::strerror(errno);
      for (pid_t other : pids) kill(other, SIGTERM);
      return false;
    }
    if (pid == 0) {
      sigprocmask(SIG_UNBLOCK, &child_signal, nullptr);
      absl::Status status = RunRank(plan, rank, cells);
      if (!status.ok()) {
        GS_LOG(ERROR) << status;
      }
      std::fflush(stdout);
      _exit(status.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  // Every rank already gives up after --timeout_s per wait; this bounds the
  // whole run in case one is stuck somewhere else.
  const absl::Time deadline =
      absl::Now() +
      plan.timeout * (2 + plan.algorithms.size() * plan.sizes.size());
  int running = plan.workers;
  bool ok = true;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --running;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        const int rank =
            std::find(pids.begin(), pids.end(), pid) - pids.begin();
        if (ok) {
          GS_LOG(ERROR) << "rank " << rank << " failed ("
                        << (WIFEXITED(status)
                                ? absl::StrCat("exit code ",
                                               WEXITSTATUS(status))
                                : absl::StrCat("signal ", WTERMSIG(status)))
                        << "); stopping the others";
          for (pid_t other : pids) kill(other, SIGTERM);
        }
        ok = false;
      }
      continue;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      GS_LOG(ERROR)
          << "the benchmark ran past its deadline; stopping the ranks";
      for (pid_t other : pids) kill(other, SIGKILL);
      ok = false;
      while (waitpid(-1, &status, 0) > 0) {
      }
      break;
    }
    timespec wait = absl::ToTimespec(std::min(left, absl::Seconds(1)));
    const int signal = sigtimedwait(&child_signal, nullptr, &wait);
    if ((signal == SIGINT || signal == SIGTERM) && ok) {
      GS_LOG(ERROR) << "interrupted; stopping the ranks";
      for (pid_t other : pids) kill(other, SIGTERM);
      ok = false;
    }
  }
  return ok;
}

struct Row {
  std::string algorithm;
  int64_t bytes;
  double time_us;
  double cpu_us;  // summed over ranks
  double algbw;
  double busbw;
  int64_t wrong;
  double predicted_us;  // 0: no prediction
  // Retransmitted TCP segments over the timed runs, summed over the network
  // namespaces (each counted once); -1: unreadable.
  int64_t retrans_segments;
  // The busiest emulated link's bytes in its busier direction over the timed
  // runs, as a fraction of what the line rate carries in that time (frames
  // as the device counts them); -1: loopback or unreadable.
  double busiest_link;
  Cell rank0;  // rank 0's cell: the link, gradsync_ps's settings
};

std::string MachineDescription() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return absl::StrCat(model, ", ", sysconf(_SC_NPROCESSORS_ONLN), " cores");
}

// What each gradsync_ps size ran with: the inputs of its α–β prediction
// (bench/cost_model.py colocated_ps_time: N, S, the key size, the busiest
// server's share, the server's block: its result messages) and the
// streams' windows and push messages.
void PrintPsSettings(const std::vector<Row>& rows) {
  absl::PrintF(
      "# gradsync_ps settings per size (--sync=ps --ps_colocate "
      "--ps_update=worker; key: --ps_chunk_kb's rule unless (flag)):\n");
  absl::PrintF("# %12s %4s %6s %14s %14s %10s %12s %12s %12s %12s\n",
               "size (B)", "K", "keys", "key (B)", "busiest (B)", "share",
               "push win (B)", "pull win (B)", "push msg (B)", "pull msg (B)");
  for (const Row& row : rows) {
    if (!IsPs(row.algorithm)) continue;
    const Cell& ps = row.rank0;
    absl::PrintF("  %12d %4d %6d %14s %14d %10.3f %12d %12d %12d %12d\n",
                 row.bytes, ps.ps_servers, ps.ps_keys,
                 absl::StrCat(ps.ps_key_bytes,
                              ps.ps_key_bytes_from_flag ? " (flag)" : ""),
                 ps.ps_largest_server_bytes,
                 static_cast<double>(ps.ps_largest_server_bytes) / row.bytes,
                 ps.ps_push_window_bytes, ps.ps_pull_window_bytes,
                 ps.ps_push_message_bytes, ps.ps_message_bytes);
  }
}

void PrintTables(const Plan& plan, const std::vector<Row>& rows) {
  const RingSettings ring = RingSettingsFromFlags();
  absl::PrintF(
      "# all-reduce of float32 (sum, in place), %d processes on one "
      "machine, %s; %s\n",
      plan.workers, plan.transport, MachineDescription());
  if (plan.link_bits_per_s > 0) {
    absl::PrintF(
        "# link: busbw as a fraction of the line rate (%.3f GB/s); TCP's "
        "goodput is at most 95.6%% of it (1448 payload bytes in each "
        "1514-byte frame the shaper counts)\n",
        plan.link_bits_per_s / 8e9);
    absl::PrintF(
        "# busiest: the busiest rank link's frames in its busier direction "
        "over the timed runs, as a fraction of what the line rate carries "
        "in that time (measured on the link, headers and retransmissions "
        "included)\n");
  }
  absl::PrintF(
      "# time: mean per all-reduce of the slowest rank over %d runs "
      "after %d warm-up; algbw = bytes/time; busbw = algbw*2(N-1)/N; "
      "GB/s = 1e9 bytes/s\n",
      plan.iters, plan.warmup);
  absl::PrintF(
      "# cpu: user+system time per all-reduce, summed over the ranks' "
      "processes (on a CPU-bound machine, the cost that matters)\n");
  absl::PrintF(
      "# retx: TCP segments retransmitted during the %d timed runs, over "
      "all the ranks' network namespaces%s\n",
      plan.iters,
      plan.netns.empty() ? " (loopback: the whole host's, other traffic "
                           "included)"
                         : "");
  if (std::any_of(plan.algorithms.begin(), plan.algorithms.end(),
                  UsesRingTransport)) {
    absl::PrintF(
        "# gradsync_ring: --ring_chunk_kb=%d --ring_socket_buffer_kb=%d\n",
        ring.chunk_bytes >> 10, ring.socket_buffer_bytes >> 10);
  }
  for (const std::string& algorithm : plan.algorithms) {
    absl::PrintF("#\n# %s\n", algorithm);
    absl::PrintF("# %12s %12s %6s %12s %12s %12s %8s %14s %12s %8s %8s%s\n",
                 "size (B)", "count", "type", "time (us)", "algbw (GB/s)",
                 "busbw (GB/s)", "#wrong", "cpu (us)", "α–β (us)", "time/α–β",
                 "retx", plan.link_bits_per_s > 0 ? "     link  busiest" : "");
    for (const Row& row : rows) {
      if (row.algorithm != algorithm) continue;
      std::string link;
      if (plan.link_bits_per_s > 0) {
        link = absl::StrFormat(" %7.1f%%",
                               100 * row.busbw * 8e9 / plan.link_bits_per_s);
        absl::StrAppend(
            &link, row.busiest_link < 0
                       ? absl::StrFormat(" %8s", "-")
                       : absl::StrFormat(" %7.1f%%", 100 * row.busiest_link));
      }
      absl::PrintF(
          "  %12d %12d %6s %12.1f %12.3f %12.3f %8d %14.1f %12.1f %8.2f "
          "%8d%s\n",
          row.bytes, row.bytes / 4, "float", row.time_us, row.algbw, row.busbw,
          row.wrong, row.cpu_us, row.predicted_us,
          row.predicted_us > 0 ? row.time_us / row.predicted_us : 0.0,
          row.retrans_segments, link);
    }
    if (IsPs(algorithm)) PrintPsSettings(rows);
  }
  // Side by side, when at least two algorithms ran.
  if (plan.algorithms.size() < 2) return;
  absl::PrintF(
      "#\n# busbw (GB/s) side by side; ratio = gradsync_ring / best Gloo; "
      "fastest = the algorithm with the least time at that size\n");
  std::string header = absl::StrFormat("# %12s", "size (B)");
  for (const std::string& algorithm : plan.algorithms) {
    absl::StrAppend(&header, absl::StrFormat(" %22s", algorithm));
  }
  absl::PrintF("%s %8s  %s\n", header, "ratio", "fastest");
  for (int64_t bytes : plan.sizes) {
    std::string line = absl::StrFormat("  %12d", bytes);
    double ring_busbw = 0;
    double best_gloo = 0;
    double best_busbw = 0;
    std::string fastest;
    for (const std::string& algorithm : plan.algorithms) {
      for (const Row& row : rows) {
        if (row.algorithm != algorithm || row.bytes != bytes) continue;
        absl::StrAppend(&line, absl::StrFormat(" %22.3f", row.busbw));
        if (row.busbw > best_busbw) {
          best_busbw = row.busbw;
          fastest = algorithm;
        }
        if (algorithm == "gradsync_ring") {
          ring_busbw = row.busbw;
        } else if (IsGloo(algorithm)) {
          best_gloo = std::max(best_gloo, row.busbw);
        }
      }
    }
    absl::PrintF("%s %8.2f  %s\n", line,
                 best_gloo > 0 ? ring_busbw / best_gloo : 0.0, fastest);
  }
}

absl::Status WriteJson(const Plan& plan, const std::vector<Row>& rows,
                       const std::string& path) {
  const RingSettings ring = RingSettingsFromFlags();
  // Google Benchmark's JSON layout, so its compare tools read it.
  nlohmann::json benchmarks = nlohmann::json::array();
  // The link the gradsync rows' predictions used (probed on the job's
  // connections, or given); 0 where no all-reduce row ran.
  double link_alpha_us = 0;
  double link_bytes_per_s = 0;
  for (const Row& row : rows) {
    const std::string name = absl::StrCat(row.algorithm, "/", row.bytes);
    benchmarks.push_back({
        {"name", name},
        {"run_name", name},
        {"run_type", "iteration"},
        {"iterations", plan.iters},
        {"real_time", row.time_us},
        {"cpu_time", row.cpu_us / plan.workers},
        {"time_unit", "us"},
        {"bytes", row.bytes},
        {"count", row.bytes / 4},
        {"bytes_per_second", row.algbw * 1e9},
        {"algbw_GBps", row.algbw},
        {"busbw_GBps", row.busbw},
        {"wrong", row.wrong},
        {"predicted_us", row.predicted_us},
        {"predicted_alpha_us", row.rank0.predicted_alpha_s * 1e6},
        {"cpu_us_all_ranks", row.cpu_us},
        {"retrans_segments", row.retrans_segments},
    });
    if (row.busiest_link >= 0) {
      benchmarks.back()["busiest_link_share"] = row.busiest_link;
    }
    if (IsPs(row.algorithm)) {
      // The inputs of bench/cost_model.py's colocated_ps_time.
      const Cell& ps = row.rank0;
      nlohmann::json& entry = benchmarks.back();
      entry["ps_update"] = "worker";
      entry["ps_placement"] = "colocated";
      entry["ps_workers"] = plan.workers;
      entry["ps_servers"] = ps.ps_servers;
      entry["ps_keys"] = ps.ps_keys;
      entry["ps_key_bytes"] = ps.ps_key_bytes;
      entry["ps_key_bytes_source"] =
          ps.ps_key_bytes_from_flag ? "flag" : "auto";
      entry["ps_largest_server_bytes"] = ps.ps_largest_server_bytes;
      entry["ps_largest_share"] =
          static_cast<double>(ps.ps_largest_server_bytes) / row.bytes;
      entry["ps_message_bytes"] = ps.ps_message_bytes;
      entry["ps_push_message_bytes"] = ps.ps_push_message_bytes;
      entry["ps_push_stream_window_bytes"] = ps.ps_push_window_bytes;
      entry["ps_pull_stream_window_bytes"] = ps.ps_pull_window_bytes;
    }
    if (row.rank0.link_alpha_s > 0) {
      link_alpha_us = row.rank0.link_alpha_s * 1e6;
      link_bytes_per_s = row.rank0.link_bytes_per_s;
    }
  }
  const nlohmann::json document = {
      {"context",
       {{"executable", "allreduce_benchmark"},
        {"date", absl::FormatTime(absl::RFC3339_sec, absl::Now(),
                                  absl::LocalTimeZone())},
        {"machine", MachineDescription()},
        {"workers", plan.workers},
        {"iters", plan.iters},
        {"warmup", plan.warmup},
        // What the timed loop follows on every rank (Measure): readers of
        // older files, whose warm-up came before a one-float ring barrier,
        // find no such key.
        {"timed_after", "coordinator barrier, then warm-up"},
        {"ring_chunk_kb", ring.chunk_bytes >> 10},
        {"ring_socket_buffer_kb", ring.socket_buffer_bytes >> 10},
        {"allreduce_eager_kb", plan.eager_bytes >> 10},
        {"transport", plan.transport},
        {"link_bits_per_s", plan.link_bits_per_s},
        {"link_round_trip_us", plan.link_round_trip_s * 1e6},
        {"relay_latency_us", absl::GetFlag(FLAGS_relay_latency_us)},
        {"prediction_link_alpha_us", link_alpha_us},
        {"prediction_link_bytes_per_s", link_bytes_per_s}}},
      {"benchmarks", benchmarks},
  };
  const std::string json =
      document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  std::ofstream out(path);
  out << json;
  if (!out.good()) {
    return absl::UnavailableError(absl::StrCat("writing ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> PlanFromFlags() {
  Plan plan;
  plan.workers = absl::GetFlag(FLAGS_workers);
  plan.iters = absl::GetFlag(FLAGS_iters);
  plan.warmup = absl::GetFlag(FLAGS_warmup);
  // --timeout_s is gradsync's own (tools/cluster_flags): one definition.
  ASSIGN_OR_RETURN(plan.timeout, PeerTimeoutFromFlags());
  if (plan.workers < 2 || plan.iters < 1 || plan.warmup < 0) {
    return absl::InvalidArgumentError(
        "--workers must be >= 2, --iters >= 1, --warmup >= 0");
  }
  const int eager_kb = ReadAllReduceFlags().eager_kb;
  if (eager_kb < 0) {
    return absl::InvalidArgumentError(
        "--allreduce_eager_kb must be >= 0 (0: sends never wait for a clear "
        "to send)");
  }
  plan.eager_bytes = int64_t{eager_kb} << 10;
  const int64_t min_bytes = absl::GetFlag(FLAGS_min_bytes);
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  const int factor = absl::GetFlag(FLAGS_step_factor);
  if (min_bytes < 4 || max_bytes < min_bytes || factor < 2) {
    return absl::InvalidArgumentError(
        "need 4 <= --min_bytes <= --max_bytes and --step_factor >= 2");
  }
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    plan.sizes.push_back(bytes / 4 * 4);
  }
  // Gloo counts elements in an int.
  if (plan.sizes.back() / 4 > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("--max_bytes is too large for Gloo");
  }
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_algorithms),
                                               ',', absl::SkipEmpty())) {
    if (std::find(std::begin(kKnownAlgorithms), std::end(kKnownAlgorithms),
                  name) == std::end(kKnownAlgorithms)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown algorithm '", name,
          "' in --algorithms; known: ", absl::StrJoin(kKnownAlgorithms, ",")));
    }
    plan.algorithms.emplace_back(name);
  }
  if (plan.algorithms.empty()) {
    return absl::InvalidArgumentError("--algorithms is empty");
  }
  if (std::any_of(plan.algorithms.begin(), plan.algorithms.end(), IsPs)) {
    // The row checks the average the servers return and always puts one
    // server in every rank.
    ASSIGN_OR_RETURN(const ps::UpdateMode update, UpdateModeFromFlags());
    if (update != ps::UPDATE_WORKER) {
      return absl::InvalidArgumentError(
          "gradsync_ps measures --ps_update=worker (the servers return the "
          "averaged gradient, like an all-reduce); drop --ps_update=server");
    }
    ASSIGN_OR_RETURN(const int colocated,
                     ColocatedServersFromFlags(plan.workers));
    if (colocated != 0 && colocated != plan.workers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradsync_ps runs one colocated server in every rank (K = N = ",
          plan.workers, "); drop --ps_colocated_servers=", colocated));
    }
  }
  ASSIGN_OR_RETURN(plan.coordinator_port, PickFreePort());
  char store_template[] = "/tmp/gradsync-allreduce-benchmark-XXXXXX";
  if (mkdtemp(store_template) == nullptr) {
    return absl::InternalError(
        absl::StrCat("mkdtemp for Gloo's file store: ", std::strerror(errno)));
  }
  plan.store_dir = store_template;
  plan.hosts.assign(plan.workers, "127.0.0.1");
  return plan;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "All-reduce benchmark (nccl-tests style): gradsync's TCP ring against "
      "Gloo's ring, ring_chunked and halving_doubling, one process per rank.");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Plan> plan = PlanFromFlags();
  if (!plan.ok()) {
    GS_LOG(ERROR) << plan.status();
    return 2;
  }
  const size_t cell_count =
      plan->algorithms.size() * plan->sizes.size() * plan->workers;
  const size_t shared_bytes = cell_count * sizeof(Cell);
  void* shared = mmap(nullptr, shared_bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    GS_LOG(ERROR) << "mmap: " << std::strerror(errno);
    return 1;
  }
  Cell* cells = static_cast<Cell*>(shared);
  std::fill(cells, cells + cell_count, Cell{});

  // Removed by its destructor on every way out of Main (Ctrl-C included:
  // RunRanks turns it into stopping the ranks).
  std::unique_ptr<EmulatedNetwork> network;
  const int ranks_per_host = std::max(1, absl::GetFlag(FLAGS_ranks_per_host));
  if (!absl::GetFlag(FLAGS_netem).empty()) {
    absl::StatusOr<LinkSpec> link = ParseLinkSpec(absl::GetFlag(FLAGS_netem));
    absl::Status usable =
        link.ok() ? CheckEmulationPrerequisites() : link.status();
    absl::StatusOr<std::unique_ptr<EmulatedNetwork>> created;
    if (usable.ok()) {
      EmulatedNetworkOptions options;
      options.nodes = (plan->workers + ranks_per_host - 1) / ranks_per_host;
      options.link = *link;
      created = EmulatedNetwork::Create(options);
      usable = created.status();
    }
    if (!usable.ok()) {
      GS_LOG(ERROR) << "--netem=" << absl::GetFlag(FLAGS_netem) << ": "
                    << usable;
      return 2;
    }
    network = *std::move(created);
    GS_LOG(INFO) << "emulated network: " << network->Describe();
    for (int rank = 0; rank < plan->workers; ++rank) {
      plan->hosts[rank] = network->NodeAddress(rank / ranks_per_host);
      plan->netns.push_back(network->NodeNamespace(rank / ranks_per_host));
    }
    plan->link_bits_per_s = link->rate_bits_per_s;
    if (network->latency_emulated()) {
      plan->link_round_trip_s = 2 * absl::ToDoubleSeconds(link->latency);
    }
    plan->transport = absl::StrCat(
        "TCP over emulated ", link->text, " links (",
        ranks_per_host == 1
            ? std::string("one network namespace per rank")
            : absl::StrCat(ranks_per_host, " ranks per namespace and link"),
        ")");
  }

  if (absl::GetFlag(FLAGS_relay_latency_us) > 0) {
    plan->link_round_trip_s += 2e-6 * absl::GetFlag(FLAGS_relay_latency_us);
    absl::StrAppend(&plan->transport, ", gradsync's connections through ",
                    absl::GetFlag(FLAGS_relay_latency_us),
                    " us userspace delay relays (Gloo's not)");
  }
  const bool ok = RunRanks(*plan, cells);
  if (network != nullptr) {
    absl::Status removed = network->Destroy();
    if (!removed.ok()) {
      GS_LOG(ERROR) << removed;
    }
  }
  // Gloo's file store leaves one file per rank.
  std::error_code ignored;
  std::filesystem::remove_all(plan->store_dir, ignored);

  std::vector<Row> rows;
  const double bus_factor = 2.0 * (plan->workers - 1) / plan->workers;
  for (size_t a = 0; a < plan->algorithms.size(); ++a) {
    for (size_t s = 0; s < plan->sizes.size(); ++s) {
      Row row{plan->algorithms[a], plan->sizes[s], 0, 0, 0, 0, 0, 0, 0, -1};
      bool complete = true;
      for (int rank = 0; rank < plan->workers; ++rank) {
        const Cell& cell = CellAt(cells, *plan, a, s, rank);
        complete = complete && cell.done;
        row.time_us = std::max(row.time_us, cell.time_us);
        row.cpu_us += cell.cpu_us;
        row.wrong += cell.wrong;
        // The first rank of each namespace reads for all of it (loopback:
        // rank 0 for the whole host).
        const bool first_in_namespace =
            plan->netns.empty()
                ? rank == 0
                : std::find(plan->netns.begin(), plan->netns.end(),
                            plan->netns[rank]) -
                          plan->netns.begin() ==
                      rank;
        if (first_in_namespace && cell.link_rx_bytes >= 0 && cell.timed_s > 0 &&
            plan->link_bits_per_s > 0) {
          const double line_bytes = cell.timed_s * plan->link_bits_per_s / 8;
          row.busiest_link = std::max(
              row.busiest_link,
              std::max(cell.link_rx_bytes, cell.link_tx_bytes) / line_bytes);
        }
        if (!first_in_namespace || row.retrans_segments < 0) continue;
        row.retrans_segments =
            cell.retrans_segments < 0
                ? -1
                : row.retrans_segments + cell.retrans_segments;
      }
      if (!complete) continue;
      const Cell& first = CellAt(cells, *plan, a, s, 0);
      row.rank0 = first;
      row.predicted_us = first.predicted_us;
      row.algbw = row.bytes / (row.time_us * 1e-6) / 1e9;
      row.busbw = row.algbw * bus_factor;
      rows.push_back(row);
    }
  }
  PrintTables(*plan, rows);
  if (!absl::GetFlag(FLAGS_json).empty()) {
    absl::Status written = WriteJson(*plan, rows, absl::GetFlag(FLAGS_json));
    if (!written.ok()) {
      GS_LOG(ERROR) << written;
      return 1;
    }
  }
  int64_t wrong = 0;
  for (const Row& row : rows) wrong += row.wrong;
  if (wrong > 0) {
    GS_LOG(ERROR) << wrong << " wrong elements in total";
  }
  return ok && wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  gradsync::KeepFreedMemoryForReuse();
  return gradsync::Main(argc, argv);
}
