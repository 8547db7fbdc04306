// A parameter server's checkpoints (see shard_checkpoint.h).
#include "ps/server/shard_checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// Where the shard of the checkpoint before keeps: <shard path>.previous.
std::string PreviousPath(const std::string& shard_path) {
  return absl::StrCat(shard_path, ".previous");
}

// "3 keys (0: 100 floats, 4: 250 floats, ...)", for errors about key tables.
std::string DescribeKeys(const std::vector<CheckpointKey>& keys) {
  std::vector<std::string> items;
  for (size_t i = 0; i < keys.size() && i < 6; ++i) {
    items.push_back(absl::StrCat(keys[i].key, ": ", keys[i].numel, " floats"));
  }
  if (keys.size() > 6) items.push_back("...");
  return absl::StrCat(keys.size(), " keys (", absl::StrJoin(items, ", "), ")");
}

std::vector<int64_t> OffsetsOf(const std::vector<CheckpointKey>& keys) {
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const CheckpointKey& key : keys) {
    offsets.push_back(offset);
    offset += key.numel;
  }
  return offsets;
}

int64_t FloatsOf(const std::vector<CheckpointKey>& keys) {
  int64_t floats = 0;
  for (const CheckpointKey& key : keys) floats += key.numel;
  return floats;
}

}  // namespace

ShardCheckpoint::ShardCheckpoint(std::string name, int server_rank,
                                 int num_servers, ps::CheckpointConfig config,
                                 std::string optimizer_kind,
                                 std::vector<CheckpointKey> keys,
                                 size_t state_buffers)
    : name_(std::move(name)),
      server_rank_(server_rank),
      num_servers_(num_servers),
      config_(std::move(config)),
      optimizer_kind_(std::move(optimizer_kind)),
      keys_(std::move(keys)),
      offsets_(OffsetsOf(keys_)),
      shard_floats_(FloatsOf(keys_)),
      state_buffers_(state_buffers) {}

bool ShardCheckpoint::IsCheckpointStep(int64_t steps) const {
  if (config_.path().empty()) return false;
  // The steps at which the trainer's worker 0 writes (core/train/trainer.cc).
  return (config_.every() > 0 && steps % config_.every() == 0) ||
         steps % config_.steps_per_epoch() == 0 ||
         steps == config_.total_steps();
}

bool ShardCheckpoint::IsBarrierStep(int64_t steps) const {
  return IsCheckpointStep(steps) ||
         (config_.total_steps() > 0 && steps == config_.total_steps());
}

std::string ShardCheckpoint::ShardPath(const std::string& path) const {
  return absl::StrCat(path, ".server", server_rank_);
}

std::string ShardCheckpoint::ShardName() const {
  return absl::StrCat("ps shard: server ", server_rank_, " of ", num_servers_);
}

absl::Status ShardCheckpoint::status() const {
  if (!failed_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return status_;
}

void ShardCheckpoint::StartSnapshot(int64_t steps) {
  snapshot_.model = ShardName();
  snapshot_.step = steps;
  snapshot_.optimizer = optimizer_kind_;
  snapshot_.optimizer_on_servers = true;
  snapshot_.params.resize(shard_floats_);
  snapshot_.optimizer_state.resize(state_buffers_);
  for (auto& state : snapshot_.optimizer_state) state.resize(shard_floats_);
  snapshot_.keys = keys_;
  snapshot_keys_ = 0;
}

void ShardCheckpoint::TakeKey(size_t index, const KeyParameters& parameters,
                              int64_t steps) {
  absl::MutexLock lock(&mu_);
  if (snapshot_.step != steps || snapshot_keys_ == keys_.size()) {
    // The first key of this checkpoint (BSP: every key completed the
    // previous checkpoint step before any completes this one).
    StartSnapshot(steps);
  }
  absl::Status copied = parameters.SaveTo(offsets_[index], snapshot_);
  if (!copied.ok() && status_.ok()) status_ = copied;
  if (++snapshot_keys_ < keys_.size()) return;
  WriteSnapshot(steps);
}

void ShardCheckpoint::WriteSnapshot(int64_t steps) {
  const std::string path = ShardPath(config_.path());
  absl::Status written = status_;
  // The shard of the previous checkpoint stays as <path>.previous: worker 0
  // writes its checkpoint of this step only once the step is over, so a job
  // that stops in between resumes from worker 0's previous checkpoint, and
  // the servers need their shards of that step. (They are never further
  // ahead: the next checkpoint step cannot complete before worker 0 has
  // written this one.)
  if (written.ok() &&
      std::rename(path.c_str(), PreviousPath(path).c_str()) != 0 &&
      errno != ENOENT) {
    written = absl::InternalError(absl::StrCat("cannot rename ", path, " to ",
                                               PreviousPath(path), ": ",
                                               std::strerror(errno)));
  }
  if (written.ok()) written = WriteCheckpoint(path, snapshot_);
  if (!written.ok()) {
    if (status_.ok()) {
      status_ =
          absl::Status(written.code(),
                       absl::StrCat(name_, ": writing the checkpoint of step ",
                                    steps, ": ", written.message()));
    }
    failed_ = true;
    GS_LOG(ERROR) << status_.message();
    return;
  }
  ++written_;
  GS_LOG(DEBUG) << name_ << ": checkpoint of step " << steps << " written to "
                << path;
}

absl::Status ShardCheckpoint::ReadSnapshot(
    size_t index, int64_t steps, int64_t offset, int64_t count,
    absl::FunctionRef<char*(int64_t floats)> place) const {
  absl::MutexLock lock(&mu_);
  if (snapshot_.step != steps) {
    return absl::InternalError(absl::StrCat(
        name_, ": the snapshot of step ", steps, " of key ", keys_[index].key,
        " is gone (it holds step ", snapshot_.step, ")"));
  }
  std::memcpy(place(count), snapshot_.params.data() + offsets_[index] + offset,
              static_cast<size_t>(count) * sizeof(float));
  return absl::OkStatus();
}

absl::Status ShardCheckpoint::Load(
    const std::vector<KeyParameters*>& parameters, const std::string& context) {
  std::string path = ShardPath(config_.path());
  const int64_t start_step = config_.start_step();
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  if (!read.ok() || read->step != start_step) {
    // The job may have stopped after this server wrote the shard of a step
    // and before worker 0 wrote its own (see the header).
    absl::StatusOr<Checkpoint> previous = ReadCheckpoint(PreviousPath(path));
    if (previous.ok() && previous->step == start_step) {
      path = PreviousPath(path);
      read = std::move(previous);
    }
  }
  if (absl::IsNotFound(read.status())) {
    return absl::NotFoundError(absl::StrCat(
        context, ": --resume: no shard checkpoint at ", path, " (server ",
        server_rank_,
        " writes it next to --checkpoint with --ps_update=server;"
        " it must be on storage this server shares with worker 0)"));
  }
  if (!read.ok()) {
    return Annotate(read.status(), absl::StrCat(context, ": --resume"));
  }
  const Checkpoint& c = *read;
  const std::string refused =
      absl::StrCat(context, ": --resume: shard checkpoint ", path);
  if (c.model != ShardName()) {
    return absl::FailedPreconditionError(
        absl::StrCat(refused, " is '", c.model, "', not '", ShardName(),
                     "'; resume with the same number of servers"));
  }
  if (c.step != start_step) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, " holds step ", c.step, " but the workers resume at step ",
        start_step,
        " from worker 0's checkpoint; the two are written at the "
        "same steps, so one of them is from another run (or the job stopped "
        "between the two writes)"));
  }
  if (c.keys != keys_) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, " covers ", DescribeKeys(c.keys),
        " but under the current partition this server owns ",
        DescribeKeys(keys_),
        "; resume with the same model, number of servers and --ps_chunk_kb"));
  }
  if (c.optimizer != optimizer_kind_ ||
      c.optimizer_state.size() != state_buffers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, " holds the state of optimizer ", c.optimizer, " (",
        c.optimizer_state.size(), " buffers) but this run uses ",
        optimizer_kind_, " (", state_buffers_,
        " buffers); resume with the same --optimizer and --momentum"));
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    RETURN_IF_ERROR(Annotate(parameters[i]->LoadFrom(c, offsets_[i]), refused));
  }
  GS_LOG(INFO) << name_ << ": resumed " << parameters.size() << " keys at step "
               << c.step << " from " << path;
  return absl::OkStatus();
}

}  // namespace gradsync
