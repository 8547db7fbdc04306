// gradsync predict: the α–β cost model (allreduce/algorithms/cost_model.h,
// ps/cost_model.h) as a filter, so that Python (bench/cost_model.py) asks the
// one copy of the formulas instead of keeping its own.
//
// Reads JSON values from stdin until its end: a query (an object) or a list
// of queries; writes one line per value read, the answer or the list of
// answers, and flushes it, so a caller may keep one process open and ask one
// query at a time. A query names its formula and its inputs:
//
//   {"formula": "ring", "n": 8, "bytes": 65536, "alpha_s": 1e-3,
//    "bytes_per_s": 1.25e8}                          -> {"seconds": ...}
//
// The formulas and their inputs: kUsage below (`gradsync predict --help`).
// Besides one synchronization's time, a "step" query times a whole step
// under fifo and priority (core/sync/schedule_cost_model.h): the buckets'
// sizes, backward and forward times and one of the strategies' formulas in,
// the step time and the exposed communication under each schedule out.
//
// A value that is not JSON, a query with an unknown formula, a missing or
// mistyped input, or one out of range (n < 1, negative bytes or α, B <= 0):
// one line on stderr naming the query and the input, exit status 2.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/cost_model.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "allreduce/allreduce_table.h"
#include "core/base/status_macros.h"
#include "core/sync/link_cost.h"
#include "core/sync/schedule.h"
#include "core/sync/schedule_cost_model.h"
#include "nlohmann/json.hpp"
#include "ps/client/partitioner.h"
#include "ps/cost_model.h"
#include "tools/commands.h"

namespace gradsync {
namespace {

using nlohmann::json;

constexpr char kUsage[] =
    "usage: gradsync predict < queries.json\n"
    "Reads α–β queries (JSON objects, or lists of them) from stdin until its\n"
    "end and writes one line per value read: the answer, or the list of\n"
    "answers. Every answer is {\"seconds\": ...} unless said otherwise. "
    "Example:\n"
    "  echo '{\"formula\": \"ring\", \"n\": 8, \"bytes\": 65536, \"alpha_s\": "
    "1e-3,\n"
    "         \"bytes_per_s\": 1.25e8}' | gradsync predict\n"
    "\n"
    "The formulas and their inputs (link: alpha_s, bytes_per_s; eager_bytes,\n"
    "optional, 0 by default, is the clear to send's eager prefix):\n"
    "  ring, halving_doubling, tree     n, bytes, link [, eager_bytes]\n"
    "  hierarchical                     n, ranks_per_node, bytes, link\n"
    "                                   [, intra_alpha_s, intra_bytes_per_s,\n"
    "                                   shared_link (true), eager_bytes]\n"
    "  allreduce                        n, bytes, link [, eager_bytes]\n"
    "                                   -> {\"seconds\", \"algorithm\"}: the "
    "pick\n"
    "                                   of --sync=allreduce\n"
    "  allgather                        n, blob_bytes, link\n"
    "  tree_shape                       n -> {\"trees\": [tree 0, tree 1], "
    "each\n"
    "                                   [[parent, [children]] per rank],\n"
    "                                   \"rank_costs\": [[edges, hops], ...]}\n"
    "  ps                               n, bytes, link, largest_share,\n"
    "                                   last_key_bytes, message_bytes\n"
    "                                   [, reduce_bytes_per_s]\n"
    "  ps_colocated                     n, bytes, link, largest_share,\n"
    "                                   last_key_bytes, message_bytes\n"
    "  ps_mixed                         n, colocated, separate, bytes, link,\n"
    "                                   colocated_share, separate_share,\n"
    "                                   last_key_bytes, message_bytes\n"
    "  byteps                           n, separate, bytes, link\n"
    "  server_shares                    n, colocated, separate, partition\n"
    "                                   -> {\"shares\": [...]}\n"
    "  placed_shares                    n, colocated, separate, partition,\n"
    "                                   bytes, chunk_bytes\n"
    "                                   -> {\"colocated_share\", "
    "\"separate_share\"}\n"
    "  balanced_share                   bytes, servers, chunk_bytes\n"
    "                                   -> {\"share\"}\n"
    "\n"
    "One step's timeline under a send order "
    "(core/sync/schedule_cost_model.h):\n"
    "  step    sync (one of ring, halving_doubling, tree, hierarchical,\n"
    "          allreduce, ps, ps_colocated, ps_mixed) and that formula's\n"
    "          inputs but bytes (for the PS, last_key_bytes is the step's\n"
    "          last key, its tail added once);\n"
    "          bucket_bytes: a list in forward order (the first layers'\n"
    "          bucket first; buckets or layers);\n"
    "          backward_s, forward_s: seconds per bucket, a list in the same\n"
    "          order, or one number spread over the buckets by bytes (or,\n"
    "          for the backward, ready_s: when each bucket became ready);\n"
    "          [schedule: fifo, priority or both (default), partition_bytes\n"
    "          (0: whole buckets), credit_bytes (0: one partition in flight),\n"
    "          overlap_next_forward (true)]\n"
    "          -> {\"fifo\": {...}, \"priority\": {...}}, each {\"step_s\",\n"
    "          \"exposed_s\" (the next forward's waits), \"comm_s\" (the link\n"
    "          busy), \"comm_end_s\", \"backward_s\", \"forward_s\",\n"
    "          \"transfers\", \"bucket_done_s\": [per bucket, forward "
    "order]};\n"
    "          times from the start of backward\n"
    "\n";

// One query's inputs, each read with its name in the error.
class Query {
 public:
  explicit Query(const json& value) : value_(value) {}

  absl::StatusOr<double> Number(const char* name) const {
    auto it = value_.find(name);
    if (it == value_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing \"", name, "\""));
    }
    if (!it->is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\" is not a number: ", it->dump()));
    }
    return it->get<double>();
  }
  absl::StatusOr<double> Number(const char* name, double fallback) const {
    if (!value_.contains(name)) return fallback;
    return Number(name);
  }
  // A number >= `low` (strictly above it where `strict`).
  absl::StatusOr<double> Bounded(const char* name, double low,
                                 bool strict = false) const {
    absl::StatusOr<double> number = Number(name);
    if (!number.ok()) return number;
    return Check(name, *number, low, strict);
  }
  absl::StatusOr<double> Bounded(const char* name, double fallback, double low,
                                 bool strict) const {
    absl::StatusOr<double> number = Number(name, fallback);
    if (!number.ok()) return number;
    return Check(name, *number, low, strict);
  }
  absl::StatusOr<int> Count(const char* name, int low) const {
    absl::StatusOr<double> number = Number(name);
    if (!number.ok()) return number.status();
    if (*number != static_cast<double>(static_cast<int>(*number))) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\" is not a whole number: ", *number));
    }
    if (*number < low) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\" is ", *number, "; need >= ", low));
    }
    return static_cast<int>(*number);
  }
  absl::StatusOr<std::string> Text(const char* name) const {
    auto it = value_.find(name);
    if (it == value_.end() || !it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing or non-string \"", name, "\""));
    }
    return it->get<std::string>();
  }
  absl::StatusOr<bool> Flag(const char* name, bool fallback) const {
    auto it = value_.find(name);
    if (it == value_.end()) return fallback;
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\" is not true or false"));
    }
    return it->get<bool>();
  }
  absl::StatusOr<LinkCost> Link(const char* alpha = "alpha_s",
                                const char* bandwidth = "bytes_per_s") const {
    absl::StatusOr<double> alpha_s = Bounded(alpha, 0);
    if (!alpha_s.ok()) return alpha_s.status();
    absl::StatusOr<double> bytes_per_s = Bounded(bandwidth, 0, true);
    if (!bytes_per_s.ok()) return bytes_per_s.status();
    return LinkCost{*alpha_s, *bytes_per_s};
  }

 private:
  static absl::StatusOr<double> Check(const char* name, double number,
                                      double low, bool strict) {
    if (strict ? number > low : number >= low) return number;
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", name, "\" is ", number, "; need ", strict ? "> " : ">= ", low));
  }

  const json& value_;
};

json Seconds(double seconds) { return json{{"seconds", seconds}}; }

absl::StatusOr<json> TreeShape(const Query& query) {
  ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
  json trees = json::array();
  const DoubleBinaryTrees built = BuildDoubleBinaryTrees(n);
  for (const std::vector<TreeNode>& nodes : built.nodes) {
    json tree = json::array();
    for (const TreeNode& node : nodes) {
      tree.push_back(json::array({node.parent, node.children}));
    }
    trees.push_back(std::move(tree));
  }
  json costs = json::array();
  for (const auto& [edges, hops] : TreeRankCosts(n)) {
    costs.push_back(json::array({edges, hops}));
  }
  return json{{"trees", trees}, {"rank_costs", costs}, {"shape", built.shape}};
}

// A strategy's time for one synchronization of `bytes`, its other inputs
// read from the query once: what a single query answers, and what the step
// query (StepTimeline) charges each bucket or partition. `last_key_bytes`
// is the PS's tail (ps/cost_model.h's PsKeyTail; 0 leaves it out); the
// all-reduces have none and ignore it.
using SyncSeconds = std::function<double(double bytes, double last_key_bytes)>;

constexpr const char* kAllReduceFormulas[] = {
    "ring", "halving_doubling", "tree", "hierarchical", "allreduce"};
constexpr const char* kPsFormulas[] = {"ps", "ps_colocated", "ps_mixed"};

absl::StatusOr<SyncSeconds> AllReduceFormula(const std::string& formula,
                                             const Query& query) {
  ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
  ASSIGN_OR_RETURN(const auto link, query.Link());
  ASSIGN_OR_RETURN(const auto eager_bytes,
                   query.Bounded("eager_bytes", 0, 0, false));
  if (formula == "ring") {
    return SyncSeconds([n, link](double bytes, double) {
      return RingAllReduceSeconds(n, bytes, link);
    });
  }
  if (formula == "halving_doubling") {
    return SyncSeconds([n, link, eager_bytes](double bytes, double) {
      return HalvingDoublingAllReduceSeconds(n, bytes, link, eager_bytes);
    });
  }
  if (formula == "tree") {
    return SyncSeconds([n, link, eager_bytes](double bytes, double) {
      return TreeAllReduceSeconds(n, bytes, link, eager_bytes);
    });
  }
  if (formula == "allreduce") {
    // --sync=allreduce picks per bucket, so per partition too.
    return SyncSeconds([n, link, eager_bytes](double bytes, double) {
      const AllReduceKind kind =
          ChooseAllReduce(n, bytes, CandidateLinks::Uniform(link), eager_bytes);
      return PredictAllReduce(kind, n, bytes, link, eager_bytes);
    });
  }
  // hierarchical: across nodes over `link`, shared by the node's R ranks
  // (B/R each) unless each has its own; inside a node over the intra link,
  // the same link where not given.
  ASSIGN_OR_RETURN(const auto ranks_per_node, query.Count("ranks_per_node", 1));
  ASSIGN_OR_RETURN(const auto intra_alpha_s,
                   query.Bounded("intra_alpha_s", link.alpha_s, 0, false));
  ASSIGN_OR_RETURN(
      const auto intra_bytes_per_s,
      query.Bounded("intra_bytes_per_s", link.bytes_per_s, 0, true));
  ASSIGN_OR_RETURN(const auto shared, query.Flag("shared_link", true));
  const LinkCost across{link.alpha_s, shared ? link.bytes_per_s / ranks_per_node
                                             : link.bytes_per_s};
  const LinkCost intra{intra_alpha_s, intra_bytes_per_s};
  return SyncSeconds([=](double bytes, double) {
    return HierarchicalAllReduceSeconds(n, ranks_per_node, bytes, intra, across,
                                        eager_bytes);
  });
}

absl::StatusOr<SyncSeconds> PsFormula(const std::string& formula,
                                      const Query& query) {
  ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
  ASSIGN_OR_RETURN(const auto link, query.Link());
  ASSIGN_OR_RETURN(const auto message, query.Bounded("message_bytes", 0));
  if (formula == "ps_mixed") {
    ASSIGN_OR_RETURN(const auto colocated, query.Count("colocated", 0));
    ASSIGN_OR_RETURN(const auto separate, query.Count("separate", 0));
    ASSIGN_OR_RETURN(const auto colocated_share,
                     query.Bounded("colocated_share", 0));
    ASSIGN_OR_RETURN(const auto separate_share,
                     query.Bounded("separate_share", 0));
    // Refused layouts (no server, more serving workers than workers) are
    // refused here, once, rather than inside every bucket's time.
    RETURN_IF_ERROR(MixedPsSeconds(n, colocated, separate, 0, link,
                                   colocated_share, separate_share,
                                   PsKeyTail{0, message})
                        .status());
    return SyncSeconds([=](double bytes, double last_key) {
      return *MixedPsSeconds(n, colocated, separate, bytes, link,
                             colocated_share, separate_share,
                             PsKeyTail{last_key, message});
    });
  }
  ASSIGN_OR_RETURN(const auto share, query.Bounded("largest_share", 0));
  if (formula == "ps_colocated") {
    return SyncSeconds([=](double bytes, double last_key) {
      return ColocatedPsSeconds(n, bytes, link, share,
                                PsKeyTail{last_key, message});
    });
  }
  ASSIGN_OR_RETURN(const auto gamma,
                   query.Bounded("reduce_bytes_per_s", 0, 0, false));
  return SyncSeconds([=](double bytes, double last_key) {
    return SeparatePsSeconds(n, bytes, link, share,
                             PsKeyTail{last_key, message}, gamma);
  });
}

// `formula`'s SyncSeconds, or NotFound where it is not a strategy's time.
absl::StatusOr<SyncSeconds> SyncFormula(const std::string& formula,
                                        const Query& query) {
  for (const char* name : kAllReduceFormulas) {
    if (formula == name) return AllReduceFormula(formula, query);
  }
  for (const char* name : kPsFormulas) {
    if (formula == name) return PsFormula(formula, query);
  }
  return absl::NotFoundError(formula);
}

absl::StatusOr<json> AllReduce(const std::string& formula, const Query& query) {
  if (formula == "allgather") {
    ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
    ASSIGN_OR_RETURN(const auto link, query.Link());
    ASSIGN_OR_RETURN(const auto blob_bytes, query.Bounded("blob_bytes", 0));
    return Seconds(RingAllGatherSeconds(n, blob_bytes, link));
  }
  ASSIGN_OR_RETURN(const auto sync, AllReduceFormula(formula, query));
  ASSIGN_OR_RETURN(const auto bytes, query.Bounded("bytes", 0));
  if (formula == "allreduce") {
    ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
    ASSIGN_OR_RETURN(const auto link, query.Link());
    ASSIGN_OR_RETURN(const auto eager_bytes,
                     query.Bounded("eager_bytes", 0, 0, false));
    const AllReduceKind kind =
        ChooseAllReduce(n, bytes, CandidateLinks::Uniform(link), eager_bytes);
    return json{{"seconds", sync(bytes, 0)},
                {"algorithm", AllReduceName(kind)}};
  }
  return Seconds(sync(bytes, 0));
}

absl::StatusOr<PartitionPolicy> PartitionOf(const Query& query) {
  ASSIGN_OR_RETURN(const auto name, query.Text("partition"));
  return ParsePartitionPolicy(name);
}

absl::StatusOr<json> ParameterServer(const std::string& formula,
                                     const Query& query) {
  if (formula == "balanced_share") {
    ASSIGN_OR_RETURN(const auto bytes, query.Bounded("bytes", 0));
    ASSIGN_OR_RETURN(const auto servers, query.Count("servers", 1));
    ASSIGN_OR_RETURN(const auto chunk, query.Bounded("chunk_bytes", 0, true));
    return json{{"share", BalancedLargestShare(bytes, servers, chunk)}};
  }
  ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
  if (formula == "server_shares" || formula == "placed_shares") {
    ASSIGN_OR_RETURN(const auto colocated, query.Count("colocated", 0));
    ASSIGN_OR_RETURN(const auto separate, query.Count("separate", 0));
    ASSIGN_OR_RETURN(const auto policy, PartitionOf(query));
    if (formula == "server_shares") {
      ASSIGN_OR_RETURN(const auto shares,
                       ServerShares(policy, n, colocated, separate));
      return json{{"shares", shares}};
    }
    ASSIGN_OR_RETURN(const auto bytes, query.Bounded("bytes", 0));
    ASSIGN_OR_RETURN(const auto chunk, query.Bounded("chunk_bytes", 0, true));
    ASSIGN_OR_RETURN(const auto placed,
                     PlaceShares(bytes, n, colocated, separate, policy, chunk));
    return json{{"colocated_share", placed.colocated},
                {"separate_share", placed.separate}};
  }
  ASSIGN_OR_RETURN(const auto bytes, query.Bounded("bytes", 0));
  if (formula == "byteps") {
    ASSIGN_OR_RETURN(const auto link, query.Link());
    ASSIGN_OR_RETURN(const auto separate, query.Count("separate", 0));
    return Seconds(BytePsOptimumSeconds(n, separate, bytes, link));
  }
  ASSIGN_OR_RETURN(const auto last_key, query.Bounded("last_key_bytes", 0));
  ASSIGN_OR_RETURN(const auto sync, PsFormula(formula, query));
  return Seconds(sync(bytes, last_key));
}

// Per bucket, `name` as a list of one number per bucket, or as one number:
// a total spread over the buckets by their bytes (SpreadByBytes).
absl::StatusOr<std::vector<double>> PerBucket(
    const json& value, const char* name, const std::vector<double>& bytes) {
  auto it = value.find(name);
  if (it == value.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing \"", name,
                     "\" (seconds: a list, one per bucket, or a total spread "
                     "over the buckets by bytes)"));
  }
  if (it->is_number()) {
    const double total = it->get<double>();
    if (!(total >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\" is ", total, "; need >= 0"));
    }
    return SpreadByBytes(bytes, total);
  }
  if (!it->is_array() || it->size() != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\" is neither a number nor a list of ",
                     bytes.size(), " numbers (one per bucket): ", it->dump()));
  }
  std::vector<double> values;
  for (const json& item : *it) {
    if (!item.is_number() || !(item.get<double>() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", name, "\" holds ", item.dump(), "; need numbers >= 0"));
    }
    values.push_back(item.get<double>());
  }
  return values;
}

json StepJson(const ScheduledStep& step) {
  return json{
      {"step_s", step.step_s},         {"exposed_s", step.exposed_s},
      {"comm_s", step.comm_s},         {"comm_end_s", step.comm_end_s},
      {"backward_s", step.backward_s}, {"forward_s", step.forward_s},
      {"transfers", step.transfers},   {"bucket_done_s", step.bucket_done_s}};
}

// "step": the timeline of one step (core/sync/schedule_cost_model.h) under
// fifo, priority or both, each bucket charged `sync`'s time.
absl::StatusOr<json> StepTimeline(const json& value, const Query& query) {
  ASSIGN_OR_RETURN(const auto sync_name, query.Text("sync"));
  absl::StatusOr<SyncSeconds> sync = SyncFormula(sync_name, query);
  if (absl::IsNotFound(sync.status())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"sync\" is \"", sync_name,
        "\"; a step is timed with one of ring, halving_doubling, tree, "
        "hierarchical, allreduce, ps, ps_colocated, ps_mixed"));
  }
  if (!sync.ok()) return sync.status();
  auto it = value.find("bucket_bytes");
  if (it == value.end() || !it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(
        "missing \"bucket_bytes\" (a non-empty list, forward order: the "
        "first layers' bucket first)");
  }
  std::vector<double> bytes;
  for (const json& item : *it) {
    if (!item.is_number() || !(item.get<double>() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"bucket_bytes\" holds ", item.dump(), "; need numbers >= 0"));
    }
    bytes.push_back(item.get<double>());
  }
  // The backward: per bucket, or the moments the buckets became ready.
  std::vector<double> backward;
  if (value.contains("ready_s")) {
    if (value.contains("backward_s")) {
      return absl::InvalidArgumentError(
          "give \"backward_s\" or \"ready_s\", not both");
    }
    if (!value["ready_s"].is_array()) {
      return absl::InvalidArgumentError(
          "\"ready_s\" is a list, one time per bucket");
    }
    ASSIGN_OR_RETURN(const auto ready, PerBucket(value, "ready_s", bytes));
    ASSIGN_OR_RETURN(backward, BackwardFromReadyTimes(ready));
  } else {
    ASSIGN_OR_RETURN(backward, PerBucket(value, "backward_s", bytes));
  }
  ASSIGN_OR_RETURN(const auto forward, PerBucket(value, "forward_s", bytes));
  std::vector<ModelBucket> buckets;
  double total = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    buckets.push_back(ModelBucket{bytes[i], backward[i], forward[i]});
    total += bytes[i];
  }
  ASSIGN_OR_RETURN(const auto last_key,
                   query.Bounded("last_key_bytes", 0, 0, false));
  ScheduleModelOptions options;
  ASSIGN_OR_RETURN(options.partition_bytes,
                   query.Bounded("partition_bytes", 0, 0, false));
  ASSIGN_OR_RETURN(options.credit_bytes,
                   query.Bounded("credit_bytes", 0, 0, false));
  ASSIGN_OR_RETURN(options.overlap_next_forward,
                   query.Flag("overlap_next_forward", true));
  const SyncSeconds& seconds = *sync;
  // The PS's tail once per step: what its last key adds to the whole step.
  options.tail_s = seconds(total, last_key) - seconds(total, 0);
  const TransferSeconds transfer = [&seconds](double b) {
    return seconds(b, 0);
  };
  std::string schedule = "both";
  if (value.contains("schedule")) {
    ASSIGN_OR_RETURN(schedule, query.Text("schedule"));
  }
  std::vector<ScheduleKind> kinds;
  if (schedule == "both") {
    kinds = {ScheduleKind::kFifo, ScheduleKind::kPriority};
  } else {
    absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(schedule);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"schedule\" is \"", schedule, "\"; need fifo, priority or both"));
    }
    kinds = {*kind};
  }
  json answer = json::object();
  for (const ScheduleKind kind : kinds) {
    options.kind = kind;
    ASSIGN_OR_RETURN(const auto step,
                     PredictScheduledStep(buckets, options, transfer));
    answer[ScheduleKindName(kind)] = StepJson(step);
  }
  return answer;
}

absl::StatusOr<json> Answer(const json& value) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a query is a JSON object, not ", value.dump()));
  }
  const Query query(value);
  ASSIGN_OR_RETURN(const auto formula, query.Text("formula"));
  if (formula == "tree_shape") return TreeShape(query);
  if (formula == "step") return StepTimeline(value, query);
  for (const char* name : {"ring", "halving_doubling", "tree", "hierarchical",
                           "allreduce", "allgather"}) {
    if (formula == name) return AllReduce(formula, query);
  }
  for (const char* name :
       {"ps", "ps_colocated", "ps_mixed", "byteps", "server_shares",
        "placed_shares", "balanced_share"}) {
    if (formula == name) return ParameterServer(formula, query);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown formula \"", formula,
                   "\" (see `gradsync predict --help` for the list)"));
}

// The next non-space character of `in`, EOF at its end.
int SkipSpace(std::istream& in) {
  int c = in.peek();
  while (c != EOF && std::isspace(c)) {
    in.get();
    c = in.peek();
  }
  return c;
}

}  // namespace

int RunPredictCommand(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-h") == 0) {
      fprintf(stdout, "%s", kUsage);
      return 0;
    }
    fprintf(stderr,
            "gradsync predict: unexpected argument '%s' (it reads its queries "
            "on stdin; see `gradsync predict --help`)\n",
            argv[i]);
    return 2;
  }
  int64_t queries = 0;
  while (SkipSpace(std::cin) != EOF) {
    json value;
    try {
      std::cin >> value;
    } catch (const json::exception& error) {
      fprintf(stderr, "gradsync predict: after %lld queries, not JSON: %s\n",
              static_cast<long long>(queries), error.what());
      return 2;
    }
    const bool list = value.is_array();
    json answers = json::array();
    for (const json& query : list ? value : json::array({value})) {
      absl::StatusOr<json> answer = Answer(query);
      if (!answer.ok()) {
        fprintf(stderr, "gradsync predict: query %lld (%s): %s\n",
                static_cast<long long>(queries), query.dump().c_str(),
                std::string(answer.status().message()).c_str());
        return 2;
      }
      answers.push_back(*std::move(answer));
      ++queries;
    }
    std::cout << (list ? answers : answers.front()).dump() << '\n'
              << std::flush;
  }
  return 0;
}

}  // namespace gradsync
