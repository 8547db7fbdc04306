// The delay line forwards every byte unchanged, in both directions, and no
// byte arrives before its delay has passed.
#include "bench/delay_line.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0);
  EXPECT_EQ(listen(fd, 4), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  *port = ntohs(address.sin_port);
  return fd;
}

int Dial(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(std::stoi(address.substr(colon + 1)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &target.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)),
            0);
  return fd;
}

std::string ReadExactly(int fd, size_t size) {
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = read(fd, out.data() + got, size - got);
    if (n <= 0) break;
    got += n;
  }
  out.resize(got);
  return out;
}

TEST(DelayRelay, ForwardsBothWaysAfterTheDelay) {
  int port = 0;
  const int server = ListenOnLoopback(&port);
  const absl::Duration delay = absl::Milliseconds(30);
  auto relay =
      DelayRelay::Start("127.0.0.1", absl::StrCat("127.0.0.1:", port), delay);
  ASSERT_TRUE(relay.ok()) << relay.status();
  const int client = Dial((*relay)->address());
  const int accepted = accept(server, nullptr, nullptr);
  ASSERT_GE(accepted, 0);

  std::string payload(200000, 'x');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = char(i * 7 % 251);
  const absl::Time sent = absl::Now();
  ASSERT_EQ(write(client, payload.data(), payload.size()),
            static_cast<ssize_t>(payload.size()));
  EXPECT_EQ(ReadExactly(accepted, payload.size()), payload);
  EXPECT_GE(absl::Now() - sent, delay);

  const absl::Time answered = absl::Now();
  ASSERT_EQ(write(accepted, "pong", 4), 4);
  EXPECT_EQ(ReadExactly(client, 4), "pong");
  EXPECT_GE(absl::Now() - answered, delay);

  // One side closing closes the other.
  close(client);
  char byte;
  EXPECT_EQ(read(accepted, &byte, 1), 0);
  close(accepted);
  close(server);
}

}  // namespace
}  // namespace gradsync
