#include "ps/wire.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace gradsync {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

// Protobuf's wire types (the low three bits of a tag).
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kFixed32 = 5,
};

constexpr uint32_t Tag(int field, WireType type) {
  return (static_cast<uint32_t>(field) << 3) | type;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed KeyPart message: ", what));
}

// A length prefix as protobuf's parser reads one: at most five bytes and
// below 2^31. (CodedInputStream::ReadVarint32 takes up to ten bytes and drops
// the high bits, so it would accept a length protobuf refuses, and read a
// different message than the sender's.)
bool ReadLength(CodedInputStream* in, uint32_t* length) {
  const int start = in->CurrentPosition();
  uint64_t value;
  if (!in->ReadVarint64(&value) || in->CurrentPosition() - start > 5 ||
      value > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return false;
  }
  *length = static_cast<uint32_t>(value);
  return true;
}

// Skips a field this decoder does not know (a newer sender's).
bool SkipField(CodedInputStream* in, uint32_t tag) {
  switch (tag & 7) {
    case kVarint: {
      uint64_t ignored;
      return in->ReadVarint64(&ignored);
    }
    case kFixed64:
      return in->Skip(8);
    case kLengthDelimited: {
      uint32_t length;
      return ReadLength(in, &length) && in->Skip(static_cast<int>(length));
    }
    case kFixed32:
      return in->Skip(4);
    default:  // groups: never in this proto3 file
      return false;
  }
}

}  // namespace

grpc::ByteBuffer EncodeKeyPart(const KeyPartHead& head, const float* data,
                               int64_t n) {
  const size_t data_bytes = static_cast<size_t>(n) * sizeof(float);
  // Refers to the caller's floats: no copy, no ownership.
  return EncodeKeyPart(
      head, data_bytes > 0
                ? grpc::Slice(data, data_bytes, grpc::Slice::STATIC_SLICE)
                : grpc::Slice());
}

grpc::ByteBuffer EncodeKeyPart(const KeyPartHead& head, grpc::Slice data) {
  const size_t data_bytes = data.size();
  std::string prefix;
  {
    google::protobuf::io::StringOutputStream raw(&prefix);
    CodedOutputStream out(&raw);
    // Fields in number order, as protobuf writes them, data last.
    out.WriteTag(Tag(ps::KeyPart::kHeaderFieldNumber, kLengthDelimited));
    out.WriteVarint32(static_cast<uint32_t>(head.header.ByteSizeLong()));
    head.header.SerializeWithCachedSizes(&out);
    out.WriteTag(Tag(ps::KeyPart::kKeyNumelFieldNumber, kVarint));
    out.WriteVarint64(static_cast<uint64_t>(head.key_numel));
    out.WriteTag(Tag(ps::KeyPart::kOffsetFieldNumber, kVarint));
    out.WriteVarint64(static_cast<uint64_t>(head.offset));
    // Before the data although its number is higher, so the data stays the
    // last field and is read straight into place; proto3 leaves it out when
    // 0, so float32 parts are what they were before encodings existed.
    if (head.encoded_bytes != 0) {
      out.WriteTag(Tag(ps::KeyPart::kEncodedBytesFieldNumber, kVarint));
      out.WriteVarint64(static_cast<uint64_t>(head.encoded_bytes));
    }
    out.WriteTag(Tag(ps::KeyPart::kDataFieldNumber, kLengthDelimited));
    out.WriteVarint32(static_cast<uint32_t>(data_bytes));
  }
  grpc::Slice slices[2] = {grpc::Slice(prefix.data(), prefix.size()),
                           std::move(data)};
  return grpc::ByteBuffer(slices, data_bytes > 0 ? 2 : 1);
}

absl::Status DecodeKeyPart(grpc::ByteBuffer* buffer, KeyPartHead* head,
                           PlacePart place) {
  *head = KeyPartHead();
  const size_t total = buffer->Length();
  if (total > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Malformed(absl::StrCat(total, " bytes"));
  }
  // The data, when it is not the message's last field (protobuf writes it
  // last; another encoder need not), waits here until the head is complete;
  // it is placed once the message is read. Empty for a part without data.
  std::string early_data;
  auto place_early_data = [&]() -> absl::Status {
    absl::StatusOr<char*> destination = place(*head, early_data.size());
    if (!destination.ok()) return destination.status();
    if (!early_data.empty()) {
      std::memcpy(*destination, early_data.data(), early_data.size());
    }
    return absl::OkStatus();
  };
  // The empty message: every field at its default, no data.
  if (!buffer->Valid() || total == 0) return place_early_data();
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) return Malformed("unreadable byte buffer");
  CodedInputStream in(&reader);

  for (;;) {
    const int tag_start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      // The end, or a tag that is not one (truncated, field 0).
      if (!in.ConsumedEntireMessage()) return Malformed("bad tag");
      break;
    }
    // CodedInputStream reads a tag of up to 10 bytes; protobuf's parser
    // takes 5 at most.
    if (in.CurrentPosition() - tag_start > 5) return Malformed("overlong tag");
    const int field = static_cast<int>(tag >> 3);
    if (field == 0) return Malformed("field number 0");
    if (tag == Tag(ps::KeyPart::kHeaderFieldNumber, kLengthDelimited)) {
      uint32_t length;
      std::string bytes;
      if (!ReadLength(&in, &length) ||
          !in.ReadString(&bytes, static_cast<int>(length)) ||
          !head->header.MergeFromString(bytes)) {
        return Malformed("bad header");
      }
    } else if (tag == Tag(ps::KeyPart::kKeyNumelFieldNumber, kVarint) ||
               tag == Tag(ps::KeyPart::kOffsetFieldNumber, kVarint) ||
               tag == Tag(ps::KeyPart::kEncodedBytesFieldNumber, kVarint)) {
      uint64_t value;
      if (!in.ReadVarint64(&value)) return Malformed("bad varint");
      (field == ps::KeyPart::kKeyNumelFieldNumber ? head->key_numel
       : field == ps::KeyPart::kOffsetFieldNumber ? head->offset
                                                  : head->encoded_bytes) =
          static_cast<int64_t>(value);
    } else if (tag == Tag(ps::KeyPart::kDataFieldNumber, kLengthDelimited)) {
      uint32_t length;
      if (!ReadLength(&in, &length) ||
          length > total - static_cast<size_t>(in.CurrentPosition())) {
        return Malformed("bad data length");
      }
      if (static_cast<size_t>(in.CurrentPosition()) + length == total) {
        // The last field: the head is complete, the bytes go to their place
        // and the message is over.
        absl::StatusOr<char*> destination = place(*head, length);
        if (!destination.ok()) return destination.status();
        if (length > 0 && !in.ReadRaw(*destination, static_cast<int>(length))) {
          return Malformed("truncated data");
        }
        return absl::OkStatus();
      }
      if (!in.ReadString(&early_data, static_cast<int>(length))) {
        return Malformed("truncated data");
      }
    } else if (field == ps::KeyPart::kHeaderFieldNumber ||
               field == ps::KeyPart::kKeyNumelFieldNumber ||
               field == ps::KeyPart::kOffsetFieldNumber ||
               field == ps::KeyPart::kEncodedBytesFieldNumber ||
               field == ps::KeyPart::kDataFieldNumber) {
      return Malformed(
          absl::StrCat("field ", field, " has wire type ", tag & 7));
    } else if (!SkipField(&in, tag)) {
      return Malformed(absl::StrCat("bad field ", field));
    }
  }
  if (static_cast<size_t>(in.CurrentPosition()) != total) {
    return Malformed(
        absl::StrCat("stopped at byte ", in.CurrentPosition(), " of ", total));
  }
  return place_early_data();
}

grpc::ByteBuffer SerializeMessage(
    const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ParseMessage(grpc::ByteBuffer* buffer,
                          google::protobuf::MessageLite* message) {
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", message->GetTypeName(), " message"));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
