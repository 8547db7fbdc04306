// How one ready bucket is summed over the ranks, as --compression says: the
// reduce, gather-and-sum and row-sparse paths of the all-reduce family, over
// whichever algorithm runs (allreduce/algorithms/) and the ring all-gather
// every algorithm keeps. AllReduceSync (allreduce_sync.h) calls Reduce on its
// communication thread, one bucket at a time.
//
//   a ready bucket, by --compression and shape:
//     none, dense        -> the algorithm all-reduces it in place
//     none, row-sparse   -> sizes all-gathered; then the rows gathered and
//                           summed, or the dense all-reduce (fewer bytes)
//     fp16, bf16         -> the ring, with 16-bit values on the wire
//     randomk            -> encode; the algorithm all-reduces the k values
//     topk, onebit       -> encode; all-gather the encodings; sum them in
//                           rank order
//
// - fp16/bf16: the ring all-reduce carries 16-bit values (ring_allreduce.h
//   says where it rounds); the other algorithms refuse it in their factories.
// - topk/onebit: each rank encodes its bucket with error feedback, the ring
//   all-gathers the serialized encodings (ring_allgather.h, whatever the
//   reduction algorithm), and every rank decodes all N in rank order into a
//   zeroed bucket, then averages: the same sum, bit for bit, on every rank.
// - randomk: every rank picks the same indices (shared seed), so the k values
//   are summed by the algorithm itself as a dense all-reduce of k floats and
//   scattered back; no indices travel.
// - none, on a row-sparse bucket (an embedding table, Bucket::
//   sparse_row_width): the ranks first all-gather the sizes of their exact
//   touched-row encodings (8 bytes each), then all-gather the rows when the
//   busiest link would carry fewer bytes than the dense ring's 2(N-1)/N of
//   the bucket, and run the dense all-reduce otherwise; every rank decides
//   from the same sizes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "allreduce/algorithms/allreduce_algorithm.h"
#include "allreduce/algorithms/ring_allgather.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/transport/peer_transport.h"
#include "core/sync/compression.h"
#include "core/sync/error_feedback.h"

namespace gradsync {

// The span of the flat gradient one bucket covers.
struct BucketSpan {
  int64_t offset = 0;  // floats
  int64_t numel = 0;
  int64_t sparse_row_width = 0;  // Bucket's: > 0 for a row-sparse tensor
};

// Row-sparse buckets: all-gather the touched rows or all-reduce densely
// (auto: whichever puts fewer bytes on the busiest link).
enum class RowSparseRoute { kAuto, kGather, kDense };

class BucketReducer {
 public:
  // `name` (the --sync= name) starts errors. `algorithm` (the ring itself
  // for 16-bit values), `compressor` and `error_feedback` must outlive this
  // object; the all-gather runs over `transport`'s ring neighbours.
  BucketReducer(std::string name, int world_size, AllReduceAlgorithm* algorithm,
                PeerTransport* transport, const Compressor& compressor,
                ErrorFeedback& error_feedback, RowSparseRoute route);

  // Sums bucket `bucket`'s `span` (at `data`, host memory: the whole bucket,
  // or one partition of it under --schedule=priority) over the ranks as
  // --compression says (above), then scales it. `tag` goes into every
  // transfer's header (the bucket's index, or its partition's tag).
  absl::Status Reduce(int bucket, uint32_t tag, int64_t step,
                      const BucketSpan& span, float* data, float scale);
  // Of the last Reduce: milliseconds spent encoding and decoding, and where
  // a row-sparse bucket went (+1 gathered, -1 dense, 0 not row-sparse).
  double codec_ms() const { return codec_ms_; }
  int row_sparse() const { return row_sparse_; }
  // Payload bytes the all-gather moved so far (the algorithm counts its own).
  int64_t gather_bytes_sent() const { return gather_->bytes_sent(); }
  int64_t gather_bytes_received() const { return gather_->bytes_received(); }

 private:
  // All-gathers `own` (this rank's encoding of the bucket) and leaves the
  // scaled sum of every rank's decoded encoding, in rank order, at `data`.
  absl::Status GatherAndSum(const EncodedBucket& own, Encoding expected,
                            int bucket, const BucketSpan& span, float* data,
                            float scale);
  absl::Status ReduceRowSparse(int bucket, const BucketSpan& span, float* data,
                               float scale);

  const std::string name_;
  const int world_size_;
  AllReduceAlgorithm* const algorithm_;
  RingAllReduce* const plain_ring_;  // algorithm_ when it is the ring
  std::unique_ptr<RingAllGather> gather_;
  const Compressor& compressor_;
  ErrorFeedback& error_feedback_;
  const RowSparseRoute route_;
  double codec_ms_ = 0;
  int row_sparse_ = 0;
};

}  // namespace gradsync
