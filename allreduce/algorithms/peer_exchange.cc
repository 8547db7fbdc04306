#include "allreduce/algorithms/peer_exchange.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "allreduce/algorithms/float_sum.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

constexpr char kMagic[4] = {'G', 'S', 'P', 'X'};

}  // namespace

PeerExchange::PeerExchange(PeerTransport* transport, int64_t chunk_bytes,
                           std::string algorithm)
    : transport_(transport),
      chunk_bytes_(std::max<int64_t>(4096, chunk_bytes / 64 * 64)),
      algorithm_(std::move(algorithm)) {}

int PeerExchange::Send(int peer, const float* data, int64_t count,
                       std::vector<int> after, std::vector<int> gates) {
  Transfer transfer;
  transfer.send = true;
  transfer.peer = peer;
  // Never written through: sends only read.
  transfer.data = reinterpret_cast<char*>(const_cast<float*>(data));
  transfer.bytes = count * 4;
  transfer.after = std::move(after);
  transfer.gates = std::move(gates);
  transfers_.push_back(std::move(transfer));
  send_queue_[peer].push_back(static_cast<int>(transfers_.size()) - 1);
  return static_cast<int>(transfers_.size()) - 1;
}

int PeerExchange::Receive(int peer, float* data, int64_t count, bool add) {
  Transfer transfer;
  transfer.peer = peer;
  transfer.data = reinterpret_cast<char*>(data);
  transfer.bytes = count * 4;
  transfer.add = add;
  transfers_.push_back(std::move(transfer));
  recv_queue_[peer].push_back(static_cast<int>(transfers_.size()) - 1);
  return static_cast<int>(transfers_.size()) - 1;
}

TcpConnection& PeerExchange::Connection(int peer) {
  // Algorithms only queue transfers to peers they declared (checked when
  // the strategy sets up), so this is a programming error if it fails.
  TcpConnection* connection = transport_->peer(peer);
  GS_CHECK(connection != nullptr) << algorithm_ << ": rank " << rank()
                                  << " has no connection to rank " << peer;
  return *connection;
}

bool PeerExchange::Cleared(int peer) const {
  const auto it = cleared_.find(peer);
  return it == cleared_.end() || it->second;
}

int64_t PeerExchange::SendAvailable(const Transfer& transfer) const {
  for (int index : transfer.gates) {
    if (transfers_[index].done < transfers_[index].bytes) return 0;
  }
  int64_t available = transfer.bytes;
  if (!Cleared(transfer.peer)) available = std::min(available, eager_bytes_);
  for (int index : transfer.after) {
    available = std::min(available, transfers_[index].done);
  }
  return available;
}

absl::Status PeerExchange::InRound(const absl::Status& status,
                                   const Transfer& transfer,
                                   const RoundLabel& label) const {
  return absl::Status(
      status.code(),
      absl::StrCat(algorithm_, ": ", status.message(), " during ", label.what,
                   " of all-reduce #", label.sequence, " (",
                   transfer.send ? "sending " : "receiving ", transfer.bytes,
                   " bytes)"));
}

absl::Status PeerExchange::SendStep(Transfer& transfer, const RoundLabel& label,
                                    bool* moved) {
  TcpConnection& connection = Connection(transfer.peer);
  if (transfer.header_pos < kHeaderBytes) {
    absl::StatusOr<size_t> sent = connection.SendSome(
        reinterpret_cast<const char*>(&transfer.header) + transfer.header_pos,
        kHeaderBytes - transfer.header_pos);
    if (!sent.ok()) return InRound(sent.status(), transfer, label);
    if (*sent == 0) return absl::OkStatus();
    *moved = true;
    transfer.header_pos += *sent;
    if (transfer.header_pos < kHeaderBytes) return absl::OkStatus();
  }
  const int64_t available = SendAvailable(transfer) - transfer.pos;
  if (available <= 0) return absl::OkStatus();
  absl::StatusOr<size_t> sent = connection.SendSome(
      transfer.data + transfer.pos,
      static_cast<size_t>(std::min(available, chunk_bytes_)));
  if (!sent.ok()) return InRound(sent.status(), transfer, label);
  if (*sent == 0) return absl::OkStatus();
  *moved = true;
  transfer.pos += *sent;
  transfer.done = transfer.pos;
  bytes_sent_ += *sent;
  return absl::OkStatus();
}

absl::Status PeerExchange::CheckHeader(const Transfer& transfer,
                                       const RoundLabel& label) const {
  const Header& got = transfer.header;
  const std::string& peer = transport_->peer(transfer.peer)->peer_name();
  if (std::memcmp(got.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(
        algorithm_, ": ", peer, " sent bytes that are not a transfer header ",
        "during ", label.what, " of all-reduce #", label.sequence,
        " (the streams are out of step)"));
  }
  if (got.sequence != label.sequence || got.tag != label.tag ||
      got.round != label.round ||
      got.bytes != static_cast<uint64_t>(transfer.bytes)) {
    return absl::FailedPreconditionError(absl::StrCat(
        algorithm_, ": ", peer, " sent round ", got.round, " of all-reduce #",
        got.sequence, " (tag ", got.tag, ", ", got.bytes, " bytes) while rank ",
        rank(), " expected round ", label.round, " (", label.what,
        ") of all-reduce #", label.sequence, " (tag ", label.tag, ", ",
        transfer.bytes,
        " bytes); every rank must reduce the same buffers in the same order"));
  }
  return absl::OkStatus();
}

absl::Status PeerExchange::RecvStep(Transfer& transfer, const RoundLabel& label,
                                    bool* moved) {
  TcpConnection& connection = Connection(transfer.peer);
  if (transfer.header_pos < kHeaderBytes) {
    absl::StatusOr<size_t> received = connection.RecvSome(
        reinterpret_cast<char*>(&transfer.header) + transfer.header_pos,
        kHeaderBytes - transfer.header_pos);
    if (!received.ok()) return InRound(received.status(), transfer, label);
    if (*received == 0) return absl::OkStatus();
    *moved = true;
    transfer.header_pos += *received;
    if (transfer.header_pos < kHeaderBytes) return absl::OkStatus();
    RETURN_IF_ERROR(CheckHeader(transfer, label));
    // The peer is in this round: its link is clear for the rest of ours.
    cleared_[transfer.peer] = true;
  }
  const int64_t left = transfer.bytes - transfer.pos;
  if (left == 0) return absl::OkStatus();
  if (!transfer.add) {
    absl::StatusOr<size_t> received =
        connection.RecvSome(transfer.data + transfer.pos,
                            static_cast<size_t>(std::min(left, chunk_bytes_)));
    if (!received.ok()) return InRound(received.status(), transfer, label);
    if (*received == 0) return absl::OkStatus();
    *moved = true;
    transfer.pos += *received;
    // A float counts as landed once all four of its bytes have.
    transfer.done = transfer.pos / 4 * 4;
    bytes_received_ += *received;
    return absl::OkStatus();
  }
  std::vector<char>& staging = staging_[transfer.peer];
  if (staging.empty()) staging.resize(chunk_bytes_);
  const int64_t room = std::min(chunk_bytes_ - transfer.staged, left);
  absl::StatusOr<size_t> received = connection.RecvSome(
      staging.data() + transfer.staged, static_cast<size_t>(room));
  if (!received.ok()) return InRound(received.status(), transfer, label);
  if (*received == 0) return absl::OkStatus();
  *moved = true;
  transfer.staged += *received;
  transfer.pos += *received;
  bytes_received_ += *received;
  const int64_t whole = transfer.staged / 4 * 4;
  if (whole > transfer.reduced) {
    AddInto(reinterpret_cast<float*>(transfer.data + transfer.staging_start +
                                     transfer.reduced),
            reinterpret_cast<const float*>(staging.data() + transfer.reduced),
            (whole - transfer.reduced) / 4);
    transfer.reduced = whole;
    transfer.done = transfer.staging_start + whole;
  }
  // A full chunk and a finished transfer both end on a whole float.
  if (transfer.staged == chunk_bytes_ || transfer.pos == transfer.bytes) {
    transfer.staging_start += transfer.staged;
    transfer.staged = 0;
    transfer.reduced = 0;
  }
  return absl::OkStatus();
}

absl::Status PeerExchange::Stalled(const RoundLabel& label) const {
  std::string message =
      absl::StrCat(algorithm_, ": rank ", rank(), " made no progress for ",
                   absl::FormatDuration(transport_->timeout()), " during ",
                   label.what, " of all-reduce #", label.sequence, ":");
  for (const auto& [peer, queue] : recv_queue_) {
    if (queue.empty()) continue;
    const Transfer& transfer = transfers_[queue.front()];
    absl::StrAppend(&message, " no data from ",
                    transport_->peer(peer)->peer_name(), " (", transfer.pos,
                    " of ", transfer.bytes, " bytes received);");
  }
  for (const auto& [peer, queue] : send_queue_) {
    if (queue.empty()) continue;
    const Transfer& transfer = transfers_[queue.front()];
    if (SendAvailable(transfer) > transfer.pos) {
      absl::StrAppend(&message, " ", transport_->peer(peer)->peer_name(),
                      " took no data (", transfer.pos, " of ", transfer.bytes,
                      " bytes sent);");
    }
  }
  message.pop_back();
  return absl::DeadlineExceededError(message);
}

absl::Status PeerExchange::Run(const RoundLabel& label) {
  for (Transfer& transfer : transfers_) {
    transfer.header = Header{{kMagic[0], kMagic[1], kMagic[2], kMagic[3]},
                             label.sequence,
                             label.tag,
                             label.round,
                             static_cast<uint64_t>(transfer.bytes)};
    if (!transfer.send) std::memset(&transfer.header, 0, kHeaderBytes);
  }
  // Sends to a peer that sends to us this round wait for its clear to send
  // beyond the eager prefix; sends to a peer that only receives never wait,
  // nor do sends to the one peer this all-reduce's previous round had.
  std::set<int> peers;
  for (const auto& [peer, queue] : send_queue_) peers.insert(peer);
  for (const auto& [peer, queue] : recv_queue_) peers.insert(peer);
  const bool same_partner = has_last_ && last_sequence_ == label.sequence &&
                            last_peers_.size() == 1 && peers == last_peers_;
  cleared_.clear();
  if (eager_bytes_ > 0 && !same_partner) {
    for (const auto& [peer, queue] : send_queue_) {
      if (recv_queue_.count(peer) > 0) cleared_[peer] = false;
    }
  }
  auto finished = [this](const Transfer& transfer) {
    return transfer.header_pos == kHeaderBytes &&
           transfer.pos == transfer.bytes;
  };
  auto pop_finished = [&](std::map<int, std::vector<int>>& queues) {
    bool any = false;
    for (auto& [peer, queue] : queues) {
      while (!queue.empty() && finished(transfers_[queue.front()])) {
        queue.erase(queue.begin());
      }
      any = any || !queue.empty();
    }
    return any;
  };
  const absl::Duration timeout = transport_->timeout();
  absl::Time last_progress = absl::Now();
  absl::Status status;
  std::vector<pollfd> entries;
  std::vector<int> entry_peer;
  while (true) {
    const bool sending = pop_finished(send_queue_);
    const bool receiving = pop_finished(recv_queue_);
    if (!sending && !receiving) break;
    bool moved = false;
    for (auto& [peer, queue] : send_queue_) {
      if (queue.empty()) continue;
      status = SendStep(transfers_[queue.front()], label, &moved);
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
    for (auto& [peer, queue] : recv_queue_) {
      if (queue.empty()) continue;
      status = RecvStep(transfers_[queue.front()], label, &moved);
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
    if (moved) {
      last_progress = absl::Now();
      continue;
    }
    // Nothing moved: sleep until a connection can. A peer we only send to
    // is watched for hang-up (POLLRDHUP) without reading its stream, whose
    // next bytes may belong to a later round.
    entries.clear();
    entry_peer.clear();
    std::map<int, short> events;
    for (auto& [peer, queue] : send_queue_) {
      if (queue.empty()) continue;
      const Transfer& transfer = transfers_[queue.front()];
      events[peer] |= POLLRDHUP;
      if (transfer.header_pos < kHeaderBytes ||
          SendAvailable(transfer) > transfer.pos) {
        events[peer] |= POLLOUT;
      }
    }
    for (auto& [peer, queue] : recv_queue_) {
      if (!queue.empty()) events[peer] |= POLLIN | POLLRDHUP;
    }
    for (const auto& [peer, wanted] : events) {
      entries.push_back(pollfd{Connection(peer).fd(), wanted, 0});
      entry_peer.push_back(peer);
    }
    const absl::Time deadline = last_progress + timeout;
    const int ready =
        poll(entries.data(), entries.size(), PollTimeoutMs(deadline));
    if (ready < 0 && errno != EINTR) {
      status = absl::InternalError(
          absl::StrCat(algorithm_, ": poll: ", std::strerror(errno)));
      break;
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const int peer = entry_peer[i];
      const bool receiving_from = !recv_queue_[peer].empty();
      // Hang-up with data still to read from this peer: the receive reports
      // it (after the data). Otherwise report it here.
      if (!receiving_from &&
          (entries[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        const Transfer& transfer = transfers_[send_queue_[peer].front()];
        status = InRound(
            absl::UnavailableError(absl::StrCat(Connection(peer).peer_name(),
                                                " closed the connection")),
            transfer, label);
        break;
      }
    }
    if (!status.ok()) break;
    if (ready == 0 && absl::Now() >= deadline) {
      status = Stalled(label);
      break;
    }
  }
  transfers_.clear();
  send_queue_.clear();
  recv_queue_.clear();
  cleared_.clear();
  has_last_ = status.ok();
  last_peers_ = std::move(peers);
  last_sequence_ = label.sequence;
  return status;
}

}  // namespace gradsync
