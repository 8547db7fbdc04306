// Socket addresses as the ring publishes them: "host:port" strings, with IPv6
// literals in brackets ("[::1]:40211"), resolved with getaddrinfo.
#pragma once

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"

namespace gradsync {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

// Splits "host:port" (or "[v6]:port") into its parts; the port must be 0-65535.
absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port);

// Resolves "host:port" to the first stream-socket address getaddrinfo gives.
absl::StatusOr<SocketAddress> ResolveSocketAddress(const std::string& address);

// "127.0.0.1:40211" or "[::1]:40211" for a numeric address.
std::string FormatSocketAddress(const SocketAddress& address);

}  // namespace gradsync
