// One connected, non-blocking TCP socket to a named peer of the ring.
//
// The socket is non-blocking so that a caller can drive two connections (send
// to the right neighbour, receive from the left) from one thread with poll():
// SendSome/RecvSome never wait, SendAll/RecvAll wait with a deadline. Every
// error names the peer ("left neighbour rank 2 (127.0.0.1:40211)") because in a
// ring of N processes "connection reset" alone does not say who went away.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradsync {

// Which way the peer sits in the ring; only used to name it in errors.
enum class PeerSide { kLeft, kRight, kUnknown };

class TcpConnection {
 public:
  // Takes ownership of `fd`, a connected stream socket; makes it non-blocking
  // and sets TCP_NODELAY (a ring step ends with a small tail segment that must
  // not wait for Nagle's timer).
  TcpConnection(int fd, PeerSide side, int peer_rank, std::string peer_address);
  ~TcpConnection();
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  // Opens a connection to `address` ("host:port"), waiting until `deadline`.
  static absl::StatusOr<std::unique_ptr<TcpConnection>> Connect(
      const std::string& address, PeerSide side, int peer_rank,
      absl::Time deadline);

  // Asks the kernel for `bytes` of send and receive buffer (0 leaves the
  // kernel's autotuning alone). Linux caps the request at net.core.wmem_max /
  // rmem_max; the granted sizes are readable with granted_*_buffer_bytes().
  absl::Status SetBufferSizes(int bytes);
  int granted_send_buffer_bytes() const;
  int granted_recv_buffer_bytes() const;

  // Writes up to `size` bytes without waiting; returns how many were taken
  // (0 when the kernel's send buffer is full). A closed or reset peer is an
  // Unavailable error naming it.
  absl::StatusOr<size_t> SendSome(const void* data, size_t size);
  // Reads up to `size` bytes without waiting; 0 means nothing has arrived yet.
  // End of stream is an Unavailable error "... closed the connection".
  absl::StatusOr<size_t> RecvSome(void* data, size_t size);

  // Blocking forms for the handshake; DeadlineExceeded names the peer.
  absl::Status SendAll(const void* data, size_t size, absl::Time deadline);
  absl::Status RecvAll(void* data, size_t size, absl::Time deadline);

  // Shuts the socket down in both directions without releasing it: the peer
  // sees end-of-stream and a thread polling this socket wakes up. Safe to call
  // from another thread while the owner uses the connection.
  void Shutdown();
  // Closes the socket; later calls fail. Safe to call twice, but only from the
  // thread that owns the connection.
  void Close();
  bool closed() const { return fd_ < 0; }

  int fd() const { return fd_; }
  int peer_rank() const { return peer_rank_; }
  const std::string& peer_address() const { return peer_address_; }
  // Names the peer for errors: "left neighbour rank 2 (127.0.0.1:40211)".
  const std::string& peer_name() const { return peer_name_; }
  // Names the peer once a handshake has told us who it is.
  void set_peer(int rank, const std::string& address);

 private:
  int fd_ = -1;
  PeerSide side_;
  int peer_rank_;
  std::string peer_address_;
  std::string peer_name_;
};

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT) or `deadline`
// passes; returns the revents, 0 on timeout. EINTR is retried.
absl::StatusOr<short> PollOne(int fd, short events, absl::Time deadline);

// Milliseconds for poll() until `deadline`, rounded up so that a wait never
// ends before its deadline; -1 for an infinite deadline.
int PollTimeoutMs(absl::Time deadline);

}  // namespace gradsync
