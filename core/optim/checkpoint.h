// Checkpoints of training state in one binary file with a CRC-32 over
// everything: worker 0's (parameters, optimizer state, the step and the
// sampler's position inside its epoch) and, with --ps_update=server, each
// parameter server's shard (its keys' parameters and optimizer slots).
// Writes are atomic (temporary file, fsync, rename), so a crash mid-write
// leaves the previous checkpoint intact; a truncated or corrupt file is
// refused on read with an error naming it and saying what is wrong.
//
// Format (version 4, little-endian): the 8-byte magic "GSCKPT04" (the last
// two characters are the version), the file's total size (u64), the fields
// of Checkpoint in declaration order up to `compression` (strings and float
// arrays prefixed by their length), then the CRC-32 of everything before it
// (u64). Version 3 files, the same without `compression`, are still read
// (with the compression unrecorded); version 2 files, without `buffers`
// either, too (with no buffers): a model without any resumes from them, and
// the trainer refuses them for a model with some. Version 1 files (no size,
// no sampler position) are refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

// One parameter-server key (ps/client/partitioner.h) of a server's shard.
struct CheckpointKey {
  int64_t key = 0;
  int64_t numel = 0;
  bool operator==(const CheckpointKey& other) const {
    return key == other.key && numel == other.numel;
  }
};

struct Checkpoint {
  // The model's name (e.g. "mlp-784-512-256-10"); for a server's shard,
  // "ps shard: server k of K".
  std::string model;
  int64_t step = 0;  // global steps completed
  // Where the sampler resumes: the epoch the next step belongs to, and how
  // many of that epoch's steps (batches) are done. At an epoch's end this is
  // (next epoch, 0).
  int64_t epoch = 0;
  int64_t epoch_step = 0;
  // What fixes the data order and a step's batch; a resume must match them.
  uint64_t seed = 0;
  int64_t world_size = 1;
  int64_t batch_size = 0;
  // "sgd" or "adam"; optimizer_state is empty when the optimizer keeps none
  // (SGD without momentum) or, in worker 0's checkpoint, when the servers
  // run it (--ps_update=server: the servers' shards hold the state).
  std::string optimizer;
  bool optimizer_on_servers = false;
  int64_t optimizer_step = 0;
  std::vector<float> params;
  std::vector<std::vector<float>> optimizer_state;  // each params.size() long
  // A server's shard only: its keys, in order; params and every optimizer
  // buffer are these keys' floats concatenated.
  std::vector<CheckpointKey> keys;
  // Worker 0's model buffers (Model::buffers(): batch normalisation's
  // running statistics), empty for a model without any and in a server's
  // shard. Every worker takes worker 0's before it evaluates, so these are
  // the job's.
  std::vector<float> buffers;
  // Worker 0's checkpoint: the run's --compression as CompressionSpec
  // prints it ("none", "topk:0.01"), which a resume must keep, since the
  // error-feedback residuals saved beside it (core/sync/error_feedback.h)
  // belong to that compression and the continuation would differ without
  // them. Empty in a server's shard and in files of format version 2 and 3,
  // which did not record it.
  std::string compression;
  // Set by ReadCheckpoint: the file's format version (2, 3 or 4). Writes are
  // always version 4.
  int format_version = 4;
};

absl::Status WriteCheckpoint(const std::string& path,
                             const Checkpoint& checkpoint);
// NotFound when `path` does not exist; DataLoss for anything else wrong with
// the file. Every message names the file.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

}  // namespace gradsync
