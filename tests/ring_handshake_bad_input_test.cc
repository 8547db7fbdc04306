// Hostile bytes at the ring's handshake (allreduce/transport/handshake.h): named
// cases for the hello and the answer parsers — wrong magic, every possible
// truncation, lengths that claim gigabytes — and seeded random bytes. The
// parser must refuse each with InvalidArgument or the reader's error, never
// ask the reader for more than the format allows (a huge declared length is
// refused before anything is read or allocated), and round-trip whatever it
// accepts.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/transport/handshake.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Serves bytes from a buffer; running out is OutOfRange (a closed socket).
// Remembers the largest single request.
class BufferReader {
 public:
  explicit BufferReader(std::string bytes) : bytes_(std::move(bytes)) {}
  ReadExactly reader() {
    return [this](void* data, size_t size) {
      largest_request_ = std::max(largest_request_, size);
      if (size > bytes_.size() - offset_) {
        offset_ = bytes_.size();
        return absl::OutOfRangeError("end of stream");
      }
      std::memcpy(data, bytes_.data() + offset_, size);
      offset_ += size;
      return absl::OkStatus();
    };
  }
  size_t largest_request() const { return largest_request_; }
  size_t consumed() const { return offset_; }

 private:
  const std::string bytes_;
  size_t offset_ = 0;
  size_t largest_request_ = 0;
};

std::string U32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

const PeerHello kGood{
    3, 4, 8, "job-x", "10.0.0.3:4100", "0123456789abcdef0123"};

std::string GoodHello() { return EncodePeerHello(kGood); }

// The offset of the three length fields in GoodHello().
size_t JobLengthAt() { return 8 + 12; }
size_t AddressLengthAt() { return JobLengthAt() + 4 + kGood.job_id.size(); }
size_t TokenLengthAt() {
  return AddressLengthAt() + 4 + kGood.sender_address.size();
}

std::string WithU32At(std::string bytes, size_t at, uint32_t value) {
  const std::string v = U32(value);
  bytes.replace(at, 4, v);
  return bytes;
}

struct BadHello {
  std::string name;
  std::string bytes;
  absl::StatusCode code;
  std::string says;
};

void PrintTo(const BadHello& c, std::ostream* out) { *out << c.name; }

std::vector<BadHello> BadHellos() {
  std::string old_version = GoodHello();
  old_version[7] = 1;
  return {
      {"Empty", "", absl::StatusCode::kOutOfRange, "end of stream"},
      {"HttpRequest", "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
       absl::StatusCode::kInvalidArgument, "not a gradsync ring peer"},
      {"TlsClientHello",
       std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) +
           std::string(64, '\0'),
       absl::StatusCode::kInvalidArgument, "not a gradsync ring peer"},
      {"OlderVersion", old_version, absl::StatusCode::kInvalidArgument,
       "of this version"},
      {"JobIdClaims4GiB", WithU32At(GoodHello(), JobLengthAt(), 0xffffffffu),
       absl::StatusCode::kInvalidArgument, "4294967295-byte job id"},
      {"JobIdJustPastTheLimit",
       WithU32At(GoodHello(), JobLengthAt(), kMaxHelloTextBytes + 1),
       absl::StatusCode::kInvalidArgument, "4097-byte job id"},
      {"AddressClaims2GiB",
       WithU32At(GoodHello(), AddressLengthAt(), 0x80000000u),
       absl::StatusCode::kInvalidArgument, "2147483648-byte address"},
      {"TokenClaims4GiB", WithU32At(GoodHello(), TokenLengthAt(), 0xffffffffu),
       absl::StatusCode::kInvalidArgument, "4294967295-byte job token"},
      {"JobIdLongerThanTheBytes",
       WithU32At(GoodHello(), JobLengthAt(), kMaxHelloTextBytes),
       absl::StatusCode::kOutOfRange, "end of stream"},
  };
}

class RingHelloHostileTest : public ::testing::TestWithParam<BadHello> {};

TEST_P(RingHelloHostileTest, IsRefusedWithoutReadingWhatItClaims) {
  const BadHello& c = GetParam();
  BufferReader buffer(c.bytes);
  absl::StatusOr<PeerHello> hello = ReadPeerHello(buffer.reader());
  ASSERT_FALSE(hello.ok());
  EXPECT_EQ(hello.status().code(), c.code) << hello.status();
  EXPECT_THAT(std::string(hello.status().message()), HasSubstr(c.says));
  EXPECT_LE(buffer.largest_request(), kMaxHelloTextBytes);
}

INSTANTIATE_TEST_SUITE_P(NamedCases, RingHelloHostileTest,
                         ::testing::ValuesIn(BadHellos()),
                         [](const ::testing::TestParamInfo<BadHello>& info) {
                           return info.param.name;
                         });

TEST(RingHelloTest, RoundTrips) {
  BufferReader buffer(GoodHello());
  absl::StatusOr<PeerHello> hello = ReadPeerHello(buffer.reader());
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->sender_rank, 3);
  EXPECT_EQ(hello->receiver_rank, 4);
  EXPECT_EQ(hello->world_size, 8);
  EXPECT_EQ(hello->job_id, "job-x");
  EXPECT_EQ(hello->sender_address, "10.0.0.3:4100");
  EXPECT_EQ(hello->job_token, kGood.job_token);
  EXPECT_EQ(buffer.consumed(), GoodHello().size());
}

TEST(RingHelloTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string good = GoodHello();
  for (size_t n = 0; n < good.size(); ++n) {
    BufferReader buffer(good.substr(0, n));
    EXPECT_FALSE(ReadPeerHello(buffer.reader()).ok()) << n << " bytes";
  }
}

TEST(RingHelloTest, NegativeAndEnormousRanksParseAndAreRefusedByTheCheck) {
  PeerHello hostile = kGood;
  hostile.sender_rank = -1;
  hostile.receiver_rank = INT32_MIN;
  hostile.world_size = INT32_MAX;
  BufferReader buffer(EncodePeerHello(hostile));
  absl::StatusOr<PeerHello> hello = ReadPeerHello(buffer.reader());
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->receiver_rank, INT32_MIN);
  EXPECT_THAT(CheckPeerHello(*hello, "job-x", kGood.job_token, 8, 4, 3),
              HasSubstr("ring of 2147483647 ranks"));
  hello->world_size = 8;
  EXPECT_THAT(CheckPeerHello(*hello, "job-x", kGood.job_token, 8, 4, 3),
              HasSubstr("wanted rank -2147483648"));
}

TEST(RingHelloTest, RandomBytesNeverCrashAndAcceptedOnesRoundTrip) {
  std::mt19937 random(20261122);
  const std::string good = GoodHello();
  for (int i = 0; i < 20000; ++i) {
    // Half pure noise, half a real hello with a few bytes flipped.
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(random() % 128);
      for (char& b : bytes) b = static_cast<char>(random());
    } else {
      bytes = good;
      for (int flips = 1 + random() % 4; flips > 0; --flips) {
        bytes[random() % bytes.size()] = static_cast<char>(random());
      }
    }
    BufferReader buffer(bytes);
    absl::StatusOr<PeerHello> hello = ReadPeerHello(buffer.reader());
    ASSERT_LE(buffer.largest_request(), kMaxHelloTextBytes);
    if (hello.ok()) {
      EXPECT_EQ(EncodePeerHello(*hello), bytes.substr(0, buffer.consumed()));
    } else {
      EXPECT_THAT(hello.status().code(),
                  ::testing::AnyOf(absl::StatusCode::kInvalidArgument,
                                   absl::StatusCode::kOutOfRange));
    }
  }
}

// --- The answer ----------------------------------------------------------

std::string AnswerHead(uint32_t accepted, uint32_t reason_bytes) {
  return std::string("GSRACK\0\1", 8) + U32(accepted) + U32(reason_bytes);
}

TEST(RingAnswerTest, HostileAnswers) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* says;
  } cases[] = {
      {"Garbage", "HTTP/1.1 400 Bad Request\r\n",
       "is not a gradsync ring peer"},
      {"AcceptedIsNeither0Nor1", AnswerHead(7, 0), "malformed answer"},
      {"AcceptedWithAReason", AnswerHead(1, 5) + "hello", "malformed answer"},
      {"ReasonClaims4GiB", AnswerHead(0, 0xffffffffu), "malformed answer"},
      {"ReasonShorterThanClaimed", AnswerHead(0, 100) + "short",
       "end of stream"},
      {"Truncated", AnswerHead(0, 0).substr(0, 11), "end of stream"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    BufferReader buffer(c.bytes);
    absl::Status status =
        ReadPeerAnswer(buffer.reader(), "right neighbour rank 1");
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.says));
    EXPECT_LE(buffer.largest_request(), kMaxHelloTextBytes);
  }
}

TEST(RingAnswerTest, AcceptAndRefuseRoundTrip) {
  BufferReader accept(EncodePeerAnswer(""));
  EXPECT_TRUE(ReadPeerAnswer(accept.reader(), "peer").ok());
  BufferReader refuse(EncodePeerAnswer("wrong job token"));
  absl::Status status = ReadPeerAnswer(refuse.reader(), "peer");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("peer refused our hello: wrong job token"));
  // A refusal longer than the limit is cut to it, so it still parses.
  BufferReader long_refusal(EncodePeerAnswer(std::string(10000, 'r')));
  EXPECT_EQ(ReadPeerAnswer(long_refusal.reader(), "peer").code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradsync
