#include "bench/delay_line.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gradsync {
namespace {

// Bytes one direction may hold in flight: far above any bandwidth-delay
// product here (1 Gbit/s × 5 ms = 625 KB), so the relay never throttles.
constexpr size_t kMaxQueued = 16 << 20;

struct Packet {
  absl::Time release;
  std::string bytes;
  size_t sent = 0;
};

struct Direction {
  int from = -1;
  int to = -1;
  std::deque<Packet> queue;
  size_t queued = 0;
  bool eof = false;   // `from` ended its stream
  bool shut = false;  // ...and everything before the end was delivered
};

struct Pair {
  Direction forward;   // client -> target
  Direction backward;  // target -> client
  bool dead = false;
};

absl::StatusOr<sockaddr_in> Parse(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &in.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("delay line: not an IPv4 host:port: ", address));
  }
  in.sin_port = htons(port);
  return in;
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Reads what `d.from` has; false on error.
bool Pull(Direction& d, absl::Duration one_way) {
  char buffer[65536];
  const ssize_t got = recv(d.from, buffer, sizeof(buffer), 0);
  if (got == 0) {
    d.eof = true;
    return true;
  }
  if (got < 0) return errno == EAGAIN || errno == EINTR;
  d.queue.push_back(Packet{absl::Now() + one_way,
                           std::string(buffer, static_cast<size_t>(got)), 0});
  d.queued += got;
  return true;
}

// Writes every packet whose time has come; false on error.
bool Push(Direction& d) {
  const absl::Time now = absl::Now();
  while (!d.queue.empty() && d.queue.front().release <= now) {
    Packet& packet = d.queue.front();
    const ssize_t put = send(d.to, packet.bytes.data() + packet.sent,
                             packet.bytes.size() - packet.sent, MSG_NOSIGNAL);
    if (put < 0) return errno == EAGAIN || errno == EINTR;
    packet.sent += put;
    d.queued -= put;
    if (packet.sent < packet.bytes.size()) return true;
    d.queue.pop_front();
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DelayRelay>> DelayRelay::Start(
    const std::string& host, const std::string& target,
    absl::Duration one_way) {
  std::unique_ptr<DelayRelay> relay(new DelayRelay());
  relay->target_ = target;
  relay->one_way_ = one_way;
  absl::StatusOr<sockaddr_in> bind_address = Parse(absl::StrCat(host, ":0"));
  if (!bind_address.ok()) return bind_address.status();
  relay->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof(*bind_address);
  if (relay->listen_fd_ < 0 ||
      bind(relay->listen_fd_, reinterpret_cast<sockaddr*>(&*bind_address),
           sizeof(*bind_address)) != 0 ||
      listen(relay->listen_fd_, 64) != 0 ||
      getsockname(relay->listen_fd_,
                  reinterpret_cast<sockaddr*>(&*bind_address), &length) != 0 ||
      pipe2(relay->wake_pipe_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "delay line: listening on ", host, ": ", std::strerror(errno)));
  }
  relay->address_ = absl::StrCat(host, ":", ntohs(bind_address->sin_port));
  relay->thread_ = std::thread([r = relay.get()] { r->Loop(); });
  return relay;
}

DelayRelay::~DelayRelay() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_pipe_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_pipe_[0], wake_pipe_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void DelayRelay::Loop() {
  std::deque<Pair> pairs;
  std::vector<pollfd> entries;
  struct CloseAll {
    std::deque<Pair>& pairs;
    ~CloseAll() {
      for (Pair& pair : pairs) {
        if (pair.dead) continue;
        close(pair.forward.from);
        close(pair.forward.to);
      }
    }
  } close_all{pairs};
  while (true) {
    entries.clear();
    entries.push_back(pollfd{wake_pipe_[0], POLLIN, 0});
    entries.push_back(pollfd{listen_fd_, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (Pair& pair : pairs) {
      if (pair.dead) continue;
      for (Direction* d : {&pair.forward, &pair.backward}) {
        if (!d->eof && d->queued < kMaxQueued) {
          entries.push_back(pollfd{d->from, POLLIN, 0});
        }
        if (!d->queue.empty()) {
          if (d->queue.front().release <= absl::Now()) {
            entries.push_back(pollfd{d->to, POLLOUT, 0});
          } else {
            next = std::min(next, d->queue.front().release);
          }
        }
      }
    }
    // ppoll: poll's millisecond timeout would add up to a millisecond to
    // every hop.
    timespec wait{};
    timespec* timeout = nullptr;
    if (next != absl::InfiniteFuture()) {
      wait =
          absl::ToTimespec(std::max(absl::ZeroDuration(), next - absl::Now()));
      timeout = &wait;
    }
    if (ppoll(entries.data(), entries.size(), timeout, nullptr) < 0 &&
        errno != EINTR) {
      return;
    }
    if (entries[0].revents != 0) return;  // the destructor's wake-up
    if (entries[1].revents & POLLIN) {
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      absl::StatusOr<sockaddr_in> target = Parse(target_);
      const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (client >= 0 && target.ok() && upstream >= 0 &&
          connect(upstream, reinterpret_cast<const sockaddr*>(&*target),
                  sizeof(*target)) == 0) {
        NoDelay(client);
        NoDelay(upstream);
        Pair pair;
        pair.forward.from = client;
        pair.forward.to = upstream;
        pair.backward.from = upstream;
        pair.backward.to = client;
        pairs.push_back(std::move(pair));
      } else {
        if (client >= 0) close(client);
        if (upstream >= 0) close(upstream);
      }
    }
    // Move whatever can move. A side that ends its stream gets the end
    // passed on once the bytes it sent before have been delivered (a rank
    // that finishes and closes must not lose its last bytes in the relay);
    // the pair closes when both directions have ended, or on an error.
    for (Pair& pair : pairs) {
      if (pair.dead) continue;
      bool ok = true;
      for (Direction* d : {&pair.forward, &pair.backward}) {
        if (!d->eof && d->queued < kMaxQueued) ok = ok && Pull(*d, one_way_);
        ok = ok && Push(*d);
        if (ok && d->eof && d->queue.empty() && !d->shut) {
          shutdown(d->to, SHUT_WR);
          d->shut = true;
        }
      }
      if (!ok || (pair.forward.shut && pair.backward.shut)) {
        pair.dead = true;
        close(pair.forward.from);
        close(pair.forward.to);
      }
    }
  }
}

bool DelayedRendezvous::IsDelayedAddressKey(const std::string& key) {
  return absl::StrContains(key, "/addr/") || absl::StrContains(key, "/peer/") ||
         absl::StrContains(key, "ps/colocated/");
}

absl::Status DelayedRendezvous::Set(const std::string& key,
                                    const std::string& value) {
  if (!IsDelayedAddressKey(key)) return inner()->Set(key, value);
  absl::StatusOr<std::unique_ptr<DelayRelay>> relay =
      DelayRelay::Start(host_, value, one_way_);
  if (!relay.ok()) return relay.status();
  const std::string address = (*relay)->address();
  {
    std::lock_guard<std::mutex> lock(mu_);
    relays_.push_back(*std::move(relay));
  }
  return inner()->Set(key, address);
}

absl::StatusOr<std::string> DelayedRendezvous::Get(const std::string& key,
                                                   absl::Duration timeout) {
  absl::StatusOr<std::string> value = inner()->Get(key, timeout);
  if (!value.ok() || !IsDelayedAddressKey(key)) return value;
  // One of this process's own relays: the connection would not cross a
  // link, so it goes straight to the target.
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::unique_ptr<DelayRelay>& relay : relays_) {
    if (relay->address() == *value) return relay->target();
  }
  return value;
}

}  // namespace gradsync
