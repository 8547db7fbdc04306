// gradsync-simulate: one training step of N workers under a strategy,
// simulated on SimGrid (sim/simulation.h), beside its alpha-beta figure.
//
//   gradsync-simulate --strategy=ring --workers=64 --link=25gbit,5us \
//       --profile=sim/profiles/resnet50-b128-fp32.json
//   gradsync-simulate --strategy=ps --workers=64 --servers=64 \
//       --link=100gbit,5us --model=custom:100
//
// Prints one line of JSON (the step, exposed communication, the busiest
// link's bytes, the alpha-beta time of the same buckets synchronized one
// after another from the first one's ready time, and the simulator's own
// run time), or one error line and exit 2 for bad input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/launch/netem.h"
#include "nlohmann/json.hpp"
#include "sim/model_constants.h"
#include "sim/profile.h"
#include "sim/ps_plan.h"
#include "sim/simulation.h"

ABSL_FLAG(std::string, strategy, "ring",
          "ring, halving_doubling, tree (the double binary trees), "
          "hierarchical (R = --gpus_per_host), allreduce (the selector's "
          "pick per bucket) or ps");
ABSL_FLAG(int, workers, 8, "N, the data-parallel workers (ranks)");
ABSL_FLAG(int, gpus_per_host, 1,
          "G ranks on each host (consecutive ranks), sharing its NIC; must "
          "divide --workers");
ABSL_FLAG(std::string, intra_link, "800gbit,1us",
          "with --gpus_per_host above 1: each rank's link inside its host "
          "(NVLink- or PCIe-like), RATE[,LATENCY] rank to rank");
ABSL_FLAG(double, oversubscription, 1,
          "1: one switch of full bisection; above 1: ToR switches of "
          "--hosts_per_tor hosts whose uplink to the spine carries their "
          "hosts' rate over this ratio");
ABSL_FLAG(int, hosts_per_tor, 16,
          "hosts per ToR switch when --oversubscription is above 1 (PS "
          "servers on hosts after the workers', as many per ToR)");
ABSL_FLAG(int, servers, 0, "ps: K servers (default N)");
ABSL_FLAG(std::string, placement, "separate",
          "ps: separate (servers on hosts of their own) or colocated (one on "
          "each worker's host, K = N)");
ABSL_FLAG(int, ps_colocated_servers, -1,
          "ps: BytePS's mixed placement, as gradsync's --ps_colocated_servers: "
          "workers 0..c-1 also serve, beside --servers separate ones (K = c "
          "+ --servers); -1: none (--placement decides)");
ABSL_FLAG(std::string, ps_partition, "equal",
          "ps: the servers' target shares, as --ps_partition: equal (1/K "
          "each) or balanced (ps/client/partitioner.h, BytePS's optimum for "
          "a mix)");
ABSL_FLAG(std::string, link, "25gbit,5us",
          "every host's NIC to its switch: RATE[,LATENCY], as --netem takes "
          "it; the latency is one way, NIC to NIC");
ABSL_FLAG(std::string, profile, "",
          "a step profile (sim/profiles/*.json: per-tensor gradient-ready "
          "times), or a run folder whose trace.json (--trace of gradsync "
          "train/launch or of a PyTorch job behind the hook) gives worker "
          "0's traced steps: its buckets, their ready times, its compute, "
          "each the median over the steps (--bucket_mb unused); or --model");
ABSL_FLAG(std::string, model, "",
          "custom:MB[:TENSORS]: a gradient of that size and no compute");
ABSL_FLAG(double, bucket_mb, 25, "bucket cap in MiB (DDP's default)");
ABSL_FLAG(double, compute_scale, 1,
          "multiplies the profile's forward, backward, optimizer and every "
          "bucket's ready time: another GPU or batch of the same model (a "
          "V100 where the profile is an H100's), the bytes unchanged");
ABSL_FLAG(int, ps_key_kb, 0,
          "ps: the key size in KiB; 0 takes the client's rule "
          "(ps/key_size_rule.h)");
ABSL_FLAG(int, worker_group, 0,
          "ps with separate servers: workers merged per simulated host (the "
          "same times under CM02, fewer activities; sim/simulation.h); 0 "
          "merges the most it may: all N on one switch, one ToR's under a "
          "spine");
ABSL_FLAG(std::string, compression, "none",
          "none, fp16, bf16, topk:R, randomk:R or onebit, as gradsync train "
          "takes it: buckets travel by the sizes core/sync/compression.h "
          "gives (sim/simulation.h says how each strategy moves them)");
ABSL_FLAG(std::string, row_sparse, "",
          "WIDTH:ROWS: every bucket is a row-sparse tensor (an embedding "
          "table) of rows of WIDTH floats, of which each worker touches ROWS "
          "per step; they travel as the real code sends rows "
          "(sim/simulation.h); with --compression=none only");
ABSL_FLAG(std::string, straggler, "",
          "RANK:MS: worker RANK sleeps MS before the step's compute, as "
          "gradsync train --straggler does (the simulated step is one it "
          "sleeps in; see --overlap_next_forward)");
ABSL_FLAG(bool, overlap_next_forward, true,
          "as gradsync train's (default true): the straggler's sleep before "
          "its next forward overlaps this step's communication, and the step "
          "is the longer of the two; false: the sleep delays its buckets and "
          "every other worker waits for them (BSP)");
ABSL_FLAG(std::string, network_model, "CM02",
          "SimGrid's network model: CM02 (alpha-beta sharing) or LV08 (its "
          "TCP corrections)");

ABSL_FLAG(std::string, constants, "none",
          "the transport's model constants (sim/model_constants.h): none "
          "(the links as given: CM02 gives the alpha-beta figures), fitted "
          "(sim/constants.json, fitted on the emulated cluster by "
          "sim/fit_constants.py) or a FILE of that form");

namespace {

using gradsync::sim::StepProfile;

absl::StatusOr<gradsync::sim::ModelConstants> LoadConstants(
    const std::string& which) {
  if (which == "none") return gradsync::sim::ModelConstants();
  if (which == "fitted") {
    return gradsync::sim::ParseModelConstants(
        gradsync::sim::FittedModelConstantsJson(), "sim/constants.json");
  }
  std::ifstream file(which);
  if (!file) {
    return absl::NotFoundError("--constants=" + which +
                               ": none, fitted or a readable FILE");
  }
  std::stringstream text;
  text << file.rdbuf();
  return gradsync::sim::ParseModelConstants(text.str(), which);
}

// RATE[,LATENCY] for a link inside a host: a rate in kbit, mbit, gbit or
// tbit per second and a latency in ns, us, ms or s, one way. Not
// ParseLinkSpec: that one holds a rate to what tc can emulate, and an
// NVLink is well past it.
bool ParseIntraLink(const std::string& text, double* bytes_per_s,
                    double* latency_s) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.empty() || parts.size() > 2) return false;
  auto number_with_unit =
      [](const std::string& word,
         const std::vector<std::pair<std::string, double>>& units,
         double* value) {
        for (const auto& [unit, scale] : units) {
          if (word.size() > unit.size() &&
              word.compare(word.size() - unit.size(), unit.size(), unit) == 0) {
            double number = 0;
            if (!absl::SimpleAtod(word.substr(0, word.size() - unit.size()),
                                  &number)) {
              return false;
            }
            *value = number * scale;
            return true;
          }
        }
        return false;
      };
  double bits = 0;
  if (!number_with_unit(
          parts[0],
          {{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}},
          &bits) ||
      !(bits > 0)) {
    return false;
  }
  *bytes_per_s = bits / 8;
  *latency_s = 0;
  if (parts.size() == 2 &&
      (!number_with_unit(parts[1],
                         {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}},
                         latency_s) ||
       *latency_s < 0)) {
    return false;
  }
  return true;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "gradsync-simulate: %s\n", message.c_str());
  return 2;
}

absl::StatusOr<StepProfile> LoadProfile(int64_t bucket_bytes) {
  const std::string path = absl::GetFlag(FLAGS_profile);
  const std::string model = absl::GetFlag(FLAGS_model);
  if (path.empty() == model.empty()) {
    return absl::InvalidArgumentError(
        "give one of --profile=FILE (sim/profiles/) and --model=custom:MB");
  }
  if (!path.empty() && std::filesystem::is_directory(path)) {
    // A run folder: the buckets as the run cut them (--bucket_mb unused).
    return gradsync::sim::ReadRunProfile(path);
  }
  if (!path.empty()) {
    std::ifstream file(path);
    if (!file) {
      return absl::NotFoundError("cannot read the profile " + path);
    }
    std::stringstream text;
    text << file.rdbuf();
    return gradsync::sim::ParseProfile(text.str(), bucket_bytes, path);
  }
  const std::vector<std::string> parts = absl::StrSplit(model, ':');
  double mb = 0;
  int tensors = 32;
  if (parts.size() < 2 || parts.size() > 3 || parts[0] != "custom" ||
      !absl::SimpleAtod(parts[1], &mb) || !(mb > 0) ||
      (parts.size() == 3 &&
       (!absl::SimpleAtoi(parts[2], &tensors) || tensors < 1))) {
    return absl::InvalidArgumentError(
        "--model=" + model +
        ": give custom:MB[:TENSORS], like custom:100 or custom:2.5:32");
  }
  return gradsync::sim::CustomProfile(std::llround(mb * 1e6), tensors,
                                      bucket_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one training step of N workers under an all-reduce or a parameter "
      "server, simulated on SimGrid");
  absl::ParseCommandLine(argc, argv);
  const auto started = std::chrono::steady_clock::now();

  gradsync::sim::SimulationOptions options;
  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  auto parsed = gradsync::sim::ParseStrategy(strategy);
  if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
  options.strategy = *parsed;
  const bool ps = options.strategy == gradsync::sim::Strategy::kParameterServer;
  const std::string placement = absl::GetFlag(FLAGS_placement);
  if (placement != "separate" && placement != "colocated") {
    return Fail("--placement=" + placement + ": separate or colocated");
  }
  auto link = gradsync::ParseLinkSpec(absl::GetFlag(FLAGS_link));
  if (!link.ok()) {
    return Fail("--link=" + absl::GetFlag(FLAGS_link) + ": " +
                std::string(link.status().message()));
  }
  if (link->rate_bits_per_s <= 0) {
    return Fail("--link=" + absl::GetFlag(FLAGS_link) +
                ": give the link a rate, like 25gbit");
  }
  const double bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  if (!(bucket_mb > 0)) return Fail("--bucket_mb must be above 0");
  auto profile = LoadProfile(static_cast<int64_t>(bucket_mb * (1 << 20)));
  if (!profile.ok()) return Fail(std::string(profile.status().message()));

  const double compute_scale = absl::GetFlag(FLAGS_compute_scale);
  if (!(compute_scale > 0)) {
    return Fail(absl::StrCat("--compute_scale=", compute_scale,
                             ": give a factor above 0"));
  }
  profile->forward_ms *= compute_scale;
  profile->backward_ms *= compute_scale;
  profile->optimizer_ms *= compute_scale;
  for (gradsync::sim::Bucket& bucket : profile->buckets) {
    bucket.ready_ms *= compute_scale;
  }
  options.profile = *profile;
  options.network_model = absl::GetFlag(FLAGS_network_model);
  options.cluster.workers = absl::GetFlag(FLAGS_workers);
  options.cluster.colocated = placement == "colocated";
  if (options.cluster.workers < 1) {
    return Fail("--workers=" + std::to_string(options.cluster.workers) +
                ": give at least 1 worker");
  }
  if (absl::GetFlag(FLAGS_servers) < 0) {
    return Fail("--servers=" + std::to_string(absl::GetFlag(FLAGS_servers)) +
                ": give K >= 1, or 0 for K = N");
  }
  options.cluster.servers =
      !ps ? 0
          : (absl::GetFlag(FLAGS_servers) > 0 ? absl::GetFlag(FLAGS_servers)
                                              : options.cluster.workers);
  const int mixed = absl::GetFlag(FLAGS_ps_colocated_servers);
  if (ps && mixed >= 0) {
    if (options.cluster.colocated) {
      return Fail(
          "--ps_colocated_servers with --placement=colocated: the "
          "mix puts some servers in workers, colocated all of them");
    }
    // As gradsync launch counts them: --servers separate ones beside c.
    options.cluster.colocated_servers = mixed;
    options.cluster.servers = mixed + absl::GetFlag(FLAGS_servers);
  }
  auto policy =
      gradsync::ParsePartitionPolicy(absl::GetFlag(FLAGS_ps_partition));
  if (!policy.ok()) return Fail(std::string(policy.status().message()));
  options.cluster.link_bytes_per_s = link->rate_bits_per_s / 8.0;
  options.cluster.latency_s = absl::ToDoubleSeconds(link->latency);
  options.cluster.gpus_per_host = absl::GetFlag(FLAGS_gpus_per_host);
  if (options.cluster.gpus_per_host < 1 ||
      options.cluster.workers % options.cluster.gpus_per_host != 0) {
    return Fail(
        "--gpus_per_host=" + std::to_string(options.cluster.gpus_per_host) +
        " does not divide --workers=" +
        std::to_string(options.cluster.workers) + " into whole hosts");
  }
  if (!ParseIntraLink(absl::GetFlag(FLAGS_intra_link),
                      &options.cluster.intra_bytes_per_s,
                      &options.cluster.intra_latency_s)) {
    return Fail("--intra_link=" + absl::GetFlag(FLAGS_intra_link) +
                ": give RATE[,LATENCY], like 800gbit,1us");
  }
  options.cluster.oversubscription = absl::GetFlag(FLAGS_oversubscription);
  options.cluster.hosts_per_tor = absl::GetFlag(FLAGS_hosts_per_tor);
  const int worker_group = absl::GetFlag(FLAGS_worker_group);
  if (worker_group < 0) return Fail("--worker_group must be 0 (auto) or more");
  options.cluster.worker_group =
      worker_group > 0 ? worker_group
      : (ps && !options.cluster.colocated &&
         options.cluster.colocated_servers == 0)
          ? gradsync::sim::LargestWorkerGroup(options.cluster)
          : 1;
  gradsync::sim::PsPlan plan;
  if (ps && options.cluster.servers >= 1 &&
      (!options.cluster.colocated ||
       options.cluster.servers == options.cluster.workers) &&
      options.cluster.colocated_servers >= 0 &&
      options.cluster.colocated_servers <=
          std::min(options.cluster.servers, options.cluster.workers)) {
    const int key_kb = absl::GetFlag(FLAGS_ps_key_kb);
    if (key_kb < 0) return Fail("--ps_key_kb must be 0 (auto) or more");
    auto planned = gradsync::sim::PlanParameterServer(
        options.profile, options.cluster.workers, options.cluster.servers,
        options.cluster.colocated ? options.cluster.servers
                                  : options.cluster.colocated_servers,
        int64_t{key_kb} << 10, *policy);
    if (!planned.ok()) return Fail(std::string(planned.status().message()));
    plan = *std::move(planned);
    options.ps_keys = plan.keys;
  }

  auto compression =
      gradsync::CompressionSpec::Parse(absl::GetFlag(FLAGS_compression));
  if (!compression.ok()) {
    return Fail(std::string(compression.status().message()));
  }
  options.compression = *compression;
  const std::string row_sparse = absl::GetFlag(FLAGS_row_sparse);
  if (!row_sparse.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(row_sparse, ':');
    if (parts.size() != 2 ||
        !absl::SimpleAtoi(parts[0], &options.row_sparse.row_width) ||
        !absl::SimpleAtoi(parts[1], &options.row_sparse.rows) ||
        options.row_sparse.row_width < 1 || options.row_sparse.rows < 1) {
      return Fail("--row_sparse=" + row_sparse +
                  ": give WIDTH:ROWS, a row of WIDTH floats and ROWS touched "
                  "rows, both at least 1");
    }
  }
  const std::string straggler = absl::GetFlag(FLAGS_straggler);
  if (!straggler.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(straggler, ':');
    if (parts.size() < 2 || parts.size() > 3 ||
        !absl::SimpleAtoi(parts[0], &options.straggler_rank) ||
        options.straggler_rank < 0 ||
        !absl::SimpleAtod(parts[1], &options.straggler_ms) ||
        !(options.straggler_ms >= 0) ||
        (parts.size() == 3 && parts[2] != "1")) {
      return Fail("--straggler=" + straggler +
                  ": give RANK:MS (one step, in which RANK sleeps MS ms)");
    }
    if (ps && absl::GetFlag(FLAGS_worker_group) == 0) {
      options.cluster.worker_group = 1;  // the straggler is not like the rest
    }
  }
  options.overlap_next_forward = absl::GetFlag(FLAGS_overlap_next_forward);

  // The links as gradsync's transport sees them: the simulation, the
  // selector's pick and the alpha-beta figure all take the same α and B.
  const std::string constants_flag = absl::GetFlag(FLAGS_constants);
  auto constants = LoadConstants(constants_flag);
  if (!constants.ok()) return Fail(std::string(constants.status().message()));
  options.cluster =
      gradsync::sim::ApplyModelConstants(*constants, ps, options.cluster);

  auto result = gradsync::sim::SimulateStep(options);
  if (!result.ok()) return Fail(std::string(result.status().message()));

  double alpha_beta_s = 0;
  nlohmann::ordered_json picks = nlohmann::ordered_json::object();
  for (size_t b = 0; b < options.profile.buckets.size(); ++b) {
    alpha_beta_s +=
        gradsync::sim::AlphaBetaBucketSeconds(options, static_cast<int>(b));
    if (options.strategy == gradsync::sim::Strategy::kSelecting) {
      const char* pick = gradsync::sim::StrategyName(
          gradsync::sim::SelectorPick(options, static_cast<int>(b)));
      picks[pick] = picks.value(pick, 0) + 1;
    }
  }
  nlohmann::ordered_json out = {
      {"strategy", strategy},
      {"workers", options.cluster.workers},
      {"servers", options.cluster.servers},
      {"placement",
       !ps ? "-"
       : options.cluster.colocated_servers > 0
           ? absl::StrCat("mixed:", options.cluster.colocated_servers)
           : placement},
      {"ps_partition", ps ? absl::GetFlag(FLAGS_ps_partition) : "-"},
      {"ps_key_bytes", plan.key_bytes},
      {"ps_imbalance", plan.imbalance},
      {"worker_group", options.cluster.worker_group},
      {"gpus_per_host", options.cluster.gpus_per_host},
      {"link", absl::GetFlag(FLAGS_link)},
      {"intra_link", options.cluster.gpus_per_host > 1
                         ? absl::GetFlag(FLAGS_intra_link)
                         : "-"},
      {"oversubscription", options.cluster.oversubscription},
      {"hosts_per_tor", options.cluster.oversubscription > 1
                            ? options.cluster.hosts_per_tor
                            : 0},
      {"network_model", options.network_model},
      {"constants", constants_flag},
      {"link_bytes_per_s", options.cluster.link_bytes_per_s},
      {"link_alpha_us", 1e6 * options.cluster.latency_s},
      {"straggler", straggler.empty() ? "-" : straggler},
      {"overlap_next_forward", options.overlap_next_forward},
      {"compression", options.compression.ToString()},
      {"row_sparse", row_sparse.empty() ? "-" : row_sparse},
      {"compute_scale", compute_scale},
      {"profile", options.profile.name},
      // A run folder's profile: the median of this many traced steps.
      {"profile_steps", options.profile.traced_steps},
      {"gradient_bytes", options.profile.gradient_bytes},
      {"buckets", options.profile.buckets.size()},
      {"step_ms", result->step_ms},
      {"compute_ms", result->compute_ms},
      {"exposed_ms", result->exposed_ms},
      {"sync_ms", result->sync_ms},
      {"alpha_beta_sync_ms", 1e3 * alpha_beta_s},
      {"busiest_link_bytes", result->busiest_link_bytes},
      {"busiest_uplink_bytes", result->busiest_uplink_bytes},
      {"selector_picks", picks},
      {"messages", result->messages},
      {"actors", result->actors},
      {"simulator_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
           .count()},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
