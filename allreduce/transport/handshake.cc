#include "allreduce/transport/handshake.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_token.h"

namespace gradsync {
namespace {

// The hello's last magic byte is its format version: 2 added the job token,
// so a peer of an older build is refused as "not a ring hello".
constexpr char kHelloMagic[8] = {'G', 'S', 'R', 'I', 'N', 'G', 0, 2};
constexpr char kAnswerMagic[8] = {'G', 'S', 'R', 'A', 'C', 'K', 0, 1};

void PutU32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(value >> (8 * i)));
}

void PutText(std::string& out, const std::string& text) {
  PutU32(out, static_cast<uint32_t>(text.size()));
  out += text;
}

uint32_t GetU32(const unsigned char* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 |
         uint32_t{in[3]} << 24;
}

// A length-prefixed text field; the length is checked before anything is
// allocated or read.
absl::Status ReadText(const ReadExactly& read, const char* what,
                      std::string* out) {
  unsigned char length[4];
  RETURN_IF_ERROR(read(length, sizeof(length)));
  const uint32_t bytes = GetU32(length);
  if (bytes > kMaxHelloTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("its hello announces a ", bytes, "-byte ", what));
  }
  out->resize(bytes);
  return read(out->data(), bytes);
}

// A stranger's text, safe for an error message and a log line.
std::string Shown(absl::string_view text) {
  constexpr size_t kShown = 64;
  if (text.size() <= kShown) return absl::CHexEscape(text);
  return absl::StrCat(absl::CHexEscape(text.substr(0, kShown)), "...(",
                      text.size(), " bytes)");
}

ReadExactly ReaderOf(TcpConnection& connection, absl::Time deadline) {
  return [&connection, deadline](void* data, size_t size) {
    return connection.RecvAll(data, size, deadline);
  };
}

}  // namespace

std::string EncodePeerHello(const PeerHello& hello) {
  std::string out(kHelloMagic, sizeof(kHelloMagic));
  PutU32(out, static_cast<uint32_t>(hello.sender_rank));
  PutU32(out, static_cast<uint32_t>(hello.receiver_rank));
  PutU32(out, static_cast<uint32_t>(hello.world_size));
  PutText(out, hello.job_id);
  PutText(out, hello.sender_address);
  PutText(out, hello.job_token);
  return out;
}

absl::StatusOr<PeerHello> ReadPeerHello(const ReadExactly& read) {
  unsigned char head[sizeof(kHelloMagic) + 12];
  RETURN_IF_ERROR(read(head, sizeof(head)));
  if (std::memcmp(head, kHelloMagic, sizeof(kHelloMagic)) != 0) {
    return absl::InvalidArgumentError(
        "it is not a gradsync ring peer of this version (its first bytes are "
        "not a ring hello)");
  }
  PeerHello hello;
  const unsigned char* fields = head + sizeof(kHelloMagic);
  hello.sender_rank = static_cast<int32_t>(GetU32(fields));
  hello.receiver_rank = static_cast<int32_t>(GetU32(fields + 4));
  hello.world_size = static_cast<int32_t>(GetU32(fields + 8));
  RETURN_IF_ERROR(ReadText(read, "job id", &hello.job_id));
  RETURN_IF_ERROR(ReadText(read, "address", &hello.sender_address));
  RETURN_IF_ERROR(ReadText(read, "job token", &hello.job_token));
  return hello;
}

std::string EncodePeerAnswer(const std::string& refusal) {
  std::string out(kAnswerMagic, sizeof(kAnswerMagic));
  PutU32(out, refusal.empty() ? 1 : 0);
  PutText(out, refusal.substr(0, kMaxHelloTextBytes));
  return out;
}

absl::Status ReadPeerAnswer(const ReadExactly& read,
                            const std::string& peer_name) {
  unsigned char head[sizeof(kAnswerMagic) + 8];
  RETURN_IF_ERROR(Annotate(read(head, sizeof(head)),
                           "waiting for the answer to our ring hello"));
  if (std::memcmp(head, kAnswerMagic, sizeof(kAnswerMagic)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        peer_name,
        " is not a gradsync ring peer (its answer to our hello is garbage)"));
  }
  const uint32_t accepted = GetU32(head + sizeof(kAnswerMagic));
  const uint32_t reason_bytes = GetU32(head + sizeof(kAnswerMagic) + 4);
  if (accepted > 1 || reason_bytes > kMaxHelloTextBytes ||
      (accepted == 1 && reason_bytes != 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat(peer_name, " sent a malformed answer to our hello"));
  }
  std::string reason(reason_bytes, '\0');
  RETURN_IF_ERROR(read(reason.data(), reason_bytes));
  if (accepted == 1) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(peer_name, " refused our hello: ", reason));
}

absl::Status SendPeerHello(TcpConnection& connection, const PeerHello& hello,
                           absl::Time deadline) {
  const std::string out = EncodePeerHello(hello);
  return Annotate(connection.SendAll(out.data(), out.size(), deadline),
                  "sending the ring hello");
}

absl::StatusOr<PeerHello> ReceivePeerHello(TcpConnection& connection,
                                           absl::Time deadline) {
  return ReadPeerHello(ReaderOf(connection, deadline));
}

std::string CheckPeerHello(const PeerHello& hello, const std::string& job_id,
                           const std::string& job_token, int world_size,
                           int my_rank, int expected_sender) {
  const std::string token_problem =
      JobTokenMismatch(job_token, hello.job_token);
  if (!token_problem.empty()) {
    return absl::StrCat(token_problem,
                        " (every process of a job needs the same token)");
  }
  if (hello.job_id != job_id) {
    return absl::StrCat("job id \"", Shown(hello.job_id),
                        "\" is not this job's (\"", job_id, "\")");
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

absl::Status SendPeerAnswer(TcpConnection& connection,
                            const std::string& refusal, absl::Time deadline) {
  const std::string out = EncodePeerAnswer(refusal);
  return Annotate(connection.SendAll(out.data(), out.size(), deadline),
                  "answering the ring hello");
}

absl::Status ReceivePeerAnswer(TcpConnection& connection, absl::Time deadline) {
  return ReadPeerAnswer(ReaderOf(connection, deadline), connection.peer_name());
}

}  // namespace gradsync
