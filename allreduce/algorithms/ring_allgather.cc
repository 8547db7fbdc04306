// Ring all-gather of variable-length blobs (ring_allgather.h).
#include "allreduce/algorithms/ring_allgather.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

constexpr char kFrameMagic[4] = {'G', 'S', 'A', 'G'};

// In host byte order, as the ring's own header (ring_allreduce.cc).
struct Frame {
  char magic[4];
  uint32_t sequence;
  uint32_t tag;
  uint32_t origin;  // the rank whose blob follows
  uint64_t length;
};
static_assert(sizeof(Frame) == RingAllGather::kHeaderBytes,
              "the frame header is 24 bytes on the wire");

// At most this much is handed to one system call.
constexpr int64_t kMaxTransfer = 1 << 20;

}  // namespace

absl::Status RingAllGather::Fail(absl::Status status) {
  transport_->Abort();
  broken_ = status;
  return status;
}

absl::StatusOr<std::vector<std::string>> RingAllGather::Run(
    std::string own, uint32_t tag, int64_t max_blob_bytes) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ring all-gather rank ", transport_->rank(),
        ": the ring broke in an earlier all-gather: ", broken_.message()));
  }
  const int n = transport_->world_size();
  const int rank = transport_->rank();
  if (static_cast<int64_t>(own.size()) > max_blob_bytes) {
    return absl::InternalError(absl::StrCat(
        "ring all-gather: rank ", rank, "'s own blob of ", own.size(),
        " bytes is over the limit of ", max_blob_bytes));
  }
  std::vector<std::string> blobs(n);
  blobs[rank] = std::move(own);
  // Step s forwards the blob of rank (rank - s) and receives (rank - s - 1).
  for (int s = 0; s < n - 1; ++s) {
    const int out_rank = ((rank - s) % n + n) % n;
    const int in_rank = ((rank - s - 1) % n + n) % n;
    absl::Status status = Step(blobs[out_rank], out_rank, in_rank, tag,
                               max_blob_bytes, &blobs[in_rank]);
    if (!status.ok()) {
      ++sequence_;
      return Fail(Annotate(
          status, absl::StrCat("ring all-gather #", sequence_ - 1, " (tag ",
                               tag, "), step ", s + 1, " of ", n - 1)));
    }
  }
  ++sequence_;
  return blobs;
}

absl::Status RingAllGather::Step(const std::string& out, int out_rank,
                                 int in_rank, uint32_t tag,
                                 int64_t max_blob_bytes, std::string* in) {
  TcpConnection& right = transport_->right();
  TcpConnection& left = transport_->left();
  Frame send_frame{
      {kFrameMagic[0], kFrameMagic[1], kFrameMagic[2], kFrameMagic[3]},
      sequence_,
      tag,
      static_cast<uint32_t>(out_rank),
      static_cast<uint64_t>(out.size())};
  Frame recv_frame;
  std::memset(&recv_frame, 0, sizeof(recv_frame));
  const int64_t send_total = kHeaderBytes + static_cast<int64_t>(out.size());
  int64_t sent = 0;
  int64_t received = 0;
  int64_t recv_total = kHeaderBytes;  // until the frame says more
  const absl::Duration timeout = transport_->timeout();
  absl::Time last_progress = absl::Now();
  while (sent < send_total || received < recv_total) {
    bool moved = false;
    if (sent < send_total) {
      const char* source =
          sent < kHeaderBytes
              ? reinterpret_cast<const char*>(&send_frame) + sent
              : out.data() + (sent - kHeaderBytes);
      const int64_t piece = sent < kHeaderBytes
                                ? kHeaderBytes - sent
                                : std::min(send_total - sent, kMaxTransfer);
      ASSIGN_OR_RETURN(size_t n, right.SendSome(source, piece));
      if (n > 0) {
        moved = true;
        if (sent >= kHeaderBytes) {
          bytes_sent_ += n;
        } else if (sent + static_cast<int64_t>(n) > kHeaderBytes) {
          bytes_sent_ += sent + n - kHeaderBytes;
        }
        sent += n;
      }
    }
    if (received < recv_total) {
      char* target = received < kHeaderBytes
                         ? reinterpret_cast<char*>(&recv_frame) + received
                         : &(*in)[received - kHeaderBytes];
      const int64_t piece = received < kHeaderBytes
                                ? kHeaderBytes - received
                                : std::min(recv_total - received, kMaxTransfer);
      ASSIGN_OR_RETURN(size_t n, left.RecvSome(target, piece));
      if (n > 0) {
        moved = true;
        const bool header_done_now =
            received < kHeaderBytes &&
            received + static_cast<int64_t>(n) == kHeaderBytes;
        if (received >= kHeaderBytes) bytes_received_ += n;
        received += n;
        if (header_done_now) {
          if (std::memcmp(recv_frame.magic, kFrameMagic, 4) != 0) {
            return absl::DataLossError(absl::StrCat(
                left.peer_name(),
                " sent bytes that are not an all-gather frame (the streams "
                "are out of step)"));
          }
          if (recv_frame.sequence != sequence_ || recv_frame.tag != tag ||
              recv_frame.origin != static_cast<uint32_t>(in_rank)) {
            return absl::FailedPreconditionError(absl::StrCat(
                left.peer_name(), " sent all-gather #", recv_frame.sequence,
                " (tag ", recv_frame.tag, ", rank ", recv_frame.origin,
                "'s blob) while rank ", transport_->rank(), " expected #",
                sequence_, " (tag ", tag, ", rank ", in_rank,
                "'s blob): every rank must gather the same buckets in the "
                "same order"));
          }
          if (recv_frame.length > static_cast<uint64_t>(max_blob_bytes)) {
            return absl::DataLossError(absl::StrCat(
                left.peer_name(), " announced a blob of ", recv_frame.length,
                " bytes for rank ", in_rank, ", over the limit of ",
                max_blob_bytes, " for this bucket"));
          }
          in->assign(recv_frame.length, '\0');
          recv_total = kHeaderBytes + static_cast<int64_t>(recv_frame.length);
        }
      }
    }
    if (moved) {
      last_progress = absl::Now();
      continue;
    }
    const bool want_send = sent < send_total;
    const bool want_recv = received < recv_total;
    const absl::Time deadline = last_progress + timeout;
    ASSIGN_OR_RETURN(
        RingIoReadiness ready,
        transport_->WaitForIo(want_send, want_recv,
                              /*watch_right=*/want_send, deadline));
    if (!ready.can_send && !ready.can_recv && !ready.right_readable &&
        absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          want_recv
              ? absl::StrCat("no data from ", left.peer_name(), " (", received,
                             " of ", recv_total, " bytes received)")
              : "",
          want_recv && want_send ? "; " : "",
          want_send ? absl::StrCat(right.peer_name(), " took no data (", sent,
                                   " of ", send_total, " bytes sent)")
                    : "",
          " for ", absl::FormatDuration(timeout)));
    }
    if (ready.right_readable && !ready.can_recv && want_send) {
      char byte;
      ASSIGN_OR_RETURN(size_t got, right.RecvSome(&byte, 1));
      if (got > 0) {
        return absl::DataLossError(absl::StrCat(
            right.peer_name(),
            " sent data on a connection that only carries data to it"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gradsync
