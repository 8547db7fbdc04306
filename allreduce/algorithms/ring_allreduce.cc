#include "allreduce/algorithms/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "allreduce/algorithms/float_sum.h"
#include "core/base/status_macros.h"

namespace gradsync {

namespace {

constexpr char kHeaderMagic[4] = {'G', 'S', 'A', 'R'};
constexpr int64_t kHeaderBytes = RingAllReduce::kHeaderBytes;

// In host byte order: every rank of a job runs the same build on the same
// kind of machine, and a mismatch would still fail the magic check.
struct Header {
  char magic[4];
  uint32_t sequence;
  uint32_t tag;
  uint32_t encoding;  // Encoding: what the payload's values are
  uint64_t count;
};
static_assert(sizeof(Header) == kHeaderBytes,
              "the header is 24 bytes on the wire");

float DecodeHalf(Encoding wire, uint16_t bits) {
  return wire == Encoding::kFp16 ? HalfToFloat(bits) : Bfloat16ToFloat(bits);
}

uint16_t EncodeHalf(Encoding wire, float value) {
  return wire == Encoding::kFp16 ? FloatToHalf(value) : FloatToBfloat16(value);
}

}  // namespace

// One all-reduce. Phases 0..N-2 are reduce-scatter steps, N-1..2N-3 all-gather
// steps; phase -1 is the header. Send and receive each walk the phases in
// order; the send side of phase k may only send the bytes that the receive
// side of phase k-1 has finished, because they are the same segment.
class RingAllReduce::Pass {
 public:
  Pass(RingAllReduce& owner, float* data, int64_t count, float scale,
       uint32_t tag, Encoding wire)
      : owner_(owner),
        transport_(*owner.transport_),
        data_(data),
        wire_encoding_(wire),
        element_bytes_(wire == Encoding::kFloat32 ? 4 : 2),
        wire_(owner.wire_.data()),
        scale_(scale),
        n_(transport_.world_size()),
        rank_(transport_.rank()),
        phases_(2 * (n_ - 1)),
        staging_(reinterpret_cast<char*>(owner.staging_.data())) {
    // Segments as even as possible; the first count % N get one more element.
    const int64_t base = count / n_;
    const int64_t extra = count % n_;
    segment_offset_.resize(n_);
    segment_count_.resize(n_);
    for (int i = 0; i < n_; ++i) {
      segment_offset_[i] = i * base + std::min<int64_t>(i, extra);
      segment_count_[i] = base + (i < extra ? 1 : 0);
    }
    send_header_ = Header{
        {kHeaderMagic[0], kHeaderMagic[1], kHeaderMagic[2], kHeaderMagic[3]},
        owner.sequence_,
        tag,
        static_cast<uint32_t>(wire),
        static_cast<uint64_t>(count)};
    std::memset(&recv_header_, 0, sizeof(recv_header_));
    // 16-bit runs send from wire_: the first reduce-scatter step sends this
    // rank's own segment, rounded; later steps send what they reduced.
    if (element_bytes_ == 2) {
      EncodeRange(segment_offset_[rank_], segment_count_[rank_]);
    }
  }

  absl::Status Run() {
    const absl::Duration timeout = transport_.timeout();
    absl::Time last_progress = absl::Now();
    while (send_phase_ < phases_ || recv_phase_ < phases_) {
      bool moved = false;
      RETURN_IF_ERROR(SendStep(&moved));
      RETURN_IF_ERROR(RecvStep(&moved));
      if (moved) {
        last_progress = absl::Now();
        continue;
      }
      const bool sending = send_phase_ < phases_;
      const bool want_send = sending && SendAvailable() > send_pos_;
      const bool want_recv = recv_phase_ < phases_;
      const absl::Time deadline = last_progress + timeout;
      ASSIGN_OR_RETURN(RingIoReadiness ready,
                       transport_.WaitForIo(want_send, want_recv,
                                            /*watch_right=*/sending, deadline));
      // Data (or end-of-stream) from the left is older news than a closed
      // right connection, so it is read first: in a failing ring this reports
      // the failure nearest to its origin.
      if (ready.right_readable && !ready.can_recv) {
        RETURN_IF_ERROR(CheckRightClosed());
      }
      if (!ready.can_send && !ready.can_recv && !ready.right_readable &&
          absl::Now() >= deadline) {
        return Stalled(want_send, want_recv);
      }
    }
    return absl::OkStatus();
  }

 private:
  int Mod(int x) const { return ((x % n_) + n_) % n_; }
  int SendSegment(int k) const {
    return k < n_ - 1 ? Mod(rank_ - k) : Mod(rank_ + 1 - (k - (n_ - 1)));
  }
  int RecvSegment(int k) const {
    return k < n_ - 1 ? Mod(rank_ - k - 1) : Mod(rank_ - (k - (n_ - 1)));
  }
  int64_t SendPhaseBytes(int k) const {
    return k < 0 ? kHeaderBytes
                 : segment_count_[SendSegment(k)] * element_bytes_;
  }
  int64_t RecvPhaseBytes(int k) const {
    return k < 0 ? kHeaderBytes
                 : segment_count_[RecvSegment(k)] * element_bytes_;
  }

  // wire_[first, first + count) = the 16-bit rounding of data_ there.
  void EncodeRange(int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i) {
      wire_[i] = EncodeHalf(wire_encoding_, data_[i]);
    }
  }
  // data_[first, first + count) = the values wire_ holds there.
  void DecodeRange(int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i) {
      data_[i] = DecodeHalf(wire_encoding_, wire_[i]);
    }
  }

  // How far into the current send phase we may go.
  int64_t SendAvailable() const {
    const int k = send_phase_;
    if (k <= 0) return SendPhaseBytes(k);
    if (recv_phase_ > k - 1) return SendPhaseBytes(k);
    if (recv_phase_ == k - 1) return recv_ready_;
    return 0;
  }

  std::string PhaseName(int k) const {
    if (k < 0) {
      return absl::StrCat("the header of all-reduce #", send_header_.sequence);
    }
    if (k < n_ - 1) {
      return absl::StrCat("reduce-scatter step ", k + 1, " of ", n_ - 1);
    }
    return absl::StrCat("all-gather step ", k - (n_ - 1) + 1, " of ", n_ - 1);
  }

  absl::Status InPhase(const absl::Status& status, int k) const {
    return absl::Status(status.code(), absl::StrCat("ring: ", status.message(),
                                                    " during ", PhaseName(k)));
  }

  absl::Status SendStep(bool* moved) {
    // Empty segments (fewer elements than ranks) make empty phases.
    while (send_phase_ < phases_ && send_pos_ == SendPhaseBytes(send_phase_)) {
      ++send_phase_;
      send_pos_ = 0;
    }
    if (send_phase_ >= phases_) return absl::OkStatus();
    const int64_t available = SendAvailable() - send_pos_;
    if (available <= 0) return absl::OkStatus();
    const char* source =
        send_phase_ < 0 ? reinterpret_cast<const char*>(&send_header_)
        : element_bytes_ == 2
            ? reinterpret_cast<const char*>(
                  wire_ + segment_offset_[SendSegment(send_phase_)])
            : reinterpret_cast<const char*>(
                  data_ + segment_offset_[SendSegment(send_phase_)]);
    absl::StatusOr<size_t> sent = transport_.right().SendSome(
        source + send_pos_,
        static_cast<size_t>(std::min(available, owner_.chunk_bytes_)));
    if (!sent.ok()) return InPhase(sent.status(), send_phase_);
    if (*sent == 0) return absl::OkStatus();
    *moved = true;
    send_pos_ += *sent;
    if (send_phase_ >= 0) owner_.bytes_sent_ += *sent;
    return absl::OkStatus();
  }

  absl::Status RecvStep(bool* moved) {
    while (recv_phase_ < phases_ && recv_pos_ == RecvPhaseBytes(recv_phase_)) {
      ++recv_phase_;
      recv_pos_ = 0;
      recv_ready_ = 0;
      staging_start_ = 0;
      staged_ = 0;
      reduced_ = 0;
    }
    if (recv_phase_ >= phases_) return absl::OkStatus();
    const int k = recv_phase_;
    const int64_t phase_bytes = RecvPhaseBytes(k);
    if (k < 0) {
      absl::StatusOr<size_t> received = transport_.left().RecvSome(
          reinterpret_cast<char*>(&recv_header_) + recv_pos_,
          phase_bytes - recv_pos_);
      if (!received.ok()) return InPhase(received.status(), k);
      if (*received == 0) return absl::OkStatus();
      *moved = true;
      recv_pos_ += *received;
      if (recv_pos_ == phase_bytes) RETURN_IF_ERROR(CheckHeader());
      return absl::OkStatus();
    }
    const int64_t segment_first = segment_offset_[RecvSegment(k)];
    float* segment = data_ + segment_first;
    if (k >= n_ - 1 && element_bytes_ == 2) {
      // All-gather of 16-bit values: they land in wire_ (forwarded from
      // there as they are) and every whole value is decoded into data_.
      char* landing = reinterpret_cast<char*>(wire_ + segment_first);
      absl::StatusOr<size_t> received = transport_.left().RecvSome(
          landing + recv_pos_,
          static_cast<size_t>(
              std::min(phase_bytes - recv_pos_, owner_.chunk_bytes_)));
      if (!received.ok()) return InPhase(received.status(), k);
      if (*received == 0) return absl::OkStatus();
      *moved = true;
      const int64_t decoded = recv_pos_ / 2;
      recv_pos_ += *received;
      recv_ready_ = recv_pos_;
      owner_.bytes_received_ += *received;
      DecodeRange(segment_first + decoded, recv_pos_ / 2 - decoded);
      return absl::OkStatus();
    }
    if (k >= n_ - 1) {
      // All-gather: the bytes are final, so they land in place.
      absl::StatusOr<size_t> received = transport_.left().RecvSome(
          reinterpret_cast<char*>(segment) + recv_pos_,
          static_cast<size_t>(
              std::min(phase_bytes - recv_pos_, owner_.chunk_bytes_)));
      if (!received.ok()) return InPhase(received.status(), k);
      if (*received == 0) return absl::OkStatus();
      *moved = true;
      recv_pos_ += *received;
      recv_ready_ = recv_pos_;
      owner_.bytes_received_ += *received;
      return absl::OkStatus();
    }
    // Reduce-scatter: receive into the staging chunk, add every whole float
    // that has arrived, and start the chunk over once it is full.
    const int64_t room =
        std::min(owner_.chunk_bytes_ - staged_, phase_bytes - recv_pos_);
    absl::StatusOr<size_t> received = transport_.left().RecvSome(
        staging_ + staged_, static_cast<size_t>(room));
    if (!received.ok()) return InPhase(received.status(), k);
    if (*received == 0) return absl::OkStatus();
    *moved = true;
    staged_ += *received;
    recv_pos_ += *received;
    owner_.bytes_received_ += *received;
    const int64_t whole = staged_ / element_bytes_ * element_bytes_;
    if (whole > reduced_ && element_bytes_ == 2) {
      // Decode, accumulate in float32, round again for the next hop. The
      // last step finishes this rank's segment: scale it, and keep the
      // rounded value here too, as every other rank will decode it.
      const int64_t first = segment_first + (staging_start_ + reduced_) / 2;
      const int64_t values = (whole - reduced_) / 2;
      const uint16_t* source =
          reinterpret_cast<const uint16_t*>(staging_ + reduced_);
      const bool last = k == n_ - 2;
      for (int64_t i = 0; i < values; ++i) {
        float sum = data_[first + i] + DecodeHalf(wire_encoding_, source[i]);
        if (last) sum *= scale_;
        const uint16_t rounded = EncodeHalf(wire_encoding_, sum);
        wire_[first + i] = rounded;
        data_[first + i] = last ? DecodeHalf(wire_encoding_, rounded) : sum;
      }
      reduced_ = whole;
      recv_ready_ = staging_start_ + whole;
    } else if (whole > reduced_) {
      float* destination = segment + (staging_start_ + reduced_) / 4;
      const float* source = reinterpret_cast<const float*>(staging_ + reduced_);
      const int64_t floats = (whole - reduced_) / 4;
      // The last reduce-scatter step finishes this rank's segment: scale it
      // here, while it is in cache, instead of in a separate pass.
      if (k == n_ - 2 && scale_ != 1.0f) {
        AddScaledInto(destination, source, floats, scale_);
      } else {
        AddInto(destination, source, floats);
      }
      reduced_ = whole;
      recv_ready_ = staging_start_ + whole;
    }
    // A full chunk and a finished phase both end on a whole float.
    if (staged_ == owner_.chunk_bytes_ || recv_pos_ == phase_bytes) {
      staging_start_ += staged_;
      staged_ = 0;
      reduced_ = 0;
    }
    return absl::OkStatus();
  }

  absl::Status CheckHeader() const {
    const TcpConnection& left = transport_.left();
    if (std::memcmp(recv_header_.magic, kHeaderMagic, sizeof(kHeaderMagic)) !=
        0) {
      return absl::DataLossError(absl::StrCat(
          "ring: ", left.peer_name(),
          " sent bytes that are not an all-reduce header at all-reduce #",
          send_header_.sequence, " (the streams are out of step)"));
    }
    if (recv_header_.encoding != send_header_.encoding) {
      return absl::FailedPreconditionError(
          absl::StrCat("ring: ", left.peer_name(), " sends all-reduce #",
                       recv_header_.sequence, " (tag ", recv_header_.tag,
                       ") with wire encoding ", recv_header_.encoding,
                       " while rank ", rank_, " uses ", send_header_.encoding,
                       " (every rank must run with the same --compression)"));
    }
    if (recv_header_.sequence != send_header_.sequence ||
        recv_header_.tag != send_header_.tag ||
        recv_header_.count != send_header_.count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ring: ", left.peer_name(), " started all-reduce #",
          recv_header_.sequence, " (tag ", recv_header_.tag, ") of ",
          recv_header_.count, " floats while rank ", rank_,
          " started all-reduce #", send_header_.sequence, " (tag ",
          send_header_.tag, ") of ", send_header_.count,
          " floats (every rank must reduce the same buffers in the same "
          "order)"));
    }
    return absl::OkStatus();
  }

  // The right neighbour never sends; readable means it closed or broke.
  absl::Status CheckRightClosed() {
    char byte;
    absl::StatusOr<size_t> got = transport_.right().RecvSome(&byte, 1);
    if (!got.ok()) return InPhase(got.status(), send_phase_);
    if (*got > 0) {
      return InPhase(absl::DataLossError(absl::StrCat(
                         transport_.right().peer_name(),
                         " sent data on a connection that only carries data "
                         "to it")),
                     send_phase_);
    }
    return absl::OkStatus();
  }

  absl::Status Stalled(bool want_send, bool want_recv) const {
    const std::string timeout = absl::FormatDuration(transport_.timeout());
    std::string message;
    if (want_recv) {
      message = absl::StrCat(
          "ring: no data from ", transport_.left().peer_name(), " for ",
          timeout, " during ", PhaseName(recv_phase_), " (", recv_pos_, " of ",
          RecvPhaseBytes(recv_phase_), " bytes of this step received)");
    }
    if (want_send) {
      if (!message.empty()) absl::StrAppend(&message, "; and ");
      absl::StrAppend(&message,
                      want_recv ? "" : "ring: ", transport_.right().peer_name(),
                      " took no data for ", timeout, " during ",
                      PhaseName(send_phase_), " (", send_pos_, " of ",
                      SendPhaseBytes(send_phase_), " bytes of this step sent)");
    }
    if (message.empty()) {
      message = absl::StrCat("ring: rank ", rank_, " stalled for ", timeout);
    }
    return absl::DeadlineExceededError(message);
  }

  RingAllReduce& owner_;
  PeerTransport& transport_;
  float* data_;
  const Encoding wire_encoding_;
  const int64_t element_bytes_;  // on the wire: 4 (float32) or 2
  uint16_t* wire_;               // 16-bit runs: the values as sent
  const float scale_;
  const int n_;
  const int rank_;
  const int phases_;
  char* staging_;
  std::vector<int64_t> segment_offset_;
  std::vector<int64_t> segment_count_;
  Header send_header_;
  Header recv_header_;

  int send_phase_ = -1;
  int64_t send_pos_ = 0;
  int recv_phase_ = -1;
  int64_t recv_pos_ = 0;       // bytes of this phase received
  int64_t recv_ready_ = 0;     // bytes of this phase final (reduced or landed)
  int64_t staging_start_ = 0;  // phase byte where the staging chunk begins
  int64_t staged_ = 0;         // bytes in the staging chunk
  int64_t reduced_ = 0;        // of those, already added into the segment
};

RingAllReduce::RingAllReduce(PeerTransport* transport, int64_t chunk_bytes)
    : transport_(transport),
      chunk_bytes_(std::max<int64_t>(4096, chunk_bytes / 64 * 64)),
      staging_(transport->world_size() > 1 ? chunk_bytes_ / 4 : 0) {}

absl::Status RingAllReduce::Fail(absl::Status status) {
  // The streams are now out of step; shut the connections so the neighbours
  // fail at once rather than at their deadline, and refuse further work.
  transport_->Abort();
  broken_ = status;
  return status;
}

absl::Status RingAllReduce::Run(float* data, int64_t count, float scale,
                                uint32_t tag) {
  return RunWith(data, count, scale, tag, Encoding::kFloat32);
}

absl::Status RingAllReduce::RunHalfPrecision(float* data, int64_t count,
                                             float scale, uint32_t tag,
                                             Encoding wire) {
  if (wire != Encoding::kFp16 && wire != Encoding::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring: RunHalfPrecision takes fp16 or bf16, not encoding ",
                     static_cast<int>(wire)));
  }
  return RunWith(data, count, scale, tag, wire);
}

absl::Status RingAllReduce::RunWith(float* data, int64_t count, float scale,
                                    uint32_t tag, Encoding wire) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ring rank ", transport_->rank(),
        ": the ring broke in an earlier all-reduce: ", broken_.message()));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring: negative element count ", count));
  }
  if (count == 0) return absl::OkStatus();
  if (transport_->world_size() == 1) {
    if (scale != 1.0f) {
      ScaleInPlace(data, count, scale);
    }
    // One rank rounds as N would, so it stays the reference of the method.
    if (wire != Encoding::kFloat32) {
      for (int64_t i = 0; i < count; ++i) {
        data[i] = DecodeHalf(wire, EncodeHalf(wire, data[i]));
      }
    }
    return absl::OkStatus();
  }
  if (wire != Encoding::kFloat32 &&
      static_cast<int64_t>(wire_.size()) < count) {
    wire_.resize(count);
  }
  Pass pass(*this, data, count, scale, tag, wire);
  absl::Status status = pass.Run();
  ++sequence_;
  if (!status.ok()) return Fail(status);
  return absl::OkStatus();
}

}  // namespace gradsync
