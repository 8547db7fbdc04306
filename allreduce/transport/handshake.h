// The ring's connection handshake. The connecting rank sends a hello (magic,
// job id, its rank, the rank it means to reach, the ring's size, its own
// listening address, the job token); the accepting rank answers with accept
// or refuse-and-why. A stranger (another job, a port scanner, a rank of a
// different ring, a process without the job's token) is thus turned away with
// a reason on both sides instead of corrupting a gradient stream.
//
// The messages are tiny and sent once per connection, so they use a fixed
// little-endian layout rather than protobuf:
//   hello:  "GSRING\0\2", u32 sender, u32 receiver, u32 world size,
//           u32 n + job id, u32 n + sender address, u32 n + job token
//   answer: "GSRACK\0\1", u32 accepted (1) or not (0), u32 n + reason
// Every length is checked against a small limit before anything is read or
// allocated, so a hostile peer cannot make us wait for or hold gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/transport/tcp_connection.h"

namespace gradsync {

struct PeerHello {
  int32_t sender_rank = -1;
  int32_t receiver_rank = -1;
  int32_t world_size = 0;
  std::string job_id;
  // Where the sender listens: names it in the receiver's errors better than
  // the ephemeral port its connection comes from.
  std::string sender_address;
  // The job token (core/cluster/job_token.h); empty when the job has none.
  std::string job_token;
};

// Longest job id, address, token or refusal reason a message may carry.
inline constexpr uint32_t kMaxHelloTextBytes = 4096;

// Fills exactly `size` bytes at `data`, or fails (end of stream, deadline).
using ReadExactly = std::function<absl::Status(void* data, size_t size)>;

// The wire form of each message, and its parser over any byte source (the
// connection, or a buffer in tests and the fuzzer). ReadPeerHello fails with
// InvalidArgument when the bytes are not a well-formed hello, or with the
// reader's error; ReadPeerAnswer returns OK for an acceptance,
// FailedPrecondition "<peer_name> refused our hello: <reason>" for a refusal
// and FailedPrecondition for garbage.
std::string EncodePeerHello(const PeerHello& hello);
absl::StatusOr<PeerHello> ReadPeerHello(const ReadExactly& read);
std::string EncodePeerAnswer(const std::string& refusal);
absl::Status ReadPeerAnswer(const ReadExactly& read,
                            const std::string& peer_name);

absl::Status SendPeerHello(TcpConnection& connection, const PeerHello& hello,
                           absl::Time deadline);
// InvalidArgument when the bytes are not a hello at all.
absl::StatusOr<PeerHello> ReceivePeerHello(TcpConnection& connection,
                                           absl::Time deadline);

// Why `hello` is not from `expected_sender` of this job and ring, or "" if it
// is. The token is checked first, in constant time, and a refusal for it
// says nothing about the rest of the hello (nor about the token).
std::string CheckPeerHello(const PeerHello& hello, const std::string& job_id,
                           const std::string& job_token, int world_size,
                           int my_rank, int expected_sender);

// `refusal` empty accepts; otherwise it is the reason sent to the peer.
absl::Status SendPeerAnswer(TcpConnection& connection,
                            const std::string& refusal, absl::Time deadline);
// OK when the peer accepted; FailedPrecondition "<peer> refused our hello:
// <reason>" otherwise.
absl::Status ReceivePeerAnswer(TcpConnection& connection, absl::Time deadline);

}  // namespace gradsync
