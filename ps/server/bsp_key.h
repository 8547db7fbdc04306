// One key under bulk-synchronous training (--ps_consistency=bsp): each push
// is summed the moment it arrives, and the key's step completes when all N
// workers have pushed it.
//
// Pipelining inside a key. Each worker sends a key's floats in order, so the
// first min_r(received_r) floats of a key have been pushed by everyone and
// their result is final. Keys are therefore finalised block by block (blocks
// of `block_floats`, the server's message size): a block is averaged (or
// stepped by the optimizer) as soon as the slowest worker has pushed past it,
// and pulls stream it back while the rest of the key is still arriving, so a
// 4 MiB key does not wait for its last byte before its first byte returns.
//
// Memory does not grow with the number of steps. Under BSP a worker pushes
// step t+1 only after it has pulled all of step t, so a key only ever holds
// two steps: the sum of the step being pushed (completed + 1) and the result
// of the last completed step, which pulls read. Two buffers alternate by step
// parity; in server mode the result is the parameter buffer itself and one
// sum buffer suffices. Anything older or newer than those two steps is
// refused, which is also what keeps a confused worker from corrupting them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/server/shard_checkpoint.h"
#include "ps/server/shard_key.h"
#include "ps/server/shard_statistics.h"

namespace gradsync {

class BspKey : public ShardKey {
 public:
  // Server mode (`setting.parameters` not null): the result is the
  // parameters, stepped by the optimizer.
  BspKey(const Shape& shape, Setting setting);

  absl::Status Push(const ps::KeyPart& part, Waiters* notify) override;
  absl::Status CheckPull(const ps::Header& header,
                         const std::string& context) const override;
  bool AddPull(int64_t step, int rank,
               const std::shared_ptr<KeyWaiter>& waiter) override;
  int64_t FinalFloats(int64_t step, int rank) const override;
  absl::StatusOr<int64_t> Read(int64_t step, int rank, int64_t offset,
                               int64_t max_floats,
                               absl::FunctionRef<char*(int64_t floats)> place,
                               ps::Header* reply) override;
  std::vector<MissingPush> MissingWorkers(int64_t step,
                                          int rank) const override;
  int64_t StepsDone() const override;

 private:
  bool server_mode() const { return parameters_ != nullptr; }
  // Once every worker has pushed [0, pushed) of the current step: finalises
  // the whole blocks below `pushed` (all of the key when pushed == numel)
  // not finalised yet, and completes the step when the key is done. Returns
  // whether anything new became final.
  bool Finalize(int64_t pushed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The last step whose result is ready; pushes are for completed + 1.
  int64_t completed_ ABSL_GUARDED_BY(mu_);
  // Worker mode: sums by step parity (the other one is the last result).
  // Server mode: sums_[0] only; the result is the parameters.
  std::vector<float> sums_[2] ABSL_GUARDED_BY(mu_);
  // max_r received[r]: below it the sum buffer holds this step's partial
  // sum, above it stale data. The first worker to reach a float copies it
  // instead of adding, which spares zeroing the buffer between steps.
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  // Leading floats of step completed + 1 whose result is final (a multiple
  // of the block size, or numel just before the step completes).
  int64_t final_floats_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gradsync
