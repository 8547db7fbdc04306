// A listening TCP socket on an ephemeral port: how a rank lets its left
// neighbour in. Accept waits with a deadline so that a neighbour that never
// shows up is an error, not a hang.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/transport/tcp_connection.h"

namespace gradsync {

class TcpListener {
 public:
  // Binds `host` (a name or IP literal; the address peers will dial) on a
  // port the kernel picks, and listens.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(
      const std::string& host);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }
  // "host:port" with the host as given to Listen, for publishing to peers.
  const std::string& address() const { return address_; }

  // Waits until `deadline` for one incoming connection and returns it, still
  // anonymous: the caller learns the peer's rank from the handshake.
  absl::StatusOr<std::unique_ptr<TcpConnection>> Accept(PeerSide side,
                                                        absl::Time deadline);
  void Close();

 private:
  TcpListener() = default;
  int fd_ = -1;
  int port_ = 0;
  std::string address_;
};

}  // namespace gradsync
