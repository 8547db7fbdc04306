#include "sim/ps_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sync/param_layout.h"
#include "ps/client/partitioner.h"
#include "ps/key_size_rule.h"

namespace gradsync {
namespace sim {

absl::StatusOr<PsPlan> PlanParameterServer(const StepProfile& profile,
                                           int workers, int servers,
                                           int colocated, int64_t key_bytes,
                                           PartitionPolicy policy) {
  if (profile.tensor_bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the profile ", profile.name, " has no tensors to cut keys from"));
  }
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < profile.tensor_bytes.size(); ++i) {
    // Gradients are float32: a tensor's floats, rounded up for a custom
    // model whose bytes do not divide by 4.
    specs.push_back(
        {absl::StrCat("tensor", i),
         {std::max<int64_t>(1, (profile.tensor_bytes[i] + 3) / 4)}});
  }
  // The layout's own buckets are not used: keys are placed over the whole
  // model, and the profile's buckets pick their keys by tensor below.
  absl::StatusOr<ParamLayout> layout = ParamLayout::Create(std::move(specs), 0);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<std::vector<double>> shares =
      ServerShares(policy, workers, colocated, servers - colocated);
  if (!shares.ok()) return shares.status();

  PsPlan plan;
  if (key_bytes > 0) {
    plan.key_bytes = key_bytes;
    plan.key_reason = "given";
  } else {
    absl::StatusOr<KeySizeChoice> choice =
        ChooseKeySize(*layout, *shares, workers);
    if (!choice.ok()) return choice.status();
    plan.key_bytes = choice->key_bytes;
    plan.key_reason = choice->reason;
  }
  absl::StatusOr<Partition> partition =
      Partition::Create(*layout, *shares, plan.key_bytes);
  if (!partition.ok()) return partition.status();
  plan.imbalance = partition->imbalance();

  std::vector<int> bucket_of_tensor(profile.tensor_bytes.size(), -1);
  for (size_t b = 0; b < profile.buckets.size(); ++b) {
    for (int t = profile.buckets[b].first_tensor;
         t < profile.buckets[b].end_tensor; ++t) {
      bucket_of_tensor[t] = static_cast<int>(b);
    }
  }
  plan.keys.assign(profile.buckets.size(),
                   std::vector<std::vector<int64_t>>(servers));
  for (const PsKey& key : partition->keys()) {
    const int bucket = bucket_of_tensor[key.param];
    if (bucket < 0) {
      return absl::InternalError(absl::StrCat("the profile ", profile.name,
                                              ": tensor ", key.param,
                                              " is in no bucket"));
    }
    plan.keys[bucket][key.server].push_back(4 * key.numel);
  }
  return plan;
}

}  // namespace sim
}  // namespace gradsync
