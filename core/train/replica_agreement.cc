// Every worker against worker 0 (replica_agreement.h).
#include "core/train/replica_agreement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/status_macros.h"
#include "zlib.h"

namespace gradsync {

absl::Status ReplicaAgreement::CheckSameStartStep(int64_t step) const {
  if (Alone()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string reference,
                   rendezvous_->Broadcast("start_step", identity_.rank,
                                          /*root=*/0, absl::StrCat(step),
                                          timeout_));
  if (reference != absl::StrCat(step)) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", identity_.rank, " starts at step ", step,
                     " but worker 0 at step ", reference,
                     "; with --resume every worker must read the same "
                     "--checkpoint (shared storage)"));
  }
  return absl::OkStatus();
}

absl::Status ReplicaAgreement::CheckSameDerivedSettings(
    const std::vector<std::pair<std::string, std::string>>& settings,
    const std::string& advice) const {
  if (Alone()) return absl::OkStatus();
  // One "name=value" line each; names and values are the trainer's own
  // (no newline in them).
  std::string mine;
  for (const auto& [name, value] : settings) {
    absl::StrAppend(&mine, name, "=", value, "\n");
  }
  ASSIGN_OR_RETURN(const std::string reference,
                   rendezvous_->Broadcast("derived_settings", identity_.rank,
                                          /*root=*/0, mine, timeout_));
  if (reference == mine) return absl::OkStatus();
  const std::vector<std::string> theirs =
      absl::StrSplit(reference, '\n', absl::SkipEmpty());
  for (size_t i = 0; i < settings.size(); ++i) {
    const std::string line =
        absl::StrCat(settings[i].first, "=", settings[i].second);
    if (i < theirs.size() && theirs[i] == line) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", identity_.rank, "'s derived ", line,
        " differs from worker 0's ",
        i < theirs.size() ? theirs[i] : std::string("(none)"), "; ", advice));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "worker ", identity_.rank, " derived fewer settings than worker 0 (",
      settings.size(), " against ", theirs.size(),
      "): another version of gradsync?"));
}

absl::Status ReplicaAgreement::CheckSameParameters(
    const std::vector<float>& params, const std::string& when) const {
  if (Alone()) return absl::OkStatus();
  const uint32_t crc =
      crc32(0L, reinterpret_cast<const Bytef*>(params.data()),
            params.size() * sizeof(float));
  ASSIGN_OR_RETURN(
      std::string reference,
      rendezvous_->Broadcast(absl::StrCat("params_crc/", when), identity_.rank,
                             /*root=*/0, absl::StrCat(crc), timeout_));
  if (reference != absl::StrCat(crc)) {
    return absl::InternalError(absl::StrCat(
        "worker ", identity_.rank, "'s parameters ", when,
        " differ from worker 0's (CRC-32 ", crc, " vs ", reference, ")",
        when == "at start-up"
            ? "; every worker needs the same --seed and --layers"
            : "; the strategy did not give every rank the same update"));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
