#include "allreduce/transport/socket_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gradsync {

absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not host:port"));
  }
  std::string host_part = address.substr(0, colon);
  if (host_part.size() >= 2 && host_part.front() == '[' &&
      host_part.back() == ']') {
    host_part = host_part.substr(1, host_part.size() - 2);
  }
  int port_value = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port_value) ||
      port_value < 0 || port_value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" has no valid port"));
  }
  *host = host_part;
  *port = port_value;
  return absl::OkStatus();
}

absl::StatusOr<SocketAddress> ResolveSocketAddress(const std::string& address) {
  std::string host;
  int port = 0;
  absl::Status split = SplitHostPort(address, &host, &port);
  if (!split.ok()) return split;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  const std::string service = std::to_string(port);
  const int error =
      getaddrinfo(host.c_str(), service.c_str(), &hints, &results);
  if (error != 0 || results == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve \"", host,
                                               "\" of address ", address, ": ",
                                               gai_strerror(error)));
  }
  SocketAddress resolved;
  std::memcpy(&resolved.storage, results->ai_addr, results->ai_addrlen);
  resolved.length = results->ai_addrlen;
  freeaddrinfo(results);
  return resolved;
}

std::string FormatSocketAddress(const SocketAddress& address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address.storage.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", ntohs(v6->sin6_port));
  }
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address.storage);
  inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
  return absl::StrCat(text, ":", ntohs(v4->sin_port));
}

}  // namespace gradsync
