#include "allreduce/allreduce_sync.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "allreduce/algorithms/cost_model.h"
#include "allreduce/algorithms/peer_link_probe.h"
#include "allreduce/algorithms/selecting_allreduce.h"
#include "allreduce/allreduce_table.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/job_token.h"
#include "core/sync/step_buckets.h"
#include "core/telemetry/derived_settings.h"
#include "core/telemetry/trace.h"
#include "nlohmann/json.hpp"

namespace gradsync {

AllReduceSync::AllReduceSync(const SyncContext& context,
                             const AllReduceEntry& algorithm,
                             const AllReduceSyncOptions& options)
    : context_(context),
      entry_(algorithm),
      options_(options),
      compressor_(context.compression, context.compression_seed),
      error_feedback_(context.compression, context.identity.rank,
                      context.identity.world_size),
      priority_(context.schedule.kind == ScheduleKind::kPriority) {}

namespace {

// Whether the link must be probed for priority's derived partition size:
// no size given, no link given, and the algorithm holds no link of its own.
bool NeedsLinkForPartitions(const SyncContext& context,
                            const AllReduceEntry& entry,
                            const AlgorithmOptions& options) {
  return context.schedule.kind == ScheduleKind::kPriority &&
         context.schedule.partition_bytes == 0 &&
         context.identity.world_size > 1 &&
         entry.kind != AllReduceKind::kSelecting &&
         (options.link.alpha_s <= 0 || options.link.bytes_per_s <= 0);
}

}  // namespace

void AllReduceSync::SetSpans(const ParamLayout& layout) {
  buckets_.clear();
  for (const Bucket& bucket : layout.buckets()) {
    buckets_.push_back(
        BucketSpan{bucket.offset, bucket.numel, bucket.sparse_row_width});
  }
  layout_buckets_ = layout.buckets();
  if (priority_) {
    partitions_.Reset(layout_buckets_, partition_bytes_, cut_buckets_);
    arrived_.assign(buckets_.size(), false);
    bucket_done_.assign(buckets_.size(), false);
    partitions_left_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      partitions_left_.push_back(
          static_cast<int>(partitions_.partitions(b).size()));
    }
    agreed_prefix_ = 0;
    agreements_ = 0;
  }
}

AllReduceSync::~AllReduceSync() {
  StopListening();
  StopThread();
}

void AllReduceSync::StopListening() {
  if (loss_listener_ < 0) return;
  context_.rendezvous->RemoveLossListener(loss_listener_);
  loss_listener_ = -1;
}

absl::Status AllReduceSync::Setup(const ParamLayout& layout, Device& device,
                                  const SyncBuffers& buffers) {
  if (buffers.grads == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync=", entry_.name, ": no gradient buffer"));
  }
  // The ring reduces host memory: on a GPU each bucket goes through a pinned
  // mirror (copied as soon as backward has produced it); on the CPU the
  // staging is the gradient buffer itself and costs nothing.
  device_ = &device;
  grads_ = buffers.grads;
  ASSIGN_OR_RETURN(staging_, CreateHostStaging(device, layout, buffers.grads,
                                               context_.timeout));
  SetSpans(layout);
  step_buckets_.Reset(static_cast<int>(buckets_.size()));
  reduced_.assign(buckets_.size(), false);
  RETURN_IF_ERROR(error_feedback_.Setup(layout.total_numel(), schedule_));
  steps_done_ = schedule_.start_step;

  PeerTransportOptions transport_options;
  transport_options.rank = context_.identity.rank;
  transport_options.world_size = context_.identity.world_size;
  transport_options.job_id = context_.identity.job_id;
  transport_options.job_token = JobTokenOfThisProcess();
  transport_options.advertise_host = context_.identity.advertise_host;
  transport_options.timeout = context_.timeout;
  transport_options.socket_buffer_bytes = options_.socket_buffer_bytes;
  transport_options.peers = entry_.peers(
      context_.identity.rank, context_.identity.world_size, options_.algorithm);
  if (NeedsLinkForPartitions(context_, entry_, options_.algorithm)) {
    // The probe's partner, for the link that sizes the partitions.
    const int partner = ProbePartner(context_.identity.rank,
                                     context_.identity.world_size);
    if (partner >= 0 &&
        std::find(transport_options.peers.begin(),
                  transport_options.peers.end(),
                  partner) == transport_options.peers.end()) {
      transport_options.peers.push_back(partner);
    }
  }
  ASSIGN_OR_RETURN(transport_, PeerTransport::Create(transport_options,
                                                     context_.rendezvous));
  ASSIGN_OR_RETURN(algorithm_,
                   entry_.create(transport_.get(), options_.algorithm));
  const bool ring = entry_.kind == AllReduceKind::kRing;
  if (!ring) algorithm_->SetEagerBytes(options_.eager_bytes);
  reducer_ = std::make_unique<BucketReducer>(
      entry_.name, context_.identity.world_size, algorithm_.get(),
      transport_.get(), compressor_, error_feedback_, options_.row_sparse);
  if (priority_) {
    RETURN_IF_ERROR(ResolveSchedule(layout));
    SetSpans(layout);  // cuts the buckets with the resolved size
  }
  // What set-up moved (the selector's link calibration, the probe for the
  // partitions) is no step's.
  last_bytes_sent_ = algorithm_->bytes_sent();
  last_bytes_received_ = algorithm_->bytes_received();
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
    // The chunk the ring runs with: RingAllReduce rounds the option to
    // whole floats per rank.
    const int64_t chunk_bytes =
        ring ? static_cast<RingAllReduce*>(algorithm_.get())->chunk_bytes()
             : options_.algorithm.chunk_bytes;
    RecordSetting("ring_chunk_kb", chunk_bytes / 1024.0, options_.chunk_source);
    if (!ring) {
      RecordSetting("allreduce_eager_kb", options_.eager_bytes / 1024.0,
                    options_.eager_bytes == PeerExchange::kDefaultEagerBytes
                        ? "default: covers the clear to send's flight on "
                          "1 Gbit/s links up to 2 ms one way "
                          "(allreduce/algorithms/peer_exchange.h)"
                        : "flag");
    }
  }
  if (context_.identity.world_size > 1) {
    GS_LOG(INFO) << entry_.name << ": rank " << context_.identity.rank << " of "
                 << context_.identity.world_size << ", sending to "
                 << transport_->right().peer_name() << ", receiving from "
                 << transport_->left().peer_name() << ", "
                 << transport_options.peers.size() << " other peers; "
                 << buckets_.size() << " buckets, chunk "
                 << options_.algorithm.chunk_bytes / 1024
                 << " KiB, socket buffers "
                 << transport_->granted_send_buffer_bytes() << " bytes"
                 << (ring ? std::string()
                          : absl::StrCat(
                                ", eager prefix before a clear to send ",
                                options_.eager_bytes / 1024, " KiB"));
  }
  if (priority_) {
    thread_ = std::thread([this] { PriorityLoop(); });
  } else {
    thread_ = std::thread([this] { CommunicationLoop(); });
  }
  return absl::OkStatus();
}

absl::Status AllReduceSync::ResolveSchedule(const ParamLayout& layout) {
  const ScheduleOptions& schedule = context_.schedule;
  const int n = context_.identity.world_size;
  // A codec that encodes a bucket as one unit (a top-k, a one-bit scale, a
  // random-k draw per bucket) would compute something else over parts of
  // it: those buckets keep their encoding and are only ordered. fp16/bf16
  // round each value alone, so they are cut like float32.
  const CompressionMethod method = compressor_.spec().method;
  cut_buckets_ = method == CompressionMethod::kNone ||
                 method == CompressionMethod::kFp16 ||
                 method == CompressionMethod::kBf16;
  std::string partition_source;
  if (!cut_buckets_) {
    partition_bytes_ = 0;
    partition_source = absl::StrCat(
        "--compression=", compressor_.spec().ToString(),
        " encodes whole buckets: they are ordered by priority, not cut");
  } else if (schedule.partition_bytes > 0) {
    partition_bytes_ = schedule.partition_bytes;
    partition_source = "flag";
  } else if (n == 1) {
    partition_bytes_ = 0;
    partition_source = "one worker: nothing crosses a link, buckets stay whole";
  } else {
    LinkCost link = options_.algorithm.link;
    std::string link_source = "given";
    auto* selector = dynamic_cast<SelectingAllReduce*>(algorithm_.get());
    if (selector != nullptr) {
      link = selector->link();
      link_source = selector->probed() ? "probed" : "given";
    } else if (link.alpha_s <= 0 || link.bytes_per_s <= 0) {
      absl::StatusOr<PeerLinkProbeResult> probe = ProbePeerLink(
          transport_.get(), options_.algorithm.chunk_bytes, *algorithm_);
      if (!probe.ok()) {
        return Annotate(
            probe.status(),
            "probing the link to size --schedule=priority's partitions");
      }
      link = probe->link;
      link_source = "probed";
    }
    const double eager =
        entry_.kind == AllReduceKind::kRing ? 0.0 : options_.eager_bytes;
    CollectiveSeconds predict;
    if (selector != nullptr) {
      // The selector runs the candidate predicted fastest for each size.
      predict = [n, selector, eager](double bytes) {
        double best = -1;
        for (const AllReduceEntry* candidate : SelectorCandidates()) {
          const double seconds = candidate->predict(
              n, bytes, selector->links().For(candidate->kind), eager);
          if (best < 0 || seconds < best) best = seconds;
        }
        return best;
      };
    } else if (entry_.kind == AllReduceKind::kHierarchical) {
      // One link figure for inside and across the nodes: the probe cannot
      // tell them apart (selecting_allreduce.h says the same).
      const int per_node = options_.algorithm.ranks_per_node;
      predict = [n, per_node, link, eager](double bytes) {
        return HierarchicalAllReduceSeconds(n, per_node, bytes, link, link,
                                            eager);
      };
    } else {
      const AllReduceEntry& entry = entry_;
      predict = [n, &entry, link, eager](double bytes) {
        return entry.predict(n, bytes, link, eager);
      };
    }
    partition_bytes_ = DerivePartitionBytes(predict);
    partition_source = absl::StrCat(
        "derived: the smallest power of two from ",
        kMinDerivedPartitionBytes / 1024, " KiB whose all-reduce spends ",
        kPartitionLatencyShare - 1,
        "x its latency terms on bytes, so cutting adds at most ~1/",
        kPartitionLatencyShare, " in latencies (alpha ", link.alpha_s * 1e6,
        " us, B ", link.bytes_per_s * 8 / 1e9, " Gbit/s, ", link_source,
        "; allreduce/partition_schedule.h)");
  }
  std::string credit_source;
  if (schedule.credit_bytes > 0) {
    credit_bytes_ = schedule.credit_bytes;
    credit_source = "flag";
  } else {
    int64_t unit = partition_bytes_;
    if (unit <= 0) {
      for (const Bucket& bucket : layout.buckets())
        unit = std::max(unit, bucket.numel * 4);
    }
    credit_bytes_ = kDerivedCreditPartitions * unit;
    credit_source = absl::StrCat(
        "derived: ", kDerivedCreditPartitions,
        " partitions between two agreements on the ready buckets "
        "(allreduce/partition_schedule.h)");
  }
  if (context_.identity.rank == 0) {
    RecordSetting("partition_kb", partition_bytes_ / 1024.0, partition_source);
    RecordSetting("credit_kb", credit_bytes_ / 1024.0, credit_source);
  }
  GS_LOG(INFO) << entry_.name << ": --schedule=priority, partitions of "
               << (partition_bytes_ > 0
                       ? absl::StrCat(partition_bytes_ / 1024, " KiB")
                       : std::string("whole buckets"))
               << " (" << partition_source << "), credit "
               << credit_bytes_ / 1024 << " KiB (" << credit_source << ")";
  return absl::OkStatus();
}

bool AllReduceSync::MarkReady(int bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Status marked = step_buckets_.MarkReady(bucket);
  // A trainer bug; reported by Finish, since BucketReady cannot fail.
  if (!marked.ok() && error_.ok()) error_ = marked;
  return marked.ok();
}

void AllReduceSync::BucketReady(int bucket) {
  if (!MarkReady(bucket)) return;
  // Without mu_ held: on the CPU the callback runs inline and takes it.
  staging_->Download(bucket, [this, bucket](absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok()) {
      if (priority_) {
        arrived_[bucket] = true;
      } else {
        queue_.push_back(bucket);
      }
    } else {
      if (error_.ok()) error_ = status;
      if (priority_) bucket_done_[bucket] = true;
      ++completed_;  // nothing to all-reduce; Finish reports the error
    }
    changed_.notify_all();
  });
}

void AllReduceSync::CommunicationLoop() {
  const float scale = 1.0f / static_cast<float>(context_.identity.world_size);
  while (true) {
    int bucket;
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left to do
      bucket = queue_.front();
      queue_.pop_front();
      step = steps_done_;
    }
    const BucketSpan& span = buckets_[bucket];
    const absl::Time start = absl::Now();
    const int64_t trace_start = TraceRecorder::NowMicros();
    // After a failure the ring refuses work at once, so the rest of the
    // step's buckets drain quickly and Finish can report the first error.
    absl::Status status = reducer_->Reduce(
        bucket, static_cast<uint32_t>(bucket), step, span,
        staging_->host_bucket(bucket), scale);
    if (status.ok()) staging_->Upload(bucket);
    if (status.ok() && options_.after_collective) {
      options_.after_collective(
          BucketPartition{bucket, 0, span.offset, span.numel});
    }
    const double elapsed_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (TraceRecorder* trace = CurrentTrace()) {
      trace->Complete(absl::StrCat(entry_.name, " bucket ", bucket), "comm",
                      kTrackCommunication, trace_start,
                      TraceRecorder::NowMicros() - trace_start);
    }
    std::lock_guard<std::mutex> lock(mu_);
    allreduce_ms_ += elapsed_ms;
    codec_ms_ += reducer_->codec_ms();
    if (reducer_->row_sparse() > 0) ++row_sparse_gathered_;
    if (reducer_->row_sparse() < 0) ++row_sparse_dense_;
    if (!status.ok() && error_.ok()) {
      error_ = Annotate(
          status, absl::StrCat("worker ", context_.identity.rank, ", step ",
                               step_buckets_.step(), ", bucket ", bucket, " (",
                               span.numel * 4, " bytes)"));
    }
    ++completed_;
    if (status.ok()) reduced_[bucket] = true;
    changed_.notify_all();
  }
}

int AllReduceSync::LocalReadyPrefixLocked() const {
  int prefix = 0;
  while (prefix < static_cast<int>(arrived_.size()) && arrived_[prefix]) {
    ++prefix;
  }
  return prefix;
}

void AllReduceSync::DrainAfterErrorLocked() {
  for (size_t b = 0; b < arrived_.size(); ++b) {
    if (arrived_[b] && !bucket_done_[b]) {
      bucket_done_[b] = true;
      ++completed_;
    }
  }
  changed_.notify_all();
}

absl::Status AllReduceSync::ReducePartition(const BucketPartition& partition,
                                            int64_t step, float scale) {
  const Bucket& bucket = layout_buckets_[partition.bucket];
  const BucketSpan span{partition.offset, partition.numel,
                        bucket.sparse_row_width};
  float* data = staging_->host_bucket(partition.bucket) +
                (partition.offset - bucket.offset);
  const int64_t trace_start = TraceRecorder::NowMicros();
  absl::Status status = reducer_->Reduce(
      partition.bucket,
      PartitionTag(partition, static_cast<int>(layout_buckets_.size())), step,
      span, data, scale);
  if (TraceRecorder* trace = CurrentTrace()) {
    trace->Complete(absl::StrCat(entry_.name, " bucket ", partition.bucket,
                                 " part ", partition.index),
                    "comm", kTrackCommunication, trace_start,
                    TraceRecorder::NowMicros() - trace_start);
  }
  if (!status.ok()) {
    return Annotate(
        status, absl::StrCat("worker ", context_.identity.rank, ", step ",
                             step, ", bucket ", partition.bucket, " partition ",
                             partition.index, " (", partition.numel * 4,
                             " bytes at float ", partition.offset, ")"));
  }
  return absl::OkStatus();
}

// One round: wait until this rank's ready prefix holds a partition not yet
// taken, agree on the prefix ready everywhere (until it covers the step),
// take the batch the credit allows and run it. Everything the ranks decide
// on is equal on every rank (partition_schedule.h), so they start the same
// collectives in the same order.
void AllReduceSync::PriorityLoop() {
  const int n = context_.identity.world_size;
  const float scale = 1.0f / static_cast<float>(n);
  while (true) {
    int local_prefix = 0;
    int agreed = 0;
    int num_buckets = 0;
    int64_t step = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto work = [this] {
        return error_.ok() &&
               partitions_.HasUntakenBelow(LocalReadyPrefixLocked());
      };
      auto drain = [this] {
        if (error_.ok()) return false;
        for (size_t b = 0; b < arrived_.size(); ++b) {
          if (arrived_[b] && !bucket_done_[b]) return true;
        }
        return false;
      };
      changed_.wait(lock, [&] { return stop_ || work() || drain(); });
      if (drain()) {
        DrainAfterErrorLocked();
        continue;
      }
      if (!work()) return;  // stopping with nothing left to do
      local_prefix = LocalReadyPrefixLocked();
      agreed = agreed_prefix_;
      num_buckets = partitions_.num_buckets();
      step = steps_done_;
    }
    if (agreed < num_buckets) {
      absl::Status status;
      if (n > 1) {
        // A few floats, whichever algorithm runs: its own latency terms.
        std::vector<float> votes = ReadyPrefixVote(local_prefix, num_buckets);
        status = algorithm_->Run(votes.data(), num_buckets, 1.0f,
                                 kReadyPrefixTag);
        agreed = AgreedReadyPrefix(votes, n);
      } else {
        agreed = local_prefix;
      }
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.ok()) {
          error_ = Annotate(
              status, absl::StrCat("worker ", context_.identity.rank,
                                   ", step ", step,
                                   ", agreeing on the buckets ready on every "
                                   "worker (--schedule=priority)"));
        }
        changed_.notify_all();
        continue;
      }
    }
    std::vector<BucketPartition> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (agreed_prefix_ < num_buckets) ++agreements_;
      agreed_prefix_ = agreed;
      batch = partitions_.TakeBatch(agreed, credit_bytes_);
    }
    for (const BucketPartition& partition : batch) {
      const absl::Time start = absl::Now();
      const absl::Status status = ReducePartition(partition, step, scale);
      const double elapsed_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
      bool bucket_complete = false;
      if (status.ok()) {
        if (options_.after_collective) options_.after_collective(partition);
        std::lock_guard<std::mutex> lock(mu_);
        bucket_complete = --partitions_left_[partition.bucket] == 0;
      }
      // Outside the lock, as under fifo: a GPU's copy back is queued here.
      if (bucket_complete) staging_->Upload(partition.bucket);
      std::lock_guard<std::mutex> lock(mu_);
      allreduce_ms_ += elapsed_ms;
      codec_ms_ += reducer_->codec_ms();
      if (reducer_->row_sparse() > 0) ++row_sparse_gathered_;
      if (reducer_->row_sparse() < 0) ++row_sparse_dense_;
      if (!status.ok()) {
        if (error_.ok()) error_ = status;
        changed_.notify_all();
        break;  // the rest of the batch: drained with the error
      }
      if (bucket_complete) {
        reduced_[partition.bucket] = true;
        bucket_done_[partition.bucket] = true;
        ++completed_;
        changed_.notify_all();
      }
    }
  }
}

absl::Status AllReduceSync::WaitBucket(int bucket) {
  if (!algorithm_) {
    return absl::FailedPreconditionError(
        absl::StrCat(entry_.name, ": WaitBucket before Setup"));
  }
  if (staging_->is_mirror()) {
    return absl::UnimplementedError(absl::StrCat(
        entry_.name, ": on a GPU a bucket reaches the device with the step"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (bucket < 0 || bucket >= static_cast<int>(reduced_.size()) ||
      !step_buckets_.ready(bucket)) {
    return absl::FailedPreconditionError(
        absl::StrCat(entry_.name, ": WaitBucket(", bucket, ") of step ",
                     step_buckets_.step(), ", which was not handed over"));
  }
  // No deadline of its own, as in Finish: the all-reduce under way fails
  // when a peer stalls for --timeout_s and sets error_.
  changed_.wait(lock,
                [this, bucket] { return reduced_[bucket] || !error_.ok(); });
  if (reduced_[bucket]) return absl::OkStatus();
  const absl::Status error = error_;
  lock.unlock();
  return ExplainStepFailure(context_.rendezvous, error);
}

absl::Status AllReduceSync::Finish(StepStats& stats) {
  if (!algorithm_) {
    return absl::FailedPreconditionError(
        absl::StrCat(entry_.name, ": Finish before Setup"));
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

  // Counted by the algorithm and the all-gather as the bytes were sent.
  stats.bytes_sent += algorithm_->bytes_sent() - last_bytes_sent_ +
                      reducer_->gather_bytes_sent() - last_gather_sent_;
  stats.bytes_recv += algorithm_->bytes_received() - last_bytes_received_ +
                      reducer_->gather_bytes_received() - last_gather_received_;
  stats.extra.emplace_back("allreduce_ms", allreduce_ms_);
  if (compressor_.spec().method != CompressionMethod::kNone) {
    stats.extra.emplace_back("codec_ms", codec_ms_);
  }
  last_bytes_sent_ = algorithm_->bytes_sent();
  last_bytes_received_ = algorithm_->bytes_received();
  last_gather_sent_ = reducer_->gather_bytes_sent();
  last_gather_received_ = reducer_->gather_bytes_received();
  allreduce_ms_ = 0;
  codec_ms_ = 0;
  completed_ = 0;
  std::fill(reduced_.begin(), reduced_.end(), false);
  if (priority_) {
    stats.extra.emplace_back("schedule_agreements",
                             static_cast<double>(agreements_));
    total_agreements_ += agreements_;
    partitions_.NewStep();
    std::fill(arrived_.begin(), arrived_.end(), false);
    std::fill(bucket_done_.begin(), bucket_done_.end(), false);
    for (size_t b = 0; b < partitions_left_.size(); ++b) {
      partitions_left_[b] = static_cast<int>(partitions_.partitions(b).size());
    }
    agreed_prefix_ = 0;
    agreements_ = 0;
  }
  step_buckets_.NextStep();
  const int64_t steps_done = ++steps_done_;
  lock.unlock();
  // The residual the communication thread left for this step, saved when
  // the trainer checkpoints at it (error_feedback.h).
  return error_feedback_.AfterStep(steps_done);
}

// The transport and the algorithm do not know buckets: only the spans, the
// staging (one pinned mirror per bucket on a GPU) and the step's marks
// change. Between steps the communication thread is idle on an empty queue.
absl::Status AllReduceSync::Rebucket(const ParamLayout& layout) {
  if (!algorithm_) {
    return absl::FailedPreconditionError(
        absl::StrCat(entry_.name, ": Rebucket before Setup"));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<HostStaging> staging,
      CreateHostStaging(*device_, layout, grads_, context_.timeout));
  std::lock_guard<std::mutex> lock(mu_);
  if (step_buckets_.num_ready() != 0 || !queue_.empty() || completed_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(entry_.name, ": Rebucket in the middle of step ",
                     step_buckets_.step()));
  }
  staging_ = std::move(staging);
  SetSpans(layout);
  reduced_.assign(buckets_.size(), false);
  step_buckets_.Reset(static_cast<int>(buckets_.size()), step_buckets_.step());
  return absl::OkStatus();
}

void AllReduceSync::StopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status AllReduceSync::Shutdown() {
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

std::string AllReduceSync::SummaryJson() const {
  if (!algorithm_) return "{}";
  nlohmann::json summary = {
      {"algorithm", entry_.name},
      {"chunk_bytes", options_.algorithm.chunk_bytes},
      {"socket_buffer_bytes_requested", options_.socket_buffer_bytes},
      {"socket_buffer_bytes_granted", transport_->granted_send_buffer_bytes()},
      {"bytes_sent", algorithm_->bytes_sent() + reducer_->gather_bytes_sent()},
      {"bytes_recv",
       algorithm_->bytes_received() + reducer_->gather_bytes_received()},
      {"compression", compressor_.spec().ToString()},
  };
  summary["schedule"] = ScheduleKindName(context_.schedule.kind);
  if (priority_) {
    summary["partition_bytes"] = partition_bytes_;  // 0: whole buckets
    summary["credit_bytes"] = credit_bytes_;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (priority_) summary["schedule_agreements"] = total_agreements_;
    summary["row_sparse_buckets_gathered"] = row_sparse_gathered_;
    summary["row_sparse_buckets_dense"] = row_sparse_dense_;
  }
  const nlohmann::json own =
      nlohmann::json::parse(algorithm_->SummaryJson(), nullptr, false);
  if (own.is_object()) summary.update(own);
  return summary.dump();
}

}  // namespace gradsync
