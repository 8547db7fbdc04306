// The link probe (see link_probe.h). Between two namespaces the client and
// the server are two threads of this process; each first moves itself into
// its network namespace (setns changes only the calling thread's namespace),
// so no helper process or port forwarding is needed. Between two hosts they
// are two processes (ServeLinkProbe, ProbeRemoteLink) speaking the same
// requests, after a greeting that tells a probe from any other peer.
#include "core/launch/link_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

// What the client asks for; the server answers each request in kind.
enum Mode : int32_t {
  kForward = 0,  // client sends `bytes`, server replies 1 byte
  kReverse = 1,  // server sends `bytes` (client replies nothing)
  kDuplex = 2,   // both send `bytes` at once
  kQuit = 3,
};

struct Request {
  int64_t bytes;
  int32_t mode;
  int32_t padding;
};

// The client's first bytes: a peer that is not a link probe (or another
// version of it) is refused with one clear error instead of misread.
constexpr char kGreeting[8] = {'g', 's', 'p', 'r', 'o', 'b', 'e', '1'};

absl::Status EnterNamespace(const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  const std::string path = absl::StrCat("/var/run/netns/", name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("opening ", path, ": ", std::strerror(errno)));
  }
  const int rc = setns(fd, CLONE_NEWNET);
  const int saved = errno;
  close(fd);
  if (rc != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "entering network namespace ", name, ": ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const char* data, int64_t n) {
  while (n > 0) {
    const ssize_t w =
        send(fd, data, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)),
             MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("send: ", std::strerror(errno)));
    }
    data += w;
    n -= w;
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, int64_t n) {
  while (n > 0) {
    const ssize_t r =
        recv(fd, data, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)), 0);
    if (r == 0) return absl::UnavailableError("peer closed the connection");
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("recv: ", std::strerror(errno)));
    }
    data += r;
    n -= r;
  }
  return absl::OkStatus();
}

// Sends and receives `bytes` at once on `fd` (the sending half on a thread).
absl::Status Duplex(int fd, std::vector<char>& out, std::vector<char>& in,
                    int64_t bytes) {
  absl::Status sent;
  std::thread sender([&] { sent = WriteAll(fd, out.data(), bytes); });
  const absl::Status received = ReadAll(fd, in.data(), bytes);
  sender.join();
  RETURN_IF_ERROR(sent);
  return received;
}

// No Nagle (1-byte messages go at once), and no wait without a deadline: a
// peer that never comes makes accept/recv fail after kTimeout.
constexpr int kTimeoutSeconds = 60;

void SetTimeouts(int fd) {
  timeval timeout{kTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetTimeouts(fd);
}

// Answers one client's requests on the accepted `fd` (owned) until it quits.
absl::Status ServeConnection(int fd, int64_t max_bytes) {
  SetNoDelay(fd);
  char greeting[sizeof(kGreeting)] = {};
  absl::Status status = ReadAll(fd, greeting, sizeof(greeting));
  if (status.ok() && std::memcmp(greeting, kGreeting, sizeof(kGreeting)) != 0) {
    status = absl::InvalidArgumentError(
        "the peer that connected is not a gradsync link probe (or another "
        "version of it): run the same gradsync's `netem probe --peer` there");
  }
  if (!status.ok()) {
    close(fd);
    return status;
  }
  std::vector<char> out(max_bytes, 'x'), in(max_bytes);
  while (status.ok()) {
    Request request{};
    status = ReadAll(fd, reinterpret_cast<char*>(&request), sizeof(request));
    if (!status.ok() || request.mode == kQuit) break;
    if (request.bytes < 1 || request.bytes > max_bytes) {
      status = absl::InvalidArgumentError("bad probe request");
      break;
    }
    const char ack = 'a';
    switch (request.mode) {
      case kForward:
        status = ReadAll(fd, in.data(), request.bytes);
        if (status.ok()) status = WriteAll(fd, &ack, 1);
        break;
      case kReverse:
        status = WriteAll(fd, out.data(), request.bytes);
        break;
      case kDuplex:
        status = Duplex(fd, out, in, request.bytes);
        break;
      default:
        status = absl::InvalidArgumentError("bad probe mode");
    }
  }
  close(fd);
  return status;
}

absl::Status Serve(int listener, int64_t max_bytes) {
  const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0)
    return absl::UnavailableError(
        absl::StrCat("accept: ", std::strerror(errno)));
  return ServeConnection(fd, max_bytes);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Least squares y = a + b·x; returns {a, b}.
std::pair<double, double> Fit(const std::vector<double>& x,
                              const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  }
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return {(sy - b * sx) / n, b};
}

class Client {
 public:
  explicit Client(int fd) : fd_(fd) { SetNoDelay(fd_); }
  ~Client() { close(fd_); }

  absl::Status Greet() { return WriteAll(fd_, kGreeting, sizeof(kGreeting)); }

  // Milliseconds from the request until the exchange is complete here.
  absl::StatusOr<double> Exchange(Mode mode, int64_t bytes) {
    if (static_cast<int64_t>(out_.size()) < bytes)
      out_.assign(bytes, 'y'), in_.resize(bytes);
    const Request request{bytes, mode, 0};
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(WriteAll(fd_, reinterpret_cast<const char*>(&request),
                             sizeof(request)));
    char ack = 0;
    switch (mode) {
      case kForward:
        RETURN_IF_ERROR(WriteAll(fd_, out_.data(), bytes));
        RETURN_IF_ERROR(ReadAll(fd_, &ack, 1));
        break;
      case kReverse:
        RETURN_IF_ERROR(ReadAll(fd_, in_.data(), bytes));
        break;
      case kDuplex:
        RETURN_IF_ERROR(Duplex(fd_, out_, in_, bytes));
        break;
      default:
        return absl::InvalidArgumentError("bad mode");
    }
    return std::chrono::duration<double, std::milli>(Clock::now() - start)
        .count();
  }

  void Quit() {
    const Request request{0, kQuit, 0};
    (void)WriteAll(fd_, reinterpret_cast<const char*>(&request),
                   sizeof(request));
  }

 private:
  int fd_;
  std::vector<char> out_, in_;
};

absl::StatusOr<LinkProbeResult> Measure(Client& client,
                                        const LinkProbeOptions& options) {
  LinkProbeResult result;
  std::vector<double> round_trips;
  for (int i = 0; i < options.small_round_trips; ++i) {
    ASSIGN_OR_RETURN(double ms, client.Exchange(kForward, 1));
    round_trips.push_back(ms);
  }
  result.round_trip_us = 1000 * Median(round_trips);
  result.alpha_us = result.round_trip_us / 2;
  for (int64_t bytes : options.sizes) {
    std::vector<double> f, r;
    for (int i = 0; i < options.repeats; ++i) {
      ASSIGN_OR_RETURN(double ms, client.Exchange(kForward, bytes));
      f.push_back(ms);
      ASSIGN_OR_RETURN(ms, client.Exchange(kReverse, bytes));
      r.push_back(ms);
    }
    result.samples.push_back({bytes, Median(f), Median(r)});
  }
  RETURN_IF_ERROR(FitLinkSamples(&result));
  const int64_t largest =
      *std::max_element(options.sizes.begin(), options.sizes.end());
  std::vector<double> duplex;
  for (int i = 0; i < options.repeats; ++i) {
    ASSIGN_OR_RETURN(double ms, client.Exchange(kDuplex, largest));
    duplex.push_back(ms);
  }
  result.duplex_bytes_per_s = largest / (Median(duplex) / 1000);
  return result;
}

// Greets the server on the connected `fd`, measures, and says goodbye; owns
// `fd`.
absl::StatusOr<LinkProbeResult> MeasureOver(int fd,
                                            const LinkProbeOptions& options) {
  Client client(fd);
  RETURN_IF_ERROR(client.Greet());
  absl::StatusOr<LinkProbeResult> measured = Measure(client, options);
  client.Quit();
  return measured;
}

absl::Status CheckOptions(const LinkProbeOptions& options) {
  if (options.sizes.size() < 2 || options.repeats < 1 ||
      options.small_round_trips < 1 ||
      *std::min_element(options.sizes.begin(), options.sizes.end()) < 1) {
    return absl::InvalidArgumentError(
        "link probe: need two sizes or more (each at least 1 byte), one "
        "repeat and one round trip or more");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FitLinkSamples(LinkProbeResult* result) {
  const std::vector<LinkProbeSample>& samples = result->samples;
  std::vector<double> x, forward, reverse;
  for (const LinkProbeSample& s : samples) {
    x.push_back(static_cast<double>(s.bytes));
    forward.push_back(s.forward_ms / 1000);
    reverse.push_back(s.reverse_ms / 1000);
  }
  const bool distinct =
      !x.empty() && *std::min_element(x.begin(), x.end()) <
                        *std::max_element(x.begin(), x.end());
  if (!distinct) {
    return absl::InvalidArgumentError(
        "link probe: fitting a bandwidth needs samples of two sizes or more");
  }
  const auto [a, b] = Fit(x, forward);
  const double reverse_slope = Fit(x, reverse).second;
  // A slope at or below zero: the larger transfers took no longer than the
  // smaller ones, so the samples hold no bandwidth at all.
  if (!(b > 0) || !(reverse_slope > 0)) {
    std::string read;
    for (const LinkProbeSample& s : samples) {
      absl::StrAppend(&read, read.empty() ? "" : "; ", s.bytes, " B: ",
                      absl::SixDigits(s.forward_ms), " ms forward, ",
                      absl::SixDigits(s.reverse_ms), " ms reverse");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "link probe: the transfer time did not grow with the size (", read,
        "), so these samples give no bandwidth: the link is faster than "
        "these sizes resolve, or the machine was busy; probe again on an "
        "idle machine, or with more --repeats"));
  }
  result->intercept_ms = 1000 * a;
  result->bandwidth_bytes_per_s = 1 / b;
  result->reverse_bandwidth_bytes_per_s = 1 / reverse_slope;
  return absl::OkStatus();
}

std::string LinkProbeResult::ToJson() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const LinkProbeSample& s : samples) {
    rows.push_back({{"bytes", s.bytes},
                    {"forward_ms", s.forward_ms},
                    {"reverse_ms", s.reverse_ms}});
  }
  const nlohmann::json result = {
      {"round_trip_us", round_trip_us},
      {"alpha_us", alpha_us},
      {"bandwidth_bytes_per_s", bandwidth_bytes_per_s},
      {"reverse_bandwidth_bytes_per_s", reverse_bandwidth_bytes_per_s},
      {"intercept_ms", intercept_ms},
      {"duplex_bytes_per_s", duplex_bytes_per_s},
      {"samples", rows},
  };
  return result.dump();
}

absl::StatusOr<LinkProbeResult> ProbeLink(const LinkProbeOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  const int64_t largest =
      *std::max_element(options.sizes.begin(), options.sizes.end());
  std::promise<absl::StatusOr<int>> port_promise;
  std::future<absl::StatusOr<int>> port_future = port_promise.get_future();
  absl::Status server_status;
  std::thread server([&] {
    int listener = -1;
    auto fail = [&](absl::Status status) {
      if (listener >= 0) close(listener);
      port_promise.set_value(status);
    };
    if (absl::Status s = EnterNamespace(options.server_namespace); !s.ok())
      return fail(s);
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, options.server_address.c_str(), &addr.sin_addr) !=
        1) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("link probe: '", options.server_address,
                       "' is not an IPv4 address")));
    }
    socklen_t len = sizeof(addr);
    if (listener < 0 ||
        bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return fail(absl::UnavailableError(
          absl::StrCat("link probe: listening on ", options.server_address,
                       ": ", std::strerror(errno))));
    }
    SetTimeouts(listener);
    port_promise.set_value(static_cast<int>(ntohs(addr.sin_port)));
    server_status = Serve(listener, largest);
    close(listener);
  });

  absl::StatusOr<LinkProbeResult> result =
      absl::UnknownError("link probe did not run");
  std::thread client_thread([&] {
    const absl::StatusOr<int> port = port_future.get();
    if (!port.ok()) {
      result = port.status();
      return;
    }
    if (absl::Status s = EnterNamespace(options.client_namespace); !s.ok()) {
      result = s;  // the server's accept() gives up after its timeout
      return;
    }
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(*port));
    inet_pton(AF_INET, options.server_address.c_str(), &addr.sin_addr);
    if (fd < 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      result = absl::UnavailableError(
          absl::StrCat("link probe: connecting to ", options.server_address,
                       ":", *port, ": ", std::strerror(errno)));
      if (fd >= 0) close(fd);
      return;
    }
    result = MeasureOver(fd, options);
  });
  client_thread.join();
  server.join();
  if (result.ok() && !server_status.ok()) return server_status;
  return result;
}

absl::Status ServeLinkProbe(const LinkProbeServeOptions& options) {
  if (options.max_bytes < 1 || options.wait_for_peer_s < 1) {
    return absl::InvalidArgumentError(
        "link probe: max_bytes and wait_for_peer_s must be positive");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  if (options.port < 0 || options.port > 65535 ||
      inet_pton(AF_INET, options.bind_address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("link probe: cannot listen on '", options.bind_address,
                     ":", options.port, "' (an IPv4 address and a port)"));
  }
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  socklen_t len = sizeof(addr);
  if (listener < 0 ||
      setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const absl::Status status = absl::UnavailableError(absl::StrCat(
        "link probe: listening on ", options.bind_address, ":", options.port,
        ": ", std::strerror(errno),
        " (a port in use? choose another with --listen=PORT)"));
    if (listener >= 0) close(listener);
    return status;
  }
  const int port = ntohs(addr.sin_port);
  // accept() waits for the peer at most this long.
  timeval wait{options.wait_for_peer_s, 0};
  setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  if (options.on_listening) options.on_listening(port);
  const int accepted = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  const int accept_errno = errno;
  close(listener);
  if (accepted < 0) {
    if (accept_errno == EAGAIN || accept_errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError(absl::StrCat(
          "link probe: no peer connected to port ", port, " within ",
          options.wait_for_peer_s, " s (run `netem probe --peer=THIS_HOST:",
          port, "` on the other host)"));
    }
    return absl::UnavailableError(
        absl::StrCat("link probe: accept: ", std::strerror(accept_errno)));
  }
  return ServeConnection(accepted, options.max_bytes);
}

absl::StatusOr<LinkProbeResult> ProbeRemoteLink(
    const std::string& host, int port, const LinkProbeOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("link probe: port ", port, " is not a TCP port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::NotFoundError(absl::StrCat("link probe: cannot resolve '",
                                            host, "': ", gai_strerror(rc)));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) SetTimeouts(fd);  // connect() gives up after the timeout too
  const bool connected =
      fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int connect_errno = errno;
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat(
        "link probe: connecting to ", host, ":", port, ": ",
        std::strerror(connect_errno),
        " (is `netem probe --listen` running there, and the port open?)"));
  }
  return MeasureOver(fd, options);
}

std::string JobLinkSpecFromProbe(const LinkProbeResult& result) {
  double rate = 0;
  for (double measured :
       {result.bandwidth_bytes_per_s, result.reverse_bandwidth_bytes_per_s,
        result.duplex_bytes_per_s}) {
    if (measured > 0 && (rate == 0 || measured < rate)) rate = measured;
  }
  const double mbit = std::max(1.0, std::floor(rate * 8 / 1e6));
  const double latency_us = std::max(1.0, std::round(result.alpha_us));
  return absl::StrFormat("%.0fmbit,%.0fus", mbit, latency_us);
}

}  // namespace gradsync
