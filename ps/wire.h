// KeyPart messages (proto/parameter_server.proto) encoded and decoded straight
// between gRPC byte buffers and float arrays, the PS's data path.
//
// Through the generated stubs a part's floats are copied twice on the way
// out (into the message's bytes field, then into gRPC's buffers by the
// serializer) and twice on the way in (into the parsed message, then to where
// they belong). Here the way out is no copy at all: the floats go into the
// byte buffer as a slice that points at them, after a few bytes of encoded
// header (the server, whose results change once its lock is released, copies
// them once into a slice of their own). The way in is one copy, from gRPC's
// receive buffers straight to where the caller wants the floats. It is the
// same protobuf wire format, so either side may still use the generated code
// (the tests' hand-made peers do, and so does a server in a bad-input test).
//
// TensorFlow's gRPC tensor coding does the same for its tensors; protobuf
// itself reads and writes the wire format (CodedInputStream,
// CodedOutputStream), only the choice of where bytes go is ours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/parameter_server.pb.h"

namespace gradsync {

// A KeyPart's fields other than its data.
struct KeyPartHead {
  ps::Header header;
  int64_t key_numel = 0;
  int64_t offset = 0;
  // Non-zero: the data is a piece of the key's encoding of this many bytes
  // and `offset` counts bytes (KeyPart.encoded_bytes).
  int64_t encoded_bytes = 0;
};

// Encodes a KeyPart whose data is the `n` floats at `data`. The buffer
// refers to those floats, it does not copy them: they must stay unchanged
// until the RPC that sends the buffer is over (OnDone).
grpc::ByteBuffer EncodeKeyPart(const KeyPartHead& head, const float* data,
                               int64_t n);
// The same with the data in a slice the buffer shares (a whole number of
// floats' bytes).
grpc::ByteBuffer EncodeKeyPart(const KeyPartHead& head, grpc::Slice data);

// Where a part's data goes: called once per part with the decoded head and
// the data's size in bytes (0 when the part has none), after every other
// field has been read. Returns the place for the bytes, or an error that
// becomes DecodeKeyPart's. A size the caller cannot take (not whole floats,
// out of range) is refused here, before a byte is copied.
using PlacePart =
    absl::FunctionRef<absl::StatusOr<char*>(const KeyPartHead&, size_t bytes)>;

// Decodes the KeyPart in `buffer` into *head, and its data into the memory
// `place` returns. An undecodable message is an InvalidArgument error.
absl::Status DecodeKeyPart(grpc::ByteBuffer* buffer, KeyPartHead* head,
                           PlacePart place);

// Whole protobuf messages to and from byte buffers (the small ones: requests
// and replies), through gRPC's own serializer.
grpc::ByteBuffer SerializeMessage(const google::protobuf::MessageLite& message);
absl::Status ParseMessage(grpc::ByteBuffer* buffer,
                          google::protobuf::MessageLite* message);

}  // namespace gradsync
