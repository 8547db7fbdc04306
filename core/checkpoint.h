// Checkpoints of a worker's training state: parameters, optimizer state and
// position (epoch, step), in one binary file with a CRC-32 over everything.
// Worker 0 writes them atomically (temporary file, fsync, rename), so a crash
// mid-write leaves the previous checkpoint intact; a truncated or corrupt file
// is refused on read with an error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct Checkpoint {
  std::string model;        // the model's name (e.g. "mlp-784-512-256-10")
  int64_t epoch = 0;        // epochs completed
  int64_t step = 0;         // global steps completed
  int64_t optimizer_step = 0;
  std::vector<float> params;
  std::vector<std::vector<float>> optimizer_state;  // each params.size() long
};

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint);
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

}  // namespace gradsync
