// libFuzzer target: the ring handshake's parsers (allreduce/transport/handshake.h)
// on arbitrary bytes. Checks, besides ASan/UBSan's: the parser never asks
// for more than the format's limit in one read (a declared length is
// checked before it is read or allocated), a hello it accepts re-encodes to
// exactly the bytes it consumed, and the check of a hello never throws or
// crashes whatever the ranks.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "allreduce/transport/handshake.h"

namespace {

class Buffer {
 public:
  Buffer(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  gradsync::ReadExactly reader() {
    return [this](void* out, size_t n) {
      if (n > gradsync::kMaxHelloTextBytes + 64) std::abort();
      if (n > size_ - offset_) {
        offset_ = size_;
        return absl::OutOfRangeError("end of stream");
      }
      std::memcpy(out, data_ + offset_, n);
      offset_ += n;
      return absl::OkStatus();
    };
  }
  size_t consumed() const { return offset_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  Buffer hello_bytes(data, size);
  absl::StatusOr<PeerHello> hello = ReadPeerHello(hello_bytes.reader());
  if (hello.ok()) {
    const std::string again = EncodePeerHello(*hello);
    if (again.size() != hello_bytes.consumed() ||
        std::memcmp(again.data(), data, again.size()) != 0) {
      std::abort();
    }
    const std::string why =
        CheckPeerHello(*hello, "job", "0123456789abcdef0123", 4, 1, 0);
    if (why.size() > 4 * kMaxHelloTextBytes) std::abort();
  } else if (hello.status().code() != absl::StatusCode::kInvalidArgument &&
             hello.status().code() != absl::StatusCode::kOutOfRange) {
    std::abort();
  }
  Buffer answer_bytes(data, size);
  const absl::Status answer =
      ReadPeerAnswer(answer_bytes.reader(), "right neighbour rank 1");
  if (!answer.ok() && answer.code() != absl::StatusCode::kFailedPrecondition &&
      answer.code() != absl::StatusCode::kOutOfRange) {
    std::abort();
  }
  return 0;
}
