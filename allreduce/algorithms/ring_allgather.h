// Ring all-gather of byte strings of any length ("blobs"), over the ring
// transport's two neighbour connections: in N-1 steps every rank forwards to
// its right neighbour the blob it received from its left one in the step
// before (its own in the first step), so after N-1 steps every rank holds all
// N blobs. Each link carries every blob but one, whatever their lengths:
// Horovod's all-gather of sparse or compressed gradients, whose encodings
// differ in length from rank to rank.
//
// It is shared by every algorithm of the family (allreduce/allreduce_sync.h):
// all of them keep the ring neighbours connected, and an all-gather is the same
// whatever the reduction algorithm is. Within a step the send and the receive
// run concurrently (poll), so blobs larger than the socket buffers cannot
// deadlock; steps are not pipelined into each other (a step forwards a blob
// once it has arrived whole, so it can be checked first).
//
// Each blob travels behind a 24-byte frame header (magic "GSAG", sequence,
// tag, the rank whose blob it is, length), checked on arrival: ranks that
// disagree about which all-gather they run fail with an error naming the
// peer. A length above `max_blob_bytes` is refused before anything is
// allocated. After any error the transport is aborted and this object
// refuses further work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

class RingAllGather {
 public:
  // `transport` must outlive this object.
  explicit RingAllGather(PeerTransport* transport) : transport_(transport) {}

  static constexpr int64_t kHeaderBytes = 24;

  // Every rank calls Run with its own blob, the same tag and the same
  // `max_blob_bytes`, in the same order (relative to the transport's other
  // users too). Returns the N blobs in rank order (this rank's is `own`).
  absl::StatusOr<std::vector<std::string>> Run(std::string own, uint32_t tag,
                                               int64_t max_blob_bytes);

  // Blob bytes moved so far (frame headers excluded), for StepStats.
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }

 private:
  // One step: send `out` (rank `out_rank`'s blob) to the right while
  // receiving rank `in_rank`'s blob from the left into `in`.
  absl::Status Step(const std::string& out, int out_rank, int in_rank,
                    uint32_t tag, int64_t max_blob_bytes, std::string* in);
  absl::Status Fail(absl::Status status);

  PeerTransport* transport_;
  uint32_t sequence_ = 0;
  int64_t bytes_sent_ = 0;
  int64_t bytes_received_ = 0;
  absl::Status broken_;
};

}  // namespace gradsync
