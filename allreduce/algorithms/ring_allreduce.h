// Ring all-reduce (sum) of a float buffer in place, over a PeerTransport's
// two ring neighbours.
//
// The buffer is cut into N segments. Reduce-scatter: in N-1 steps every rank
// sends one segment to its right neighbour and adds the segment arriving from
// its left into its own copy, so that afterwards rank r holds the full sum of
// segment r+1. All-gather: in N-1 more steps the finished segments travel
// once around the ring. Every link carries 2(N-1)/N of the buffer, whatever N
// is (Patarasuk & Yuan 2009; Baidu 2017; Horovod; NCCL's ring).
//
//   Reduce-scatter, N = 4 (rank r starts with segment r; each receiver adds
//   the arriving segment into its own copy of it):
//
//     step 1:  r0 ─seg 0─> r1 ─seg 1─> r2 ─seg 2─> r3 ─seg 3─> r0
//     step 2:  r0 ─seg 3─> r1 ─seg 0─> r2 ─seg 1─> r3 ─seg 2─> r0
//     step 3:  r0 ─seg 2─> r1 ─seg 3─> r2 ─seg 0─> r3 ─seg 1─> r0
//     after:   r0 holds the sum of seg 1, r1 of seg 2, r2 of seg 3, r3 of seg 0
//
//   All-gather: the same three steps again, each rank forwarding the
//   finished segment it last received instead of adding it.
//
// The steps are pipelined at the byte level rather than run one after the
// other: the bytes that step s+1 sends are exactly the ones step s received,
// so as soon as a piece of step s has arrived and been reduced it can go out
// again. One thread drives both connections with poll(): it keeps the right
// neighbour's socket full while draining the left one, receiving at most a
// chunk (--allreduce_chunk_kb) at a time into a cache-sized staging buffer
// that is reduced into the destination while the kernel already takes in the
// next chunk. All-gather receives straight into the destination: no copy in
// user space beyond what the reduction needs.
//
//   one segment:   | chunk 0 | chunk 1 | chunk 2 | ... |
//   left ──> staging (chunk k) ──add──> destination ──> right
//            while the kernel takes in chunk k+1
//
// With --compression=fp16|bf16 (RunHalfPrecision) both phases carry 16-bit
// values on the wire: each reduce-scatter hop decodes the arriving values to
// float32, adds its own float32 contribution and rounds the partial sum to 16
// bits again before forwarding it (accumulation is in float32; rounding
// happens once per hop and once more on the finished segment, which its
// owner also rounds in place, so every rank ends with the same values).
//
// Each all-reduce starts with a 24-byte header (sequence number, tag, wire
// encoding, element count) in the same stream, costing no round trip, so two
// ranks that disagree about which buffer they reduce fail with a clear error
// instead of mixing gradients. After any error the ring is shut down (the
// neighbours notice at once) and this object refuses further work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/transport/peer_transport.h"
#include "core/sync/compression.h"

namespace gradsync {

class RingAllReduce : public AllReduceAlgorithm {
 public:
  // `transport` must outlive this object. `chunk_bytes` is rounded to a
  // multiple of 64 bytes and at least 4 KiB.
  RingAllReduce(PeerTransport* transport, int64_t chunk_bytes);

  // Bytes of the header that precedes each all-reduce's payload.
  static constexpr int64_t kHeaderBytes = 24;

  // Sums `count` floats at `data` over all ranks in place, then multiplies by
  // `scale` (1/N gives the average). The scale is folded into the last
  // reduce-scatter step, so averaging costs no extra pass over the buffer.
  // Every rank must call Run with the same count and `tag` (a bucket index,
  // say), in the same order; they all end with bitwise identical results.
  absl::Status Run(float* data, int64_t count, float scale = 1.0f,
                   uint32_t tag = 0) override;

  // Run with 16-bit values on the wire (`wire` is Encoding::kFp16 or kBf16;
  // see the top of this file for where rounding happens). Every rank must
  // use the same encoding for the same all-reduce: the header carries it.
  absl::Status RunHalfPrecision(float* data, int64_t count, float scale,
                                uint32_t tag, Encoding wire);

  // Payload bytes moved so far (headers excluded), for StepStats.
  int64_t bytes_sent() const override { return bytes_sent_; }
  int64_t bytes_received() const override { return bytes_received_; }
  int64_t chunk_bytes() const { return chunk_bytes_; }

 private:
  class Pass;  // the state of one Run

  absl::Status Fail(absl::Status status);
  absl::Status RunWith(float* data, int64_t count, float scale, uint32_t tag,
                       Encoding wire);

  PeerTransport* transport_;
  int64_t chunk_bytes_;
  std::vector<float> staging_;  // one chunk: where reduce-scatter receives
  std::vector<uint16_t> wire_;  // 16-bit runs: the buffer as it is sent
  uint32_t sequence_ = 0;
  int64_t bytes_sent_ = 0;
  int64_t bytes_received_ = 0;
  absl::Status broken_;  // the first error; the ring is unusable after it
};

}  // namespace gradsync
