#include "allreduce/transport/peer_transport.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allreduce/transport/handshake.h"
#include "allreduce/transport/tcp_listener.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// A real neighbour sends its hello right after connect(), so one that says
// nothing for this long is a stranger; we drop it and go on waiting.
constexpr absl::Duration kHelloTimeout = absl::Seconds(10);

// Why waiting for `who` ended without it: the listener's error, with the
// strangers refused meanwhile.
absl::Status NeverConnected(const absl::Status& accept_error,
                            const PeerTransportOptions& options,
                            const std::string& who,
                            const TcpListener& listener,
                            const std::vector<std::string>& refused) {
  std::string detail = absl::StrCat(
      "ring rank ", options.rank, ": ", who, " did not connect to ",
      listener.address(), " within ", absl::FormatDuration(options.timeout));
  if (!refused.empty()) {
    absl::StrAppend(&detail,
                    "; refused meanwhile: ", absl::StrJoin(refused, "; "));
  }
  return absl::Status(accept_error.code(),
                      absl::StrCat(detail, " (", accept_error.message(), ")"));
}

// Accepts connections until the left neighbour's arrives, refusing others.
absl::StatusOr<std::unique_ptr<TcpConnection>> AcceptLeft(
    TcpListener& listener, const PeerTransportOptions& options, int left_rank,
    absl::Time deadline) {
  std::vector<std::string> refused;
  while (true) {
    auto accepted = listener.Accept(PeerSide::kLeft, deadline);
    if (!accepted.ok()) {
      return NeverConnected(accepted.status(), options,
                            absl::StrCat("left neighbour rank ", left_rank),
                            listener, refused);
    }
    std::unique_ptr<TcpConnection> connection = std::move(accepted).value();
    const absl::Time hello_deadline =
        std::min(deadline, absl::Now() + kHelloTimeout);
    absl::StatusOr<PeerHello> hello =
        ReceivePeerHello(*connection, hello_deadline);
    std::string refusal;
    if (!hello.ok()) {
      refusal = std::string(hello.status().message());
    } else {
      refusal = CheckPeerHello(*hello, options.job_id, options.job_token,
                               options.world_size, options.rank, left_rank);
    }
    if (refusal.empty()) {
      if (!hello->sender_address.empty()) {
        connection->set_peer(left_rank, hello->sender_address);
      } else {
        connection->set_peer(left_rank, connection->peer_address());
      }
      RETURN_IF_ERROR(Annotate(SendPeerAnswer(*connection, "", deadline),
                               absl::StrCat("ring rank ", options.rank, ": ",
                                            connection->peer_name())));
      return connection;
    }
    const std::string what = absl::StrCat(
        "connection from ", connection->peer_address(), ": ", refusal);
    GS_LOG(WARNING) << "ring rank " << options.rank << " refused a " << what;
    refused.push_back(what);
    // Best effort: the stranger may already be gone.
    (void)SendPeerAnswer(*connection, refusal,
                         std::min(deadline, absl::Now() + absl::Seconds(1)));
  }
}

// Accepts connections until every rank of `expected` has connected, refusing
// others; returns them by rank.
absl::StatusOr<std::map<int, std::unique_ptr<TcpConnection>>> AcceptPeers(
    TcpListener& listener, const PeerTransportOptions& options,
    std::set<int> expected, absl::Time deadline) {
  std::map<int, std::unique_ptr<TcpConnection>> accepted_peers;
  std::vector<std::string> refused;
  while (!expected.empty()) {
    auto accepted = listener.Accept(PeerSide::kUnknown, deadline);
    if (!accepted.ok()) {
      return NeverConnected(
          accepted.status(), options,
          absl::StrCat("peer rank(s) ", absl::StrJoin(expected, ", ")),
          listener, refused);
    }
    std::unique_ptr<TcpConnection> connection = std::move(accepted).value();
    absl::StatusOr<PeerHello> hello = ReceivePeerHello(
        *connection, std::min(deadline, absl::Now() + kHelloTimeout));
    std::string refusal;
    if (!hello.ok()) {
      refusal = std::string(hello.status().message());
    } else if (expected.count(hello->sender_rank) == 0) {
      refusal =
          absl::StrCat("rank ", hello->sender_rank, " is not a peer that rank ",
                       options.rank, " still waits for (",
                       absl::StrJoin(expected, ", "), ")");
    } else {
      refusal =
          CheckPeerHello(*hello, options.job_id, options.job_token,
                         options.world_size, options.rank, hello->sender_rank);
    }
    if (refusal.empty()) {
      const int peer_rank = hello->sender_rank;
      connection->set_peer(peer_rank, hello->sender_address.empty()
                                          ? connection->peer_address()
                                          : hello->sender_address);
      RETURN_IF_ERROR(Annotate(SendPeerAnswer(*connection, "", deadline),
                               absl::StrCat("ring rank ", options.rank, ": ",
                                            connection->peer_name())));
      expected.erase(peer_rank);
      accepted_peers[peer_rank] = std::move(connection);
      continue;
    }
    const std::string what = absl::StrCat(
        "connection from ", connection->peer_address(), ": ", refusal);
    GS_LOG(WARNING) << "ring rank " << options.rank << " refused a peer "
                    << what;
    refused.push_back(what);
    (void)SendPeerAnswer(*connection, refusal,
                         std::min(deadline, absl::Now() + absl::Seconds(1)));
  }
  return accepted_peers;
}

}  // namespace

absl::Status PeerTransport::ConnectPeers(Rendezvous& rendezvous,
                                         absl::Time deadline) {
  const PeerTransportOptions& options = options_;
  const std::string context = absl::StrCat("ring rank ", options.rank);
  std::set<int> higher;
  std::set<int> lower;
  for (int peer : options.peers) {
    if (peer < 0 || peer >= options.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": peer rank ", peer, " is outside a world of ",
                       options.world_size));
    }
    if (peer > options.rank) higher.insert(peer);
    if (peer < options.rank) lower.insert(peer);
  }
  if (higher.empty() && lower.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> listener,
                   TcpListener::Listen(options.advertise_host));
  RETURN_IF_ERROR(Annotate(
      rendezvous.Set(absl::StrCat(options.key_prefix, "/peer/", options.rank),
                     listener->address()),
      absl::StrCat(context, ": publishing its peer address ",
                   listener->address())));
  // Dial every higher peer first (their backlog completes the connect), then
  // accept the lower ones, then read the higher ones' answers.
  for (int peer : higher) {
    const std::string key = absl::StrCat(options.key_prefix, "/peer/", peer);
    absl::StatusOr<std::string> address = rendezvous.Get(
        key, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (!address.ok()) {
      return Annotate(address.status(),
                      absl::StrCat(context,
                                   ": waiting for the address of peer "
                                   "rank ",
                                   peer, " (", key, ")"));
    }
    absl::StatusOr<std::unique_ptr<TcpConnection>> connection =
        TcpConnection::Connect(*address, PeerSide::kUnknown, peer, deadline);
    if (!connection.ok()) return Annotate(connection.status(), context);
    RETURN_IF_ERROR(Annotate(
        SendPeerHello(
            **connection,
            PeerHello{options.rank, peer, options.world_size, options.job_id,
                      listener->address(), options.job_token},
            deadline),
        context));
    peers_[peer] = std::move(connection).value();
  }
  ASSIGN_OR_RETURN(auto accepted,
                   AcceptPeers(*listener, options, lower, deadline));
  for (auto& [rank, connection] : accepted)
    peers_[rank] = std::move(connection);
  for (int peer : higher) {
    RETURN_IF_ERROR(
        Annotate(ReceivePeerAnswer(*peers_[peer], deadline), context));
  }
  listener->Close();
  for (auto& [rank, connection] : peers_) {
    RETURN_IF_ERROR(connection->SetBufferSizes(options.socket_buffer_bytes));
  }
  GS_LOG(DEBUG) << context << ": connected to " << peers_.size() << " peers";
  return absl::OkStatus();
}

TcpConnection* PeerTransport::peer(int rank) {
  auto found = peers_.find(rank);
  return found == peers_.end() ? nullptr : found->second.get();
}

absl::StatusOr<std::unique_ptr<PeerTransport>> PeerTransport::Create(
    const PeerTransportOptions& options, Rendezvous* rendezvous) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("ring: rank ", options.rank,
                                                   " is outside a world of ",
                                                   options.world_size));
  }
  std::unique_ptr<PeerTransport> transport(new PeerTransport(options));
  if (options.world_size == 1) return transport;
  if (rendezvous == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ring rank ", options.rank, ": a ring of ", options.world_size,
        " ranks needs a rendezvous to exchange addresses"));
  }
  const int n = options.world_size;
  const int right_rank = (options.rank + 1) % n;
  const int left_rank = (options.rank + n - 1) % n;
  const std::string context = absl::StrCat("ring rank ", options.rank);
  const absl::Time deadline = absl::Now() + options.timeout;

  ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> listener,
                   TcpListener::Listen(options.advertise_host));
  RETURN_IF_ERROR(Annotate(
      rendezvous->Set(absl::StrCat(options.key_prefix, "/addr/", options.rank),
                      listener->address()),
      absl::StrCat(context, ": publishing its address ", listener->address())));

  const std::string right_key =
      absl::StrCat(options.key_prefix, "/addr/", right_rank);
  absl::StatusOr<std::string> right_address =
      rendezvous->Get(right_key, options.timeout);
  if (!right_address.ok()) {
    return Annotate(right_address.status(),
                    absl::StrCat(context,
                                 ": waiting for the address of right "
                                 "neighbour rank ",
                                 right_rank, " (", right_key, ")"));
  }

  // Connect first, accept second, on every rank: the kernel completes our
  // connect from the right neighbour's listen backlog, so nobody has to be
  // inside accept() yet, and the ring cannot deadlock.
  absl::StatusOr<std::unique_ptr<TcpConnection>> right = TcpConnection::Connect(
      *right_address, PeerSide::kRight, right_rank, deadline);
  if (!right.ok()) return Annotate(right.status(), context);
  transport->right_ = std::move(right).value();
  RETURN_IF_ERROR(Annotate(
      SendPeerHello(*transport->right_,
                    PeerHello{options.rank, right_rank, n, options.job_id,
                              listener->address(), options.job_token},
                    deadline),
      context));

  ASSIGN_OR_RETURN(transport->left_,
                   AcceptLeft(*listener, options, left_rank, deadline));
  RETURN_IF_ERROR(
      Annotate(ReceivePeerAnswer(*transport->right_, deadline), context));
  // The ring is complete; nobody else may connect.
  listener->Close();

  RETURN_IF_ERROR(
      transport->right_->SetBufferSizes(options.socket_buffer_bytes));
  RETURN_IF_ERROR(
      transport->left_->SetBufferSizes(options.socket_buffer_bytes));
  // Linux doubles the request for its bookkeeping, and caps it at wmem_max.
  if (options.socket_buffer_bytes > 0 &&
      transport->granted_send_buffer_bytes() < options.socket_buffer_bytes) {
    GS_LOG(WARNING) << context << ": asked for " << options.socket_buffer_bytes
                    << "-byte socket buffers, the kernel granted "
                    << transport->granted_send_buffer_bytes()
                    << " (raise net.core.wmem_max/rmem_max)";
  }
  GS_LOG(DEBUG) << context << ": connected to "
                << transport->right_->peer_name() << ", from "
                << transport->left_->peer_name();
  RETURN_IF_ERROR(transport->ConnectPeers(*rendezvous, deadline));
  return transport;
}

PeerTransport::~PeerTransport() { Close(); }

absl::StatusOr<RingIoReadiness> PeerTransport::WaitForIo(bool want_send,
                                                         bool want_recv,
                                                         bool watch_right,
                                                         absl::Time deadline) {
  pollfd entries[2];
  int count = 0;
  int right_index = -1;
  int left_index = -1;
  const short right_events =
      (want_send ? POLLOUT : 0) | (watch_right ? POLLIN : 0);
  if (right_events != 0) {
    right_index = count;
    entries[count++] = pollfd{right_->fd(), right_events, 0};
  }
  if (want_recv) {
    left_index = count;
    entries[count++] = pollfd{left_->fd(), POLLIN, 0};
  }
  RingIoReadiness readiness;
  if (count == 0) return readiness;
  while (true) {
    const int ready = poll(entries, count, PollTimeoutMs(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("ring rank ", rank(), ": poll: ", std::strerror(errno)));
    }
    if (ready == 0 && absl::Now() < deadline) continue;
    break;
  }
  // Errors and hang-ups count as "ready": the next send or receive reports
  // them with the peer's name.
  const short trouble = POLLERR | POLLHUP | POLLNVAL;
  if (right_index >= 0) {
    const short revents = entries[right_index].revents;
    readiness.can_send = want_send && (revents & (POLLOUT | trouble));
    readiness.right_readable = watch_right && (revents & (POLLIN | trouble));
  }
  if (left_index >= 0) {
    readiness.can_recv = entries[left_index].revents & (POLLIN | trouble);
  }
  return readiness;
}

void PeerTransport::Abort() {
  if (left_) left_->Shutdown();
  if (right_) right_->Shutdown();
  // The map itself is only changed during Create, before any other thread
  // can see this object.
  for (auto& [rank, connection] : peers_) connection->Shutdown();
}

void PeerTransport::Close() {
  if (left_) left_->Close();
  if (right_) right_->Close();
  for (auto& [rank, connection] : peers_) connection->Close();
}

int PeerTransport::granted_send_buffer_bytes() const {
  return right_ ? right_->granted_send_buffer_bytes() : 0;
}

int PeerTransport::granted_recv_buffer_bytes() const {
  return left_ ? left_->granted_recv_buffer_bytes() : 0;
}

}  // namespace gradsync
