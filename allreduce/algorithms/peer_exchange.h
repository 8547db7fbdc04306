// One round of concurrent transfers between this rank and its peers over the
// peer transport's connections (transport/peer_transport.h): the step engine of
// the all-reduce family (halving_doubling_allreduce.h, tree_allreduce.h,
// hierarchical_allreduce.h), as the pipelined loop in ring_allreduce.cc is the
// ring's.
//
// An algorithm describes a round as sends (a float range to a peer) and
// receives (a float range from a peer, either added into the destination or
// landed in place), then calls Run. One thread drives every connection of the
// round with poll(): sends and receives to different peers overlap, and a
// receive that adds goes through a chunk-sized staging buffer reduced while
// the kernel takes in the next chunk. A send may wait on receives (`after`):
// it then only sends the prefix that all of them have finished, which is how
// a tree forwards a chunk up as soon as both children's chunks are summed.
// It may also wait for receives to finish altogether before its first byte
// (`gates`): how a tree keeps a subtree from running ahead of the sums the
// root sends back (tree_allreduce.h).
// Transfers to the same peer in the same direction go in the order they were
// added; both ends add them in the same order, so the byte streams agree.
//
// Each transfer starts with a 24-byte header (sequence, tag, round, bytes) in
// the same stream, costing no round trip, so two ranks that disagree about
// which buffer or which step they are in fail with a clear error instead of
// mixing gradients. A round that makes no progress for the transport's timeout
// fails naming the peers it waits on and what for.
//
// Clear to send. A send to a peer that also sends to this rank in the same
// round moves at most `eager_bytes` of payload until that peer's header for
// the round has arrived. The peer sends its header when it enters the round,
// that is after it has received everything of its previous round, so the
// rest of a large transfer never shares the peer's incoming link with the
// tail of its previous partner's: without this, a rank that finishes a
// halving-doubling step early starts its next step into a link still full of
// another's, and on a shallow switch queue both flows lose packets (incast;
// docs/results/allreduce_family.md, "Notes from the code"). The header
// costs no message of its own, and the eager prefix covers the header's
// flight wherever the link's one-way bandwidth-delay product is below it, so
// transfers within the prefix (the latency-bound buffers) never wait. MPI's
// rendezvous protocol above its eager limit, without the extra round trip.
// A round with the same single peer as the previous round of the same
// all-reduce does not wait: that peer's link carries only this rank's flow
// (halving-doubling's last reduce-scatter and first all-gather step, and
// N = 2).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/transport/peer_transport.h"

namespace gradsync {

// Which round of which all-reduce, for the headers and for errors.
struct RoundLabel {
  uint32_t sequence = 0;  // the all-reduce's number on this rank
  uint32_t tag = 0;       // the caller's (a bucket index)
  uint32_t round = 0;     // the round within the all-reduce
  std::string what;       // "reduce-scatter step 2 of 3"
};

class PeerExchange {
 public:
  // `transport` must outlive this object; `algorithm` starts every error
  // ("halving_doubling"). `chunk_bytes` is the most one call moves and the
  // staging size per adding receive (rounded to 64 bytes, at least 4 KiB).
  PeerExchange(PeerTransport* transport, int64_t chunk_bytes,
               std::string algorithm);

  static constexpr int64_t kHeaderBytes = 24;
  // The eager prefix of a send (above): 256 KiB covers a header's one-way
  // flight on a 1 Gbit/s link up to 2 ms, on 10 Gbit/s up to 0.2 ms, and is
  // a quarter of the emulated switch's queue (core/launch/netem.cc).
  static constexpr int64_t kDefaultEagerBytes = 256 << 10;

  // At most `bytes` of a send before the receiving peer's clear to send
  // (above); 0: sends never wait for one. Between rounds only.
  void set_eager_bytes(int64_t bytes) { eager_bytes_ = bytes; }
  int64_t eager_bytes() const { return eager_bytes_; }

  // Queues a send of `count` floats at `data` to `peer`. With `after`
  // (indices returned by Receive in this round) only the prefix every one of
  // them has finished is sent; they must cover the same floats. With `gates`
  // (also Receive indices, any floats) nothing past the header is sent until
  // every one of them has finished.
  int Send(int peer, const float* data, int64_t count,
           std::vector<int> after = {}, std::vector<int> gates = {});
  // Queues a receive of `count` floats from `peer` into `data`, added to what
  // is there (`add`) or replacing it.
  int Receive(int peer, float* data, int64_t count, bool add);
  // Moves everything queued, then forgets it.
  absl::Status Run(const RoundLabel& label);

  int rank() const { return transport_->rank(); }
  int world_size() const { return transport_->world_size(); }
  int64_t chunk_bytes() const { return chunk_bytes_; }
  // Payload bytes (headers excluded), for StepStats.
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }

 private:
  struct Header {
    char magic[4];
    uint32_t sequence;
    uint32_t tag;
    uint32_t round;
    uint64_t bytes;
  };
  static_assert(sizeof(Header) == kHeaderBytes, "24 bytes on the wire");

  struct Transfer {
    bool send = false;
    int peer = -1;
    char* data = nullptr;
    int64_t bytes = 0;
    bool add = false;
    std::vector<int> after;
    std::vector<int> gates;
    Header header;
    int64_t header_pos = 0;  // header bytes moved
    int64_t pos = 0;         // payload bytes moved
    int64_t done = 0;        // payload bytes final (reduced or landed)
    int64_t staging_start = 0;
    int64_t staged = 0;
    int64_t reduced = 0;
  };

  int64_t SendAvailable(const Transfer& transfer) const;
  bool Cleared(int peer) const;
  absl::Status SendStep(Transfer& transfer, const RoundLabel& label,
                        bool* moved);
  absl::Status RecvStep(Transfer& transfer, const RoundLabel& label,
                        bool* moved);
  absl::Status CheckHeader(const Transfer& transfer,
                           const RoundLabel& label) const;
  absl::Status InRound(const absl::Status& status, const Transfer& transfer,
                       const RoundLabel& label) const;
  absl::Status Stalled(const RoundLabel& label) const;
  TcpConnection& Connection(int peer);

  PeerTransport* transport_;
  int64_t chunk_bytes_;
  std::string algorithm_;
  std::vector<Transfer> transfers_;
  // Per peer, the transfers not yet finished, in the order they were queued.
  std::map<int, std::vector<int>> send_queue_;
  std::map<int, std::vector<int>> recv_queue_;
  std::map<int, std::vector<char>> staging_;  // per peer: one chunk
  int64_t eager_bytes_ = kDefaultEagerBytes;
  // Per peer this round sends to and receives from: whether the peer's
  // first header of the round has arrived (its clear to send).
  std::map<int, bool> cleared_;
  // The previous round's peers and all-reduce, when it succeeded.
  std::set<int> last_peers_;
  uint32_t last_sequence_ = 0;
  bool has_last_ = false;
  int64_t bytes_sent_ = 0;
  int64_t bytes_received_ = 0;
};

}  // namespace gradsync
