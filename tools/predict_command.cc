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
//
// A value that is not JSON, a query with an unknown formula, a missing or
// mistyped input, or one out of range (n < 1, negative bytes or α, B <= 0):
// one line on stderr naming the query and the input, exit status 2.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "allreduce/algorithms/cost_model.h"
#include "core/sync/link_cost.h"
#include "allreduce/algorithms/tree_allreduce.h"
#include "allreduce/allreduce_table.h"
#include "core/base/status_macros.h"
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

absl::StatusOr<json> AllReduce(const std::string& formula, const Query& query) {
  ASSIGN_OR_RETURN(const auto n, query.Count("n", 1));
  ASSIGN_OR_RETURN(const auto link, query.Link());
  if (formula == "allgather") {
    ASSIGN_OR_RETURN(const auto blob_bytes, query.Bounded("blob_bytes", 0));
    return Seconds(RingAllGatherSeconds(n, blob_bytes, link));
  }
  ASSIGN_OR_RETURN(const auto bytes, query.Bounded("bytes", 0));
  ASSIGN_OR_RETURN(const auto eager_bytes,
                   query.Bounded("eager_bytes", 0, 0, false));
  if (formula == "ring") return Seconds(RingAllReduceSeconds(n, bytes, link));
  if (formula == "halving_doubling") {
    return Seconds(
        HalvingDoublingAllReduceSeconds(n, bytes, link, eager_bytes));
  }
  if (formula == "tree") {
    return Seconds(TreeAllReduceSeconds(n, bytes, link, eager_bytes));
  }
  if (formula == "allreduce") {
    const AllReduceKind kind =
        ChooseAllReduce(n, bytes, CandidateLinks::Uniform(link), eager_bytes);
    return json{
        {"seconds", PredictAllReduce(kind, n, bytes, link, eager_bytes)},
        {"algorithm", AllReduceName(kind)}};
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
  return Seconds(HierarchicalAllReduceSeconds(
      n, ranks_per_node, bytes, LinkCost{intra_alpha_s, intra_bytes_per_s},
      across, eager_bytes));
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
  ASSIGN_OR_RETURN(const auto link, query.Link());
  if (formula == "byteps") {
    ASSIGN_OR_RETURN(const auto separate, query.Count("separate", 0));
    return Seconds(BytePsOptimumSeconds(n, separate, bytes, link));
  }
  ASSIGN_OR_RETURN(const auto last_key, query.Bounded("last_key_bytes", 0));
  ASSIGN_OR_RETURN(const auto message, query.Bounded("message_bytes", 0));
  const PsKeyTail keys{last_key, message};
  if (formula == "ps_mixed") {
    ASSIGN_OR_RETURN(const auto colocated, query.Count("colocated", 0));
    ASSIGN_OR_RETURN(const auto separate, query.Count("separate", 0));
    ASSIGN_OR_RETURN(const auto colocated_share,
                     query.Bounded("colocated_share", 0));
    ASSIGN_OR_RETURN(const auto separate_share,
                     query.Bounded("separate_share", 0));
    ASSIGN_OR_RETURN(const auto seconds,
                     MixedPsSeconds(n, colocated, separate, bytes, link,
                                    colocated_share, separate_share, keys));
    return Seconds(seconds);
  }
  ASSIGN_OR_RETURN(const auto share, query.Bounded("largest_share", 0));
  if (formula == "ps_colocated") {
    return Seconds(ColocatedPsSeconds(n, bytes, link, share, keys));
  }
  ASSIGN_OR_RETURN(const auto gamma,
                   query.Bounded("reduce_bytes_per_s", 0, 0, false));
  return Seconds(SeparatePsSeconds(n, bytes, link, share, keys, gamma));
}

absl::StatusOr<json> Answer(const json& value) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a query is a JSON object, not ", value.dump()));
  }
  const Query query(value);
  ASSIGN_OR_RETURN(const auto formula, query.Text("formula"));
  if (formula == "tree_shape") return TreeShape(query);
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
