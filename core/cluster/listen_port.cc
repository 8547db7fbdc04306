#include "core/cluster/listen_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gradsync {

absl::Status CheckPortFree(const std::string& bind_address) {
  const size_t colon = bind_address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(bind_address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", bind_address, "' is not host:port with a port in 0..65535"));
  }
  if (port == 0) return absl::OkStatus();
  std::string host = bind_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_storage storage = {};
  socklen_t length = 0;
  int family = AF_INET;
  if (host.find(':') != std::string::npos) {
    auto* address = reinterpret_cast<sockaddr_in6*>(&storage);
    address->sin6_family = family = AF_INET6;
    address->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.c_str(), &address->sin6_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", host, "' in ", bind_address, " is not an IPv6 address"));
    }
    length = sizeof(sockaddr_in6);
  } else {
    auto* address = reinterpret_cast<sockaddr_in*>(&storage);
    address->sin_family = AF_INET;
    address->sin_port = htons(static_cast<uint16_t>(port));
    address->sin_addr.s_addr = htonl(INADDR_ANY);
    if (!host.empty() &&
        inet_pton(AF_INET, host.c_str(), &address->sin_addr) != 1) {
      // A host name: every listener of the job binds an address, so this
      // is only a check; the listener itself reports what it cannot bind.
      return absl::OkStatus();
    }
    length = sizeof(sockaddr_in);
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("checking port ", port, ": socket: ", strerror(errno)));
  }
  // Like the listeners: SO_REUSEADDR (a closed connection's TIME_WAIT does
  // not hold the port), never SO_REUSEPORT (a live listener does).
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int bound =
      bind(fd, reinterpret_cast<const sockaddr*>(&storage), length);
  const int error = errno;
  close(fd);
  if (bound == 0) return absl::OkStatus();
  if (error == EADDRINUSE) {
    return absl::UnavailableError(absl::StrCat(
        "port ", port,
        " is in use (by another job?): pick a free port "
        "(MASTER_PORT, or --master_port for gradsync launch; launch picks one "
        "itself when --master_port is not given)"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot bind ", bind_address, ": ", strerror(error)));
}

}  // namespace gradsync
