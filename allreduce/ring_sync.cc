#include "allreduce/ring_sync.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "allreduce/ring_flags.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_token.h"
#include "core/sync/step_buckets.h"
#include "core/telemetry/trace.h"
#include "core/telemetry/derived_settings.h"
#include "nlohmann/json.hpp"

namespace gradsync {
RingSyncOptions RingSyncOptionsFromFlags() {
  RingSyncOptions options;
  options.chunk_bytes = int64_t{absl::GetFlag(FLAGS_ring_chunk_kb)} << 10;
  // (This Abseil keeps IsSpecifiedOnCommandLine private: a value other than
  // the default is what a flag changed.)
  const absl::CommandLineFlag& flag =
      absl::GetFlagReflectionHandle(FLAGS_ring_chunk_kb);
  if (flag.CurrentValue() != flag.DefaultValue()) options.chunk_source = "flag";
  options.socket_buffer_bytes = absl::GetFlag(FLAGS_ring_socket_buffer_kb)
                                << 10;
  return options;
}

RingSync::RingSync(const SyncContext& context, const RingSyncOptions& options,
                   AllReduceStrategy strategy)
    : context_(context), options_(options), strategy_(std::move(strategy)) {}

RingSync::~RingSync() {
  StopListening();
  StopThread();
}

void RingSync::StopListening() {
  if (loss_listener_ < 0) return;
  context_.rendezvous->RemoveLossListener(loss_listener_);
  loss_listener_ = -1;
}

absl::Status RingSync::Setup(const ParamLayout& layout, Device& device,
                             const SyncBuffers& buffers) {
  if (buffers.grads == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync=", strategy_.name, ": no gradient buffer"));
  }
  // The ring reduces host memory: on a GPU each bucket goes through a pinned
  // mirror (copied as soon as backward has produced it); on the CPU the
  // staging is the gradient buffer itself and costs nothing.
  ASSIGN_OR_RETURN(staging_, CreateHostStaging(device, layout, buffers.grads,
                                               context_.timeout));
  for (const Bucket& bucket : layout.buckets()) {
    buckets_.push_back(Span{bucket.offset, bucket.numel});
  }
  step_buckets_.Reset(static_cast<int>(buckets_.size()));

  RingTransportOptions transport_options;
  transport_options.rank = context_.identity.rank;
  transport_options.world_size = context_.identity.world_size;
  transport_options.job_id = context_.identity.job_id;
  transport_options.job_token = JobTokenOfThisProcess();
  transport_options.advertise_host = context_.identity.advertise_host;
  transport_options.timeout = context_.timeout;
  transport_options.socket_buffer_bytes = options_.socket_buffer_bytes;
  if (strategy_.peers) {
    transport_options.peers =
        strategy_.peers(context_.identity.rank, context_.identity.world_size);
  }
  ASSIGN_OR_RETURN(transport_, RingTransport::Create(transport_options,
                                                     context_.rendezvous));
  if (strategy_.create) {
    ASSIGN_OR_RETURN(ring_, strategy_.create(transport_.get(), options_));
  } else {
    ring_ =
        std::make_unique<RingAllReduce>(transport_.get(), options_.chunk_bytes);
  }
  // What set-up moved (the selector's link calibration) is no step's.
  last_bytes_sent_ = ring_->bytes_sent();
  last_bytes_received_ = ring_->bytes_received();
  // A lost member anywhere ends the job: break the ring at once, so a step
  // waiting on a neighbour cut off by a partition (whose socket never
  // closes) fails now, and Finish names the loss (ExplainFailure).
  if (context_.rendezvous != nullptr) {
    loss_listener_ = context_.rendezvous->AddLossListener(
        [transport = transport_.get()](const absl::Status&) {
          transport->Abort();
        });
  }
  if (context_.identity.rank == 0) {
    RecordSetting("ring_chunk_kb", options_.chunk_bytes / 1024.0,
                  options_.chunk_source);
  }
  if (context_.identity.world_size > 1) {
    GS_LOG(INFO) << strategy_.name << ": rank " << context_.identity.rank
                 << " of " << context_.identity.world_size << ", sending to "
                 << transport_->right().peer_name() << ", receiving from "
                 << transport_->left().peer_name() << ", "
                 << transport_options.peers.size() << " other peers; "
                 << buckets_.size() << " buckets, chunk "
                 << options_.chunk_bytes / 1024 << " KiB, socket buffers "
                 << transport_->granted_send_buffer_bytes() << " bytes";
  }
  thread_ = std::thread([this] { CommunicationLoop(); });
  return absl::OkStatus();
}

bool RingSync::MarkReady(int bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Status marked = step_buckets_.MarkReady(bucket);
  // A trainer bug; reported by Finish, since BucketReady cannot fail.
  if (!marked.ok() && error_.ok()) error_ = marked;
  return marked.ok();
}

void RingSync::BucketReady(int bucket) {
  if (!MarkReady(bucket)) return;
  // Without mu_ held: on the CPU the callback runs inline and takes it.
  staging_->Download(bucket, [this, bucket](absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok()) {
      queue_.push_back(bucket);
    } else {
      if (error_.ok()) error_ = status;
      ++completed_;  // nothing to all-reduce; Finish reports the error
    }
    changed_.notify_all();
  });
}

void RingSync::CommunicationLoop() {
  const float scale = 1.0f / static_cast<float>(context_.identity.world_size);
  while (true) {
    int bucket;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left to do
      bucket = queue_.front();
      queue_.pop_front();
    }
    const Span& span = buckets_[bucket];
    const absl::Time start = absl::Now();
    const int64_t trace_start = TraceRecorder::NowMicros();
    // After a failure the ring refuses work at once, so the rest of the
    // step's buckets drain quickly and Finish can report the first error.
    absl::Status status = ring_->Run(staging_->host_bucket(bucket), span.numel,
                                     scale, static_cast<uint32_t>(bucket));
    if (status.ok()) staging_->Upload(bucket);
    const double elapsed_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (TraceRecorder* trace = CurrentTrace()) {
      trace->Complete(absl::StrCat(strategy_.name, " bucket ", bucket), "comm",
                      kTrackCommunication, trace_start,
                      TraceRecorder::NowMicros() - trace_start);
    }
    std::lock_guard<std::mutex> lock(mu_);
    allreduce_ms_ += elapsed_ms;
    if (!status.ok() && error_.ok()) {
      error_ = Annotate(
          status, absl::StrCat("worker ", context_.identity.rank, ", step ",
                               step_buckets_.step(), ", bucket ", bucket, " (",
                               span.numel * 4, " bytes)"));
    }
    ++completed_;
    changed_.notify_all();
  }
}

absl::Status RingSync::Finish(StepStats& stats) {
  if (!ring_) {
    return absl::FailedPreconditionError(
        absl::StrCat(strategy_.name, ": Finish before Setup"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (error_.ok()) error_ = step_buckets_.CheckAllReady();
  // No deadline of its own: every all-reduce already fails when its peers
  // stall for --timeout_s, so this wait ends.
  changed_.wait(lock,
                [this] { return completed_ == step_buckets_.num_ready(); });
  if (!error_.ok()) {
    const absl::Status error = error_;
    lock.unlock();
    // A neighbour that closed its socket is often only the messenger.
    return ExplainStepFailure(context_.rendezvous, error);
  }
  RETURN_IF_ERROR(staging_->FinishStep());

  stats.bytes_sent += ring_->bytes_sent() - last_bytes_sent_;
  stats.bytes_recv += ring_->bytes_received() - last_bytes_received_;
  stats.extra.emplace_back("allreduce_ms", allreduce_ms_);
  last_bytes_sent_ = ring_->bytes_sent();
  last_bytes_received_ = ring_->bytes_received();
  allreduce_ms_ = 0;
  completed_ = 0;
  step_buckets_.NextStep();
  return absl::OkStatus();
}

void RingSync::StopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status RingSync::Shutdown() {
  bool in_flight = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight = completed_ != step_buckets_.num_ready();
  }
  // A step abandoned halfway (the trainer is bailing out): break the ring so
  // the communication thread stops now rather than at its deadline.
  if (in_flight && transport_) transport_->Abort();
  StopThread();
  StopListening();
  if (transport_) transport_->Close();
  return absl::OkStatus();
}

std::string RingSync::SummaryJson() const {
  if (!ring_) return "{}";
  nlohmann::json summary = {
      {"algorithm", strategy_.name},
      {"chunk_bytes", options_.chunk_bytes},
      {"socket_buffer_bytes_requested", options_.socket_buffer_bytes},
      {"socket_buffer_bytes_granted", transport_->granted_send_buffer_bytes()},
      {"bytes_sent", ring_->bytes_sent()},
      {"bytes_recv", ring_->bytes_received()},
  };
  const nlohmann::json own =
      nlohmann::json::parse(ring_->SummaryJson(), nullptr, false);
  if (own.is_object()) summary.update(own);
  return summary.dump();
}

namespace {

absl::StatusOr<std::unique_ptr<GradientSync>> CreateRingSync(
    const SyncContext& context) {
  if (context.identity.world_size > 1 && context.rendezvous == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--sync=ring with ", context.identity.world_size,
        " workers needs the coordinator to find the ring neighbours"));
  }
  return std::unique_ptr<GradientSync>(
      new RingSync(context, RingSyncOptionsFromFlags()));
}

}  // namespace

GRADSYNC_REGISTER_SYNC(ring, CreateRingSync);

}  // namespace gradsync
