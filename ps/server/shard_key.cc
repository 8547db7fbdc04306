// What every key of a shard shares (see shard_key.h).
#include "ps/server/shard_key.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gradsync {

std::string MessageContext(const std::string& server, const ps::Header& header,
                           const char* what) {
  std::string out =
      absl::StrCat(server, ": ", what, " from worker ", header.rank());
  if (header.step() >= 0) absl::StrAppend(&out, ", step ", header.step());
  if (header.key() >= 0) absl::StrAppend(&out, ", key ", header.key());
  return out;
}

ShardKey::ShardKey(const Shape& shape, Setting setting)
    : id_(shape.id),
      numel_(shape.numel),
      index_(shape.index),
      num_workers_(shape.num_workers),
      block_floats_(shape.block_floats),
      server_(setting.server),
      start_step_(setting.start_step),
      lr_(setting.lr),
      checkpoint_(setting.checkpoint),
      statistics_(setting.statistics),
      received_(shape.num_workers, 0),
      parameters_(std::move(setting.parameters)) {}

absl::Status ShardKey::InitParams(const ps::KeyPart& part) {
  const std::string context = Context(part.header(), "initial parameters");
  if (parameters_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(context,
                     ": only worker 0 sends initial parameters, and only with "
                     "--ps_update=server"));
  }
  absl::MutexLock lock(&mu_);
  return parameters_->AddInitial(part.offset(), part.data(), context);
}

absl::Status ShardKey::CheckParamsComplete() const {
  if (parameters_ == nullptr) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (parameters_->initialized()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(server_, ": worker 0 sent ", parameters_->initial_received(),
                   " of ", numel_, " initial parameters of key ", id_));
}

absl::Status ShardKey::CheckPartContinues(const ps::KeyPart& part) const {
  const int64_t received = received_[part.header().rank()];
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  if (part.offset() == received && part.offset() + n <= numel_) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Context(part.header(), "push"), ": part [", part.offset(), ", ",
      part.offset() + n, ") of a ", numel_, "-float key does not continue the ",
      received, " floats received (parts come in order and fill the key)"));
}

absl::Status ShardKey::CheckParamsInitialized(const ps::Header& header) const {
  if (parameters_->initialized()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(Context(header, "push"),
                   ": worker 0 has not sent this key's "
                   "initial parameters, so the optimizer cannot run"));
}

}  // namespace gradsync
