// The ring's connection handshake. The connecting rank sends a hello (magic,
// job id, its rank, the rank it means to reach, the ring's size, its own
// listening address); the
// accepting rank answers with accept or refuse-and-why. A stranger (another
// job, a port scanner, a rank of a different ring) is thus turned away with a
// reason on both sides instead of corrupting a gradient stream.
//
// The messages are tiny and sent once per connection, so they use a fixed
// little-endian layout rather than protobuf.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/tcp_connection.h"

namespace gradsync {

struct RingHello {
  int32_t sender_rank = -1;
  int32_t receiver_rank = -1;
  int32_t world_size = 0;
  std::string job_id;
  // Where the sender listens: names it in the receiver's errors better than
  // the ephemeral port its connection comes from.
  std::string sender_address;
};

absl::Status SendRingHello(TcpConnection& connection, const RingHello& hello,
                           absl::Time deadline);
// InvalidArgument when the bytes are not a hello at all.
absl::StatusOr<RingHello> ReceiveRingHello(TcpConnection& connection,
                                           absl::Time deadline);

// Why `hello` is not from `expected_sender` of this job and ring, or "" if it
// is.
std::string CheckRingHello(const RingHello& hello, const std::string& job_id,
                           int world_size, int my_rank, int expected_sender);

// `refusal` empty accepts; otherwise it is the reason sent to the peer.
absl::Status SendRingAnswer(TcpConnection& connection,
                            const std::string& refusal, absl::Time deadline);
// OK when the peer accepted; FailedPrecondition "<peer> refused our hello:
// <reason>" otherwise.
absl::Status ReceiveRingAnswer(TcpConnection& connection, absl::Time deadline);

}  // namespace gradsync
