// libFuzzer target: the KeyPart decoder (ps/wire.h) that a worker runs on
// every message a parameter server streams to it, on arbitrary bytes cut into
// arbitrary slices (gRPC hands over a message in as many slices as its reads
// produced). Differential: whatever the decoder accepts, protobuf's own
// parser must accept too, with the same header, sizes and data (the decoder
// may be stricter, never looser or different). Also checks that `place` is
// asked once, after the head, for the data's exact size, and that nothing is
// written past what it returned.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/parameter_server.pb.h"
#include "ps/wire.h"

namespace {

// The first byte picks the slice length (1..256 bytes, then the rest in
// slices of that length), the others are the message.
grpc::ByteBuffer Sliced(const uint8_t* data, size_t size) {
  const size_t slice = size > 0 ? static_cast<size_t>(data[0]) + 1 : 1;
  const uint8_t* message = size > 0 ? data + 1 : data;
  const size_t length = size > 0 ? size - 1 : 0;
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < length; at += slice) {
    slices.emplace_back(message + at, std::min(slice, length - at));
  }
  if (slices.empty()) return grpc::ByteBuffer();
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field with invalid UTF-8 it refuses.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::ByteBuffer buffer = Sliced(data, size);
  const std::string message(reinterpret_cast<const char*>(data + (size > 0)),
                            size > 0 ? size - 1 : 0);

  // Room for the data plus a guard that must stay untouched.
  constexpr char kGuard = '\x5a';
  std::string out;
  size_t asked = 0;
  int calls = 0;
  gradsync::KeyPartHead head;
  const absl::Status status = gradsync::DecodeKeyPart(
      &buffer, &head,
      [&](const gradsync::KeyPartHead&, size_t bytes) -> absl::StatusOr<char*> {
        ++calls;
        asked = bytes;
        out.assign(bytes + 8, kGuard);
        return out.data();
      });
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (calls != 1) std::abort();
  for (size_t i = asked; i < out.size(); ++i) {
    if (out[i] != kGuard) std::abort();
  }
  gradsync::ps::KeyPart reference;
  if (!reference.ParseFromString(message)) std::abort();
  if (reference.header().SerializeAsString() !=
          head.header.SerializeAsString() ||
      reference.key_numel() != head.key_numel ||
      reference.offset() != head.offset ||
      reference.data() != out.substr(0, asked)) {
    std::abort();
  }
  return 0;
}
