#include "allreduce/transport/tcp_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "allreduce/transport/socket_address.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

std::string NamePeer(PeerSide side, int rank, const std::string& address) {
  const char* what = side == PeerSide::kLeft    ? "left neighbour"
                     : side == PeerSide::kRight ? "right neighbour"
                                                : "peer";
  if (rank < 0) return absl::StrCat(what, " (", address, ")");
  return absl::StrCat(what, " rank ", rank, " (", address, ")");
}

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return absl::InternalError(
        absl::StrCat("fcntl(O_NONBLOCK): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int GetIntOption(int fd, int level, int name) {
  int value = 0;
  socklen_t length = sizeof(value);
  if (getsockopt(fd, level, name, &value, &length) != 0) return -1;
  return value;
}

}  // namespace

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      absl::ToInt64Milliseconds(left + absl::Milliseconds(1)));
}

absl::StatusOr<short> PollOne(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, PollTimeoutMs(deadline));
    if (ready > 0) return entry.revents;
    if (ready == 0) {
      if (absl::Now() >= deadline) return 0;
      continue;  // woke up a hair early: poll rounds to milliseconds
    }
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
  }
}

TcpConnection::TcpConnection(int fd, PeerSide side, int peer_rank,
                             std::string peer_address)
    : fd_(fd),
      side_(side),
      peer_rank_(peer_rank),
      peer_address_(std::move(peer_address)),
      peer_name_(NamePeer(side, peer_rank, peer_address_)) {
  // Failures here only cost speed, never correctness, so they are not errors.
  (void)SetNonBlocking(fd_);
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpConnection::~TcpConnection() { Close(); }

void TcpConnection::Close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void TcpConnection::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void TcpConnection::set_peer(int rank, const std::string& address) {
  peer_rank_ = rank;
  peer_address_ = address;
  peer_name_ = NamePeer(side_, rank, peer_address_);
}

absl::StatusOr<std::unique_ptr<TcpConnection>> TcpConnection::Connect(
    const std::string& address, PeerSide side, int peer_rank,
    absl::Time deadline) {
  const std::string who = NamePeer(side, peer_rank, address);
  ASSIGN_OR_RETURN(SocketAddress target, ResolveSocketAddress(address));
  const int fd = socket(target.storage.ss_family,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(
        "connecting to ", who, ": socket: ", std::strerror(errno)));
  }
  // Owned from here on, so every early return closes it.
  auto connection =
      std::make_unique<TcpConnection>(fd, side, peer_rank, address);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&target.storage),
              target.length) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", who, ": ", std::strerror(errno)));
    }
    ASSIGN_OR_RETURN(short revents, PollOne(fd, POLLOUT, deadline));
    if (revents == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "connecting to ", who, ": no answer before the deadline"));
    }
    const int error = GetIntOption(fd, SOL_SOCKET, SO_ERROR);
    if (error != 0) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", who, ": ", std::strerror(error)));
    }
  }
  return connection;
}

absl::Status TcpConnection::SetBufferSizes(int bytes) {
  if (bytes <= 0) return absl::OkStatus();
  if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
    return absl::InternalError(
        absl::StrCat("setting ", bytes, "-byte socket buffers for ", peer_name_,
                     ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int TcpConnection::granted_send_buffer_bytes() const {
  return GetIntOption(fd_, SOL_SOCKET, SO_SNDBUF);
}

int TcpConnection::granted_recv_buffer_bytes() const {
  return GetIntOption(fd_, SOL_SOCKET, SO_RCVBUF);
}

absl::StatusOr<size_t> TcpConnection::SendSome(const void* data, size_t size) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("connection to ", peer_name_, " is closed"));
  }
  while (true) {
    // MSG_NOSIGNAL: a peer that died must become an error, not SIGPIPE.
    const ssize_t sent = send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0) return static_cast<size_t>(sent);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::UnavailableError(absl::StrCat(
          peer_name_, " closed the connection (", std::strerror(errno), ")"));
    }
    return absl::UnavailableError(
        absl::StrCat("sending to ", peer_name_, ": ", std::strerror(errno)));
  }
}

absl::StatusOr<size_t> TcpConnection::RecvSome(void* data, size_t size) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("connection to ", peer_name_, " is closed"));
  }
  if (size == 0) return 0;
  while (true) {
    const ssize_t received = recv(fd_, data, size, MSG_DONTWAIT);
    if (received > 0) return static_cast<size_t>(received);
    if (received == 0) {
      return absl::UnavailableError(
          absl::StrCat(peer_name_, " closed the connection"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ECONNRESET) {
      return absl::UnavailableError(absl::StrCat(
          peer_name_, " closed the connection (", std::strerror(errno), ")"));
    }
    return absl::UnavailableError(absl::StrCat("receiving from ", peer_name_,
                                               ": ", std::strerror(errno)));
  }
}

absl::Status TcpConnection::SendAll(const void* data, size_t size,
                                    absl::Time deadline) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ASSIGN_OR_RETURN(size_t sent, SendSome(bytes + done, size - done));
    done += sent;
    if (done == size) break;
    ASSIGN_OR_RETURN(short revents, PollOne(fd_, POLLOUT, deadline));
    if (revents == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(peer_name_, " accepted only ", done, " of ", size,
                       " bytes before the deadline"));
    }
  }
  return absl::OkStatus();
}

absl::Status TcpConnection::RecvAll(void* data, size_t size,
                                    absl::Time deadline) {
  char* bytes = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    ASSIGN_OR_RETURN(size_t received, RecvSome(bytes + done, size - done));
    done += received;
    if (done == size) break;
    ASSIGN_OR_RETURN(short revents, PollOne(fd_, POLLIN, deadline));
    if (revents == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(peer_name_, " sent only ", done, " of ", size,
                       " bytes before the deadline"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gradsync
