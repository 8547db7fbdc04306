#include "core/cluster/local_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::StatusOr<std::string> LocalAddressToward(const std::string& host,
                                               int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  const int error =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(result,
                                                           &freeaddrinfo);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  const bool ok =
      connect(fd, result->ai_addr, result->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  const int saved_errno = errno;
  close(fd);
  if (!ok) {
    return absl::UnavailableError(
        absl::StrCat("no route to ", host, ": ", std::strerror(saved_errno)));
  }
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

}  // namespace gradsync
