// The delay line forwards every byte unchanged, in both directions, and no
// byte arrives before its delay has passed; DelayedRendezvous puts a relay in
// front of every address a peer reads (the ring's and the colocated
// parameter servers'), but not in front of a process's own.
#include "bench/delay_line.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/in_memory_rendezvous.h"
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

TEST(DelayedRendezvous, RelaysPeersAddressesButNotOwnOnes) {
  auto job = std::make_shared<InMemoryJob>(/*num_workers=*/2,
                                           /*num_servers=*/0);
  InMemoryRendezvous inner0(job, Role::kWorker, 0);
  InMemoryRendezvous inner1(job, Role::kWorker, 1);
  DelayedRendezvous rank0(&inner0, "127.0.0.1", absl::Milliseconds(1));
  DelayedRendezvous rank1(&inner1, "127.0.0.1", absl::Milliseconds(1));
  int port = 0;
  const int server = ListenOnLoopback(&port);
  const std::string real = absl::StrCat("127.0.0.1:", port);
  const absl::Duration timeout = absl::Seconds(10);
  // The ring transport's keys and a colocated server's (under the prefix
  // the benchmark gives each size), and one that is not an address.
  for (const std::string key :
       {"bench-ring/addr/0", "bench-ring/peer/0", "ps/colocated/0",
        "bench-ps/4096/ps/colocated/0"}) {
    ASSERT_TRUE(rank0.Set(key, real).ok()) << key;
    auto published = inner0.Get(key, timeout);
    ASSERT_TRUE(published.ok()) << key;
    EXPECT_NE(*published, real) << key;
    auto seen_by_peer = rank1.Get(key, timeout);
    ASSERT_TRUE(seen_by_peer.ok()) << key;
    EXPECT_EQ(*seen_by_peer, *published) << key;
    auto seen_by_self = rank0.Get(key, timeout);
    ASSERT_TRUE(seen_by_self.ok()) << key;
    EXPECT_EQ(*seen_by_self, real) << key;
  }
  ASSERT_TRUE(rank0.Set("checksum/0", "1234").ok());
  EXPECT_EQ(*rank1.Get("checksum/0", timeout), "1234");

  // The peer's connection to the published colocated-server address reaches
  // the server through a relay.
  const int client = Dial(*rank1.Get("ps/colocated/0", timeout));
  const int accepted = accept(server, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  ASSERT_EQ(write(client, "ping", 4), 4);
  EXPECT_EQ(ReadExactly(accepted, 4), "ping");
  close(client);
  close(accepted);
  close(server);
}

}  // namespace
}  // namespace gradsync
