#include "allreduce/transport/tcp_listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "allreduce/transport/socket_address.h"
#include "core/base/status_macros.h"

namespace gradsync {

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(
    const std::string& host) {
  const std::string bind_text = host.find(':') != std::string::npos
                                    ? absl::StrCat("[", host, "]:0")
                                    : absl::StrCat(host, ":0");
  ASSIGN_OR_RETURN(SocketAddress bind_address, ResolveSocketAddress(bind_text));
  std::unique_ptr<TcpListener> listener(new TcpListener());
  listener->fd_ = socket(bind_address.storage.ss_family,
                         SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener->fd_ < 0) {
    return absl::InternalError(absl::StrCat(
        "listening on ", host, ": socket: ", std::strerror(errno)));
  }
  if (bind(listener->fd_,
           reinterpret_cast<const sockaddr*>(&bind_address.storage),
           bind_address.length) != 0) {
    return absl::UnavailableError(
        absl::StrCat("binding ", bind_text, ": ", std::strerror(errno)));
  }
  // The backlog only has to hold the left neighbour (and the odd stranger we
  // refuse); connect() then completes even before we call accept().
  if (listen(listener->fd_, 16) != 0) {
    return absl::UnavailableError(
        absl::StrCat("listening on ", bind_text, ": ", std::strerror(errno)));
  }
  SocketAddress bound;
  bound.length = sizeof(bound.storage);
  if (getsockname(listener->fd_, reinterpret_cast<sockaddr*>(&bound.storage),
                  &bound.length) != 0) {
    return absl::InternalError(
        absl::StrCat("getsockname on ", bind_text, ": ", std::strerror(errno)));
  }
  listener->port_ =
      bound.storage.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound.storage)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound.storage)->sin_port);
  listener->address_ = host.find(':') != std::string::npos
                           ? absl::StrCat("[", host, "]:", listener->port_)
                           : absl::StrCat(host, ":", listener->port_);
  return listener;
}

TcpListener::~TcpListener() { Close(); }

void TcpListener::Close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

absl::StatusOr<std::unique_ptr<TcpConnection>> TcpListener::Accept(
    PeerSide side, absl::Time deadline) {
  while (true) {
    SocketAddress peer;
    peer.length = sizeof(peer.storage);
    const int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&peer.storage),
                           &peer.length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      return std::make_unique<TcpConnection>(fd, side, /*peer_rank=*/-1,
                                             FormatSocketAddress(peer));
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::InternalError(
          absl::StrCat("accept on ", address_, ": ", std::strerror(errno)));
    }
    ASSIGN_OR_RETURN(short revents, PollOne(fd_, POLLIN, deadline));
    if (revents == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "nobody connected to ", address_, " before the deadline"));
    }
  }
}

}  // namespace gradsync
