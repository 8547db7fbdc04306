// The one table of the CPU all-reduce family: per AllReduceKind its --sync=
// name, the peers it connects to, how it is made and how it is predicted
// (algorithms/allreduce_kind.h has the row's type). The registrations
// (allreduce_strategies.cc), the sync layer, the selector's candidates, the
// benchmark and `gradsync strategies` all read it, so adding an algorithm is
// one file in algorithms/ and one row here.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "allreduce/algorithms/allreduce_kind.h"
#include "core/sync/link_cost.h"
#include "allreduce/algorithms/selecting_allreduce.h"

namespace gradsync {

// Every row, in AllReduceKind's order.
const std::vector<AllReduceEntry>& AllReduceTable();
const AllReduceEntry& AllReduceEntryOf(AllReduceKind kind);
// The row named `name` (a --sync= value), or null.
const AllReduceEntry* FindAllReduce(absl::string_view name);
// The name of `kind`'s row.
inline const char* AllReduceName(AllReduceKind kind) {
  return AllReduceEntryOf(kind).name;
}

// --sync=allreduce's candidates: the ring (first: it wins ties),
// halving-doubling and the double binary tree.
std::vector<const AllReduceEntry*> SelectorCandidates();

// The selector's choice among its candidates for `bytes` over `n` ranks,
// each predicted with its own link (the ring on a tie).
AllReduceKind ChooseAllReduce(int n, double bytes, const CandidateLinks& links,
                              double eager_bytes = 0);
inline AllReduceKind ChooseAllReduce(int n, double bytes,
                                     const LinkCost& link) {
  return ChooseAllReduce(n, bytes, CandidateLinks::Uniform(link));
}
// The α–β prediction of `kind` (cost_model.h); `kind` must have one.
double PredictAllReduce(AllReduceKind kind, int n, double bytes,
                        const LinkCost& link, double eager_bytes = 0);

}  // namespace gradsync
