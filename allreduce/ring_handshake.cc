#include "allreduce/ring_handshake.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace gradsync {
namespace {

constexpr char kHelloMagic[8] = {'G', 'S', 'R', 'I', 'N', 'G', 0, 1};
constexpr char kAnswerMagic[8] = {'G', 'S', 'R', 'A', 'C', 'K', 0, 1};
// Job ids and refusal reasons are short; a larger length means garbage.
constexpr uint32_t kMaxTextBytes = 4096;

void PutU32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(value >> (8 * i)));
}

uint32_t GetU32(const unsigned char* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 |
         uint32_t{in[3]} << 24;
}

}  // namespace

absl::Status SendRingHello(TcpConnection& connection, const RingHello& hello,
                           absl::Time deadline) {
  std::string out(kHelloMagic, sizeof(kHelloMagic));
  PutU32(out, static_cast<uint32_t>(hello.sender_rank));
  PutU32(out, static_cast<uint32_t>(hello.receiver_rank));
  PutU32(out, static_cast<uint32_t>(hello.world_size));
  PutU32(out, static_cast<uint32_t>(hello.job_id.size()));
  out += hello.job_id;
  PutU32(out, static_cast<uint32_t>(hello.sender_address.size()));
  out += hello.sender_address;
  return Annotate(connection.SendAll(out.data(), out.size(), deadline),
                  "sending the ring hello");
}

absl::StatusOr<RingHello> ReceiveRingHello(TcpConnection& connection,
                                           absl::Time deadline) {
  unsigned char head[sizeof(kHelloMagic) + 16];
  RETURN_IF_ERROR(connection.RecvAll(head, sizeof(head), deadline));
  if (std::memcmp(head, kHelloMagic, sizeof(kHelloMagic)) != 0) {
    return absl::InvalidArgumentError(
        "it is not a gradsync ring peer (its first bytes are not a ring "
        "hello)");
  }
  RingHello hello;
  const unsigned char* fields = head + sizeof(kHelloMagic);
  hello.sender_rank = static_cast<int32_t>(GetU32(fields));
  hello.receiver_rank = static_cast<int32_t>(GetU32(fields + 4));
  hello.world_size = static_cast<int32_t>(GetU32(fields + 8));
  const uint32_t job_bytes = GetU32(fields + 12);
  if (job_bytes > kMaxTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("its hello announces a ", job_bytes, "-byte job id"));
  }
  hello.job_id.resize(job_bytes);
  RETURN_IF_ERROR(connection.RecvAll(hello.job_id.data(), job_bytes, deadline));
  unsigned char length[4];
  RETURN_IF_ERROR(connection.RecvAll(length, sizeof(length), deadline));
  const uint32_t address_bytes = GetU32(length);
  if (address_bytes > kMaxTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("its hello announces a ", address_bytes, "-byte address"));
  }
  hello.sender_address.resize(address_bytes);
  RETURN_IF_ERROR(
      connection.RecvAll(hello.sender_address.data(), address_bytes, deadline));
  return hello;
}

std::string CheckRingHello(const RingHello& hello, const std::string& job_id,
                           int world_size, int my_rank, int expected_sender) {
  if (hello.job_id != job_id) {
    return absl::StrCat("job id \"", hello.job_id, "\" is not this job's (\"",
                        job_id, "\")");
  }
  if (hello.world_size != world_size) {
    return absl::StrCat("it is in a ring of ", hello.world_size,
                        " ranks, this one has ", world_size);
  }
  if (hello.receiver_rank != my_rank) {
    return absl::StrCat("it wanted rank ", hello.receiver_rank,
                        " but reached rank ", my_rank);
  }
  if (hello.sender_rank != expected_sender) {
    return absl::StrCat("rank ", hello.sender_rank,
                        " is not the left neighbour of rank ", my_rank,
                        " (rank ", expected_sender, " is)");
  }
  return "";
}

absl::Status SendRingAnswer(TcpConnection& connection,
                            const std::string& refusal, absl::Time deadline) {
  std::string out(kAnswerMagic, sizeof(kAnswerMagic));
  PutU32(out, refusal.empty() ? 1 : 0);
  const std::string reason = refusal.substr(0, kMaxTextBytes);
  PutU32(out, static_cast<uint32_t>(reason.size()));
  out += reason;
  return Annotate(connection.SendAll(out.data(), out.size(), deadline),
                  "answering the ring hello");
}

absl::Status ReceiveRingAnswer(TcpConnection& connection, absl::Time deadline) {
  unsigned char head[sizeof(kAnswerMagic) + 8];
  RETURN_IF_ERROR(Annotate(connection.RecvAll(head, sizeof(head), deadline),
                           "waiting for the answer to our ring hello"));
  if (std::memcmp(head, kAnswerMagic, sizeof(kAnswerMagic)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        connection.peer_name(),
        " is not a gradsync ring peer (its answer to our hello is garbage)"));
  }
  const bool accepted = GetU32(head + sizeof(kAnswerMagic)) == 1;
  const uint32_t reason_bytes = GetU32(head + sizeof(kAnswerMagic) + 4);
  if (reason_bytes > kMaxTextBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        connection.peer_name(), " sent a malformed answer to our hello"));
  }
  std::string reason(reason_bytes, '\0');
  RETURN_IF_ERROR(connection.RecvAll(reason.data(), reason_bytes, deadline));
  if (accepted) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(connection.peer_name(), " refused our hello: ", reason));
}

}  // namespace gradsync
