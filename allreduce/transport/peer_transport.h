// The peer transport: this rank's TCP connections to the other ranks of one
// job, set up through the rendezvous (core/cluster/rendezvous.h). Two of them
// always exist, the ring's: to the right neighbour (rank + 1, which we only
// send to) and from the left neighbour (rank - 1, which we only receive
// from). The ring's neighbours are two of its peers; any other ranks an
// algorithm names in `peers` get one two-way connection each.
//
//      left neighbour ──> [ this rank ] ──> right neighbour     (one way each)
//                          ▲    ▲    ▲
//                          ▼    ▼    ▼
//                       peers named in PeerTransportOptions::peers  (two-way)
//
// Set-up, the same on every rank so that nobody waits on somebody who waits on
// them: listen on an ephemeral port, publish "host:port" under
// "<prefix>/addr/<rank>", read the right neighbour's address, connect to it and
// send a hello (handshake.h: magic, job id, sender and receiver rank, world
// size, job token), then accept the left neighbour and check its hello. A
// connection from another job, or from a rank that is not our left neighbour,
// is refused with an answer that says why, and we keep waiting for the real
// one until the deadline.
//
// Once the ring is up, Create connects the peers through a second listener
// ("<prefix>/peer/<rank>"), so a peer's hello can never be mistaken for a ring
// neighbour's. Every rank dials its peers of higher rank and then accepts those
// of lower rank: the dials complete from the listen backlog, so nobody waits on
// somebody who waits on them. Same hello, job token check and deadline as the
// ring's.
//
// Algorithms (allreduce/algorithms/) talk only to this class: SendSome/RecvSome
// on right()/left() or peer(rank), and WaitForIo to sleep until one of the
// ring's connections can move.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/transport/tcp_connection.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

struct PeerTransportOptions {
  int rank = 0;
  int world_size = 1;
  std::string job_id;
  // Required in every neighbour's hello when not empty
  // (core/cluster/job_token.h).
  std::string job_token;
  // The address this rank listens on and publishes (peers dial it).
  std::string advertise_host = "127.0.0.1";
  // Rendezvous keys are "<key_prefix>/addr/<rank>"; two rings in one job
  // (a benchmark, a test) use different prefixes.
  std::string key_prefix = "ring";
  // Every wait during set-up, and every stall of a later transfer.
  absl::Duration timeout = absl::Seconds(60);
  // SO_SNDBUF/SO_RCVBUF per connection; 0 keeps the kernel's autotuning.
  int socket_buffer_bytes = 4 << 20;
  // Ranks besides the ring neighbours that this rank needs a two-way
  // connection to. The relation must be symmetric (q in peers of p exactly
  // when p is in peers of q) or set-up fails at its deadline naming the rank
  // that never called. This rank and duplicates are ignored.
  std::vector<int> peers;
};

// What WaitForIo found.
struct RingIoReadiness {
  bool can_send = false;        // right neighbour's connection has room
  bool can_recv = false;        // left neighbour's connection has data (or EOF)
  bool right_readable = false;  // right neighbour closed (it never sends)
};

class PeerTransport {
 public:
  // Builds the ring as described above. With world_size == 1 there is nothing
  // to connect and `rendezvous` may be null.
  static absl::StatusOr<std::unique_ptr<PeerTransport>> Create(
      const PeerTransportOptions& options, Rendezvous* rendezvous);
  ~PeerTransport();

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  // How long a transfer may stall before it fails (set-up used it too).
  absl::Duration timeout() const { return options_.timeout; }
  void set_timeout(absl::Duration timeout) { options_.timeout = timeout; }
  const PeerTransportOptions& options() const { return options_; }

  // Valid when world_size > 1. With two ranks, left and right are the same
  // process over two connections, one per direction.
  TcpConnection& left() { return *left_; }
  TcpConnection& right() { return *right_; }

  // The two-way connection to `rank`, one of options().peers; null if it is
  // not one.
  TcpConnection* peer(int rank);

  // Sleeps until the right connection can take data (want_send), the left
  // one has data (want_recv), the right one became readable, which only
  // happens when the right neighbour closed it (watch_right), or `deadline`.
  absl::StatusOr<RingIoReadiness> WaitForIo(bool want_send, bool want_recv,
                                            bool watch_right,
                                            absl::Time deadline);

  // Shuts every connection (ring and peers) down so that a thread blocked in
  // WaitForIo wakes up and the neighbours see the ring break at once.
  // Thread-safe (the sockets stay open until Close or destruction, so no
  // descriptor is reused).
  void Abort();
  // Closes every connection (the peers see end-of-stream).
  void Close();

  // The kernel's actual buffer sizes (the request is capped by wmem_max).
  int granted_send_buffer_bytes() const;
  int granted_recv_buffer_bytes() const;

 private:
  explicit PeerTransport(const PeerTransportOptions& options)
      : options_(options) {}
  // Connects options_.peers as described at the top; after the ring.
  absl::Status ConnectPeers(Rendezvous& rendezvous, absl::Time deadline);

  PeerTransportOptions options_;
  std::unique_ptr<TcpConnection> left_;
  std::unique_ptr<TcpConnection> right_;
  std::map<int, std::unique_ptr<TcpConnection>> peers_;
};

}  // namespace gradsync
