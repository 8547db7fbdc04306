#include "ps/wire.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

KeyPartHead Head(int64_t key, int64_t numel, int64_t offset) {
  KeyPartHead head;
  head.header.set_job_id("job-7");
  head.header.set_rank(3);
  head.header.set_step(12);
  head.header.set_key(key);
  head.key_numel = numel;
  head.offset = offset;
  return head;
}

std::string Bytes(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer->Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

grpc::ByteBuffer FromBytes(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

// The encoder writes what protobuf itself would, byte for byte.
TEST(WireTest, EncodesTheProtobufWireFormat) {
  std::vector<float> data(1000);
  std::iota(data.begin(), data.end(), -3.5f);
  const KeyPartHead head = Head(5, 4000, 2000);
  grpc::ByteBuffer buffer = EncodeKeyPart(head, data.data(), 1000);

  ps::KeyPart expected;
  *expected.mutable_header() = head.header;
  expected.set_key_numel(4000);
  expected.set_offset(2000);
  expected.set_data(reinterpret_cast<const char*>(data.data()), 4000);
  EXPECT_EQ(Bytes(&buffer), expected.SerializeAsString());
}

// An encoded part (--compression) carries encoded_bytes before its data,
// so the data stays last and is still read straight into place; protobuf's
// own parser reads the same message, and the decoder reads it back.
TEST(WireTest, EncodedPartsCarryTheirEncodingsSize) {
  const std::string encoding = "\x03 nine bytes of an encoding";
  KeyPartHead head = Head(5, 4000, 9);
  head.encoded_bytes = 9 + static_cast<int64_t>(encoding.size());
  grpc::ByteBuffer buffer = EncodeKeyPart(
      head, grpc::Slice(encoding.data(), encoding.size()));
  ps::KeyPart parsed;
  ASSERT_TRUE(parsed.ParseFromString(Bytes(&buffer)));
  EXPECT_EQ(parsed.encoded_bytes(), head.encoded_bytes);
  EXPECT_EQ(parsed.offset(), 9);
  EXPECT_EQ(parsed.data(), encoding);
  std::string placed(encoding.size(), '\0');
  KeyPartHead decoded;
  ASSERT_TRUE(DecodeKeyPart(&buffer, &decoded,
                            [&](const KeyPartHead&, size_t bytes)
                                -> absl::StatusOr<char*> {
                              EXPECT_EQ(bytes, encoding.size());
                              return placed.data();
                            })
                  .ok());
  EXPECT_EQ(decoded.encoded_bytes, head.encoded_bytes);
  EXPECT_EQ(placed, encoding);
  // A float32 part (encoded_bytes 0) has no such field: the same bytes as
  // before compression existed.
  const float one = 1.0f;
  grpc::ByteBuffer plain = EncodeKeyPart(Head(5, 2, 1), &one, 1);
  ps::KeyPart expected;
  *expected.mutable_header() = Head(5, 2, 1).header;
  expected.set_key_numel(2);
  expected.set_offset(1);
  expected.set_data(reinterpret_cast<const char*>(&one), 4);
  EXPECT_EQ(Bytes(&plain), expected.SerializeAsString());
}

// The floats are referred to, not copied: the buffer sees a later change.
TEST(WireTest, DataIsNotCopied) {
  std::vector<float> data = {1, 2, 3};
  grpc::ByteBuffer buffer = EncodeKeyPart(Head(0, 3, 0), data.data(), 3);
  data[1] = 42;
  ps::KeyPart part;
  ASSERT_TRUE(ParseMessage(&buffer, &part).ok());
  float second;
  std::memcpy(&second, part.data().data() + 4, 4);
  EXPECT_EQ(second, 42);
}

TEST(WireTest, DecodesIntoThePlaceGiven) {
  std::vector<float> data(300);
  std::iota(data.begin(), data.end(), 1.0f);
  grpc::ByteBuffer buffer = EncodeKeyPart(Head(9, 1000, 600), data.data(), 300);

  std::vector<float> out(1000, 0.0f);
  KeyPartHead head;
  size_t asked = 0;
  absl::Status status = DecodeKeyPart(
      &buffer, &head,
      [&](const KeyPartHead& h, size_t bytes) -> absl::StatusOr<char*> {
        asked = bytes;
        return reinterpret_cast<char*>(out.data() + h.offset);
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(asked, 1200u);
  EXPECT_EQ(head.header.job_id(), "job-7");
  EXPECT_EQ(head.header.rank(), 3);
  EXPECT_EQ(head.header.step(), 12);
  EXPECT_EQ(head.header.key(), 9);
  EXPECT_EQ(head.key_numel, 1000);
  EXPECT_EQ(head.offset, 600);
  EXPECT_EQ(out[599], 0.0f);
  EXPECT_EQ(out[600], 1.0f);
  EXPECT_EQ(out[899], 300.0f);
}

// Fields in another order (legal protobuf) and fields this side does not
// know decode the same; the data is placed after the whole head is known.
TEST(WireTest, DecodesDataBeforeTheHeadAndSkipsUnknownFields) {
  const float values[2] = {7.0f, -8.0f};
  ps::KeyPart data_only;
  data_only.set_data(reinterpret_cast<const char*>(values), 8);
  ps::KeyPart head_only;
  *head_only.mutable_header() = Head(4, 2, 0).header;
  head_only.set_key_numel(2);
  // Field 15, a varint, and field 16, length-delimited: unknown here.
  const std::string unknown = std::string("\x78\x05", 2) + "\x82\x01\x02xy";
  grpc::ByteBuffer buffer = FromBytes(data_only.SerializeAsString() + unknown +
                                      head_only.SerializeAsString());

  float out[2] = {0, 0};
  KeyPartHead head;
  absl::Status status = DecodeKeyPart(
      &buffer, &head,
      [&](const KeyPartHead& h, size_t bytes) -> absl::StatusOr<char*> {
        EXPECT_EQ(h.header.key(), 4);
        EXPECT_EQ(h.key_numel, 2);
        EXPECT_EQ(bytes, 8u);
        return reinterpret_cast<char*>(out);
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], -8.0f);
}

TEST(WireTest, APartWithoutDataIsPlacedWithZeroBytes) {
  grpc::ByteBuffer buffer = EncodeKeyPart(Head(1, 0, 0), nullptr, 0);
  KeyPartHead head;
  int calls = 0;
  absl::Status status = DecodeKeyPart(
      &buffer, &head,
      [&](const KeyPartHead&, size_t bytes) -> absl::StatusOr<char*> {
        ++calls;
        EXPECT_EQ(bytes, 0u);
        return nullptr;
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(calls, 1);
}

// The place's refusal is the decoder's answer, and nothing is written.
TEST(WireTest, ARefusedPlaceIsTheError) {
  const float value = 1.0f;
  grpc::ByteBuffer buffer = EncodeKeyPart(Head(1, 1, 0), &value, 1);
  KeyPartHead head;
  absl::Status status = DecodeKeyPart(
      &buffer, &head, [](const KeyPartHead&, size_t) -> absl::StatusOr<char*> {
        return absl::OutOfRangeError("no room for key 1");
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr("no room for key 1"));
}

TEST(WireTest, MalformedMessagesAreRefused) {
  std::vector<float> data(4, 1.0f);
  grpc::ByteBuffer good = EncodeKeyPart(Head(2, 4, 0), data.data(), 4);
  const std::string bytes = Bytes(&good);
  const std::vector<std::string> bad = {
      bytes.substr(0, bytes.size() - 3),  // truncated data
      bytes.substr(0, 5),                 // truncated header
      std::string("\x10", 1),             // a varint field with no value
      std::string("\x12\x01\x00", 3),     // key_numel as length-delimited
      std::string("\x0b", 1),             // field 1 as a group
  };
  for (const std::string& message : bad) {
    grpc::ByteBuffer buffer = FromBytes(message);
    KeyPartHead head;
    std::vector<char> sink(64);
    absl::Status status =
        DecodeKeyPart(&buffer, &head,
                      [&](const KeyPartHead&, size_t) -> absl::StatusOr<char*> {
                        return sink.data();
                      });
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << "message of " << message.size() << " bytes: " << status;
  }
}

// Length prefixes are read as protobuf's parser reads them: at most five
// bytes and below 2^31. Found by ps_wire_fuzzer: a six-byte length on an
// unknown field was taken modulo 2^32 (as 0) and the message accepted, where
// protobuf refuses it.
TEST(WireTest, LengthPrefixesAreReadAsProtobufReadsThem) {
  struct Case {
    std::string message;
    bool valid;
  };
  const std::vector<Case> cases = {
      // Field 16 (unknown), a length of 0 in five bytes: valid.
      {std::string("\x82\x01\x80\x80\x80\x80\x00", 7), true},
      // The same in six bytes, and 2^35 (low 32 bits 0): invalid.
      {std::string("\x82\x01\x80\x80\x80\x80\x80\x00", 8), false},
      {std::string("\x82\x01\x80\x80\x80\x80\x80\x01", 8), false},
      // The header (field 1) and the data (field 4) with six-byte lengths.
      {std::string("\x0a\x80\x80\x80\x80\x80\x00", 7), false},
      {std::string("\x22\x80\x80\x80\x80\x80\x00", 7), false},
      // The data with a five-byte length of 0: valid.
      {std::string("\x22\x80\x80\x80\x80\x00", 6), true},
  };
  for (const Case& c : cases) {
    ps::KeyPart reference;
    ASSERT_EQ(reference.ParseFromString(c.message), c.valid)
        << "protobuf disagrees with the case's expectation";
    grpc::ByteBuffer buffer = FromBytes(c.message);
    KeyPartHead head;
    absl::Status status =
        DecodeKeyPart(&buffer, &head,
                      [](const KeyPartHead&, size_t) -> absl::StatusOr<char*> {
                        return nullptr;
                      });
    EXPECT_EQ(status.ok(), c.valid) << status;
    if (!c.valid) EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(WireTest, SmallMessagesRoundTrip) {
  ps::PullRequest request;
  request.mutable_header()->set_job_id("j");
  request.add_keys(3);
  request.add_keys(11);
  grpc::ByteBuffer buffer = SerializeMessage(request);
  ps::PullRequest parsed;
  ASSERT_TRUE(ParseMessage(&buffer, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), request.SerializeAsString());

  grpc::ByteBuffer garbage = FromBytes(std::string("\xff\xff\xff", 3));
  EXPECT_EQ(ParseMessage(&garbage, &parsed).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradsync
