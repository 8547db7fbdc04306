// The parameter server's gRPC service (callback API) around a ServerShard.
#include "ps/server/server.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/grpc_job_token.h"
#include "core/cluster/listen_port.h"
#include "core/telemetry/process_counters.h"
#include "core/telemetry/trace.h"
#include "grpc/slice.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/parameter_server.grpc.pb.h"
#include "ps/callback_queue.h"
#include "ps/server/shard.h"
#include "ps/wire.h"

namespace gradsync {
namespace {

// The shard's summary with this process's CPU seconds and TCP counters
// (retransmissions, RTO timeouts), read when a worker shuts down, and the
// file of the server's timeline, if it writes one, for worker 0 to merge.
std::string SummaryWithProcessCounters(const std::string& shard_summary,
                                       const std::string& trace_file) {
  nlohmann::json summary =
      nlohmann::json::parse(shard_summary, nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object()) return shard_summary;
  summary["process"] = nlohmann::json::parse(ProcessCountersJson());
  if (!trace_file.empty()) summary["trace_file"] = trace_file;
  return summary.dump();
}

// The server's spans in the --trace timeline: per key, worker and step, the
// push (its first part's arrival to its last part's arrival; each part is
// summed as it arrives) and the result (the start of its first write to the
// end of its last). Off (no recorder), Records() is one null test, and
// nothing else is done.
class ServerTrace {
 public:
  ServerTrace(TraceRecorder* recorder, bool into_current, int64_t steps,
              int server_rank)
      : recorder_(recorder),
        into_current_(into_current),
        steps_(steps),
        server_rank_(server_rank),
        // Apart from the client's ids when a colocated server shares its
        // worker's recorder.
        first_id_((int64_t{1} << 40) + (int64_t{server_rank} << 32)) {}

  // Whether spans of `step` are recorded: with a recorder, the first
  // `steps` steps this server sees (all when steps < 0).
  bool Records(int64_t step) {
    if (recorder() == nullptr) return false;
    if (steps_ < 0) return true;
    int64_t first = first_step_.load(std::memory_order_relaxed);
    if (first < 0 && first_step_.compare_exchange_strong(first, step)) {
      first = step;
    }
    return step >= first && step < first + steps_;
  }

  void Push(int worker, int64_t key, int64_t step, int64_t start_us,
            int64_t end_us) {
    TraceRecorder* trace = recorder();
    if (trace == nullptr) return;  // withdrawn meanwhile
    trace->AsyncSpan(
        absl::StrCat("server ", server_rank_, ": push from worker ", worker,
                     ", key ", key, ", step ", step),
        "ps server push", NextId(), start_us, end_us);
  }
  void Result(int worker, int64_t key, int64_t step, int64_t start_us,
              int64_t end_us) {
    TraceRecorder* trace = recorder();
    if (trace == nullptr) return;
    trace->AsyncSpan(
        absl::StrCat("server ", server_rank_, ": result to worker ", worker,
                     ", key ", key, ", step ", step),
        "ps server result", NextId(), start_us, end_us);
  }

 private:
  int64_t NextId() { return first_id_ + next_id_.fetch_add(1); }
  // A colocated server follows its worker's recorder as the trainer
  // publishes and withdraws it, as the client's spans do.
  TraceRecorder* recorder() const {
    return into_current_ ? CurrentTrace() : recorder_;
  }

  TraceRecorder* const recorder_;
  const bool into_current_;
  const int64_t steps_;
  const int server_rank_;
  const int64_t first_id_;
  std::atomic<int64_t> first_step_{-1};
  std::atomic<int64_t> next_id_{0};
};

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// Something that gives up at a deadline.
class Expirable {
 public:
  virtual ~Expirable() = default;
  virtual void Expire() = 0;
};

// Calls Expire() on its targets at their deadlines, from one thread. A target
// that finishes in time cancels its entry, so the timer holds only calls
// still waiting; targets are weak so a late cancel is harmless.
class DeadlineTimer {
 public:
  using Handle = std::pair<absl::Time, uint64_t>;

  DeadlineTimer() : thread_([this] { Run(); }) {}
  ~DeadlineTimer() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    thread_.join();
  }

  Handle Schedule(absl::Time when, std::weak_ptr<Expirable> target) {
    absl::MutexLock lock(&mu_);
    const Handle handle(when, next_id_++);
    const bool earliest =
        entries_.empty() || when < entries_.begin()->first.first;
    entries_.emplace(handle, std::move(target));
    if (earliest) cv_.Signal();
    return handle;
  }

  void Cancel(const Handle& handle) {
    absl::MutexLock lock(&mu_);
    entries_.erase(handle);
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      if (entries_.empty()) {
        cv_.Wait(&mu_);
        continue;
      }
      const absl::Time when = entries_.begin()->first.first;
      if (absl::Now() < when) {
        cv_.WaitWithDeadline(&mu_, when);
        continue;
      }
      std::weak_ptr<Expirable> target = entries_.begin()->second;
      entries_.erase(entries_.begin());
      mu_.Unlock();
      if (auto alive = target.lock()) alive->Expire();
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<Handle, std::weak_ptr<Expirable>> entries_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Push: reads a stream of parts and sums each one as it arrives.
class PushCall : public grpc::ServerReadReactor<ps::KeyPart> {
 public:
  PushCall(ServerShard* shard, ServerTrace* trace, ps::PushReply* reply)
      : shard_(shard), trace_(trace), reply_(reply) {
    StartRead(&part_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the worker half-closed (or the call is gone)
      reply_->set_floats_received(floats_);
      Finish(grpc::Status::OK);
      return;
    }
    const bool traced = trace_->Records(part_.header().step());
    const int64_t arrived = traced ? TraceRecorder::NowMicros() : 0;
    absl::Status status = shard_->Push(part_);
    if (!status.ok()) {
      GS_LOG(WARNING) << status.message();
      Finish(ToGrpc(status));
      return;
    }
    // An encoded part counts bytes of the key's encoding, not floats.
    const bool encoded = part_.encoded_bytes() != 0;
    const int64_t units = static_cast<int64_t>(
        encoded ? part_.data().size() : part_.data().size() / 4);
    if (!encoded) floats_ += units;
    if (traced) {
      // A worker sends a key's parts in order, on one stream.
      if (part_.offset() == 0) key_start_us_ = arrived;
      if (part_.offset() + units ==
          (encoded ? part_.encoded_bytes() : part_.key_numel())) {
        trace_->Push(part_.header().rank(), part_.header().key(),
                     part_.header().step(), key_start_us_, arrived);
      }
    }
    StartRead(&part_);
  }

  void OnDone() override { delete this; }

 private:
  ServerShard* const shard_;
  ServerTrace* const trace_;
  ps::PushReply* const reply_;
  ps::KeyPart part_;
  int64_t floats_ = 0;
  int64_t key_start_us_ = 0;  // --trace: the current key's first part
};

// Register: the worker's config, then (server mode, worker 0) the initial
// parameters of this shard's keys.
class RegisterCall : public grpc::ServerReadReactor<ps::RegisterMessage> {
 public:
  explicit RegisterCall(ServerShard* shard, ps::RegisterReply* reply,
                        int server_rank)
      : shard_(shard) {
    reply->set_server_rank(server_rank);
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    absl::Status status;
    if (!ok) {
      if (!configured_) {
        status = absl::InvalidArgumentError(absl::StrCat(
            shard_->name(), ": registration stream ended without a config"));
      } else if (sends_params_) {
        status = shard_->CheckParamsComplete();
      }
      Finish(ToGrpc(status));
      return;
    }
    if (message_.has_config()) {
      if (configured_) {
        status = absl::InvalidArgumentError(
            absl::StrCat(shard_->name(), ": registration with two configs"));
      } else {
        status = shard_->Register(message_.config());
        configured_ = true;
        // A resumed server has its parameters from its checkpoint.
        sends_params_ = message_.config().update_mode() == ps::UPDATE_SERVER &&
                        message_.config().header().rank() == 0 &&
                        !message_.config().checkpoint().resume();
      }
    } else if (!configured_) {
      status = absl::InvalidArgumentError(absl::StrCat(
          shard_->name(), ": registration must start with its config"));
    } else {
      status = shard_->InitParams(message_.params());
    }
    if (!status.ok()) {
      GS_LOG(WARNING) << status.message();
      Finish(ToGrpc(status));
      return;
    }
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  ServerShard* const shard_;
  ps::RegisterMessage message_;
  bool configured_ = false;
  bool sends_params_ = false;
};

// Pull: streams each requested key's result as its blocks become final. The
// reactor's state lives in a shared object because the shard (progress) and
// the deadline timer reach it from other threads, possibly after the call
// ended; they hold it weakly.
class PullState : public KeyWaiter,
                  public Expirable,
                  public std::enable_shared_from_this<PullState> {
 public:
  PullState(ServerShard* shard, DeadlineTimer* timer, ServerTrace* trace,
            const ps::PullRequest& request, int64_t message_floats,
            grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor)
      : shard_(shard),
        timer_(timer),
        trace_(trace),
        traced_(trace->Records(request.header().step())),
        request_(request),
        message_floats_(message_floats),
        reactor_(reactor),
        start_(absl::Now()) {
    for (int64_t key : request.keys()) {
      index_[key] = cursors_.size();
      Cursor cursor{key, shard->KeyNumel(key), 0, false, 0};
      cursor.key_numel = cursor.numel;
      if (shard->EncodedResult(key)) {
        // Sent in bytes of its encoding, whose size is known once final.
        cursor.encoded = true;
        cursor.numel = -1;
      }
      cursors_.push_back(cursor);
    }
  }

  void KeyProgress(int64_t key) override {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return;
    Cursor& cursor = cursors_[it->second];
    if (!cursor.queued) {
      cursor.queued = true;
      queue_.push_back(it->second);
    }
    MaybeWriteLocked();
  }

  void Expire() override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    // Group the keys still pending by who is missing: usually one worker
    // is behind on all of them.
    const int64_t step = request_.header().step();
    const int rank = request_.header().rank();
    // Keys grouped by the pushes they wait for, then by step.
    std::map<std::vector<ServerShard::MissingPush>, std::vector<int64_t>>
        by_missing;
    for (const Cursor& cursor : cursors_) {
      if (cursor.sent == cursor.numel) continue;
      std::vector<ServerShard::MissingPush> missing =
          shard_->MissingWorkers(cursor.key, step, rank);
      if (!missing.empty()) by_missing[missing].push_back(cursor.key);
    }
    std::vector<std::string> reasons;
    for (const auto& [pushes, keys] : by_missing) {
      std::string key_list = absl::StrJoin(
          keys.begin(), keys.begin() + std::min<size_t>(keys.size(), 8), " ");
      if (keys.size() > 8) absl::StrAppend(&key_list, " ...");
      std::map<int64_t, std::vector<int>> by_step;
      for (const ServerShard::MissingPush& push : pushes) {
        by_step[push.step].push_back(push.worker);
      }
      for (const auto& [missing_step, workers] : by_step) {
        reasons.push_back(absl::StrCat(
            workers.size() == 1 ? "worker " : "workers ",
            absl::StrJoin(workers, ", "), " did not push ",
            keys.size() == 1 ? "key " : "keys ", key_list,
            keys.size() > 1 ? absl::StrCat(" (", keys.size(), " keys)") : "",
            " of step ", missing_step));
      }
    }
    const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        shard_->name(), ": pull from worker ", request_.header().rank(),
        ", step ", step, ": gave up after ",
        absl::FormatDuration(absl::Now() - start_), ": ",
        reasons.empty() ? "results were still being sent"
                        : absl::StrJoin(reasons, "; "),
        shard_->ConsistencyNote()));
    GS_LOG(WARNING) << status.message();
    FinishLocked(status);
  }

  void WriteDone(bool ok) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ok) RecordLastWriteLocked();
    if (!ok) {
      FinishLocked(absl::CancelledError("the worker went away"));
      return;
    }
    if (!deferred_.ok()) {
      FinishLocked(deferred_);
      return;
    }
    MaybeWriteLocked();
  }

  // Ends the call with `status` (after the write in flight, if any).
  void Fail(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void Done() {
    absl::MutexLock lock(&mu_);
    // The last write went with the call's end (StartWriteAndFinish).
    if (finished_ok_) RecordLastWriteLocked();
    reactor_ = nullptr;
  }

  // Gives up at `when` unless finished before.
  void ScheduleExpiry(absl::Time when) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    expiry_ = timer_->Schedule(when, shared_from_this());
    scheduled_ = true;
  }

 private:
  struct Cursor {
    int64_t key;
    int64_t numel;           // floats; an encoded result's bytes (-1: unknown)
    int64_t sent;            // floats (encoded: bytes) written so far
    bool queued;             // in queue_
    int64_t first_write_us;  // --trace: when the key's first write started
    bool encoded = false;    // the result travels as an encoding
    int64_t key_numel = 0;   // the key's floats
  };

  // --trace: the write that just ended was a key's last, so its result span
  // ends now.
  void RecordLastWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (last_write_key_ < 0) return;
    const Cursor& cursor = cursors_[index_.at(last_write_key_)];
    trace_->Result(request_.header().rank(), cursor.key,
                   request_.header().step(), cursor.first_write_us,
                   TraceRecorder::NowMicros());
    last_write_key_ = -1;
  }

  // Starts the next write if none is in flight: the next final floats of the
  // first queued key that has some, keys taking turns message by message.
  // gRPC never runs a reaction inline from StartWrite/Finish on the server
  // (the OnWriteDone/OnDone callbacks are not inlinable), and at most one
  // write and one Finish are ever issued from here, so holding mu_ around
  // them is safe.
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    const int64_t step = request_.header().step();
    while (!queue_.empty()) {
      Cursor& cursor = cursors_[queue_.front()];
      int64_t final_floats = 0;
      if (cursor.encoded) {
        absl::StatusOr<int64_t> bytes = shard_->EncodedResultBytes(
            cursor.key, step, request_.header().rank());
        if (!bytes.ok()) {
          FinishLocked(bytes.status());
          return;
        }
        final_floats = *bytes;
        if (final_floats > 0) cursor.numel = final_floats;
      } else {
        final_floats =
            shard_->FinalFloats(cursor.key, step, request_.header().rank());
      }
      if (final_floats < 0) {
        FinishLocked(absl::FailedPreconditionError(absl::StrCat(
            shard_->name(), ": the result of key ", cursor.key, " for step ",
            step, " is gone: a later step completed before it was pulled")));
        return;
      }
      if (final_floats > cursor.sent) break;
      cursor.queued = false;
      queue_.pop_front();
    }
    if (queue_.empty()) {
      if (keys_done_ == cursors_.size()) FinishLocked(absl::OkStatus());
      return;
    }
    const size_t index = queue_.front();
    queue_.pop_front();
    Cursor& cursor = cursors_[index];
    KeyPartHead head;
    head.header.set_job_id(request_.header().job_id());
    head.header.set_rank(request_.header().rank());
    head.header.set_step(step);
    head.header.set_key(cursor.key);
    head.key_numel = cursor.key_numel;
    head.offset = cursor.sent;
    if (cursor.encoded) head.encoded_bytes = cursor.numel;
    if (traced_ && cursor.sent == 0) {
      cursor.first_write_us = TraceRecorder::NowMicros();
    }
    // The floats are copied once, under the key's lock, into a slice the
    // message then owns: the result may change as soon as the lock is
    // released (the next step's sums, the optimizer's update).
    grpc::Slice data;
    // Never inlined, so the bytes stay where the pointer says when the
    // slice is moved.
    auto place_bytes = [&data](int64_t bytes) {
      grpc_slice raw = grpc_slice_malloc_large(static_cast<size_t>(bytes));
      char* start = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(raw));
      data = grpc::Slice(raw, grpc::Slice::STEAL_REF);
      return start;
    };
    absl::StatusOr<int64_t> n =
        cursor.encoded
            ? shard_->ReadEncodedResult(
                  cursor.key, step, request_.header().rank(), cursor.sent,
                  message_floats_ * static_cast<int64_t>(sizeof(float)),
                  place_bytes)
            : shard_->ReadResult(
                  cursor.key, step, request_.header().rank(), cursor.sent,
                  message_floats_,
                  [&place_bytes](int64_t floats) {
                    return place_bytes(floats *
                                       static_cast<int64_t>(sizeof(float)));
                  },
                  &head.header);
    if (!n.ok()) {
      FinishLocked(n.status());
      return;
    }
    message_ = EncodeKeyPart(head, std::move(data));
    cursor.sent += *n;
    if (cursor.sent == cursor.numel) {
      ++keys_done_;
      cursor.queued = false;
      if (traced_) last_write_key_ = cursor.key;
    } else {
      // Maybe more is final already; if not, the next progress requeues it.
      queue_.push_back(index);
    }
    shard_->CountBytesOut(cursor.encoded
                              ? *n
                              : *n * static_cast<int64_t>(sizeof(float)));
    writing_ = true;
    if (keys_done_ == cursors_.size()) {
      finished_ = true;
      finished_ok_ = true;
      CancelExpiryLocked();
      reactor_->StartWriteAndFinish(&message_, grpc::WriteOptions(),
                                    grpc::Status::OK);
    } else {
      reactor_->StartWrite(&message_);
    }
  }

  void FinishLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (writing_) {
      // Only errors arrive here while writing (success is decided by
      // MaybeWriteLocked, never with a write in flight): finish after the
      // write completes.
      if (deferred_.ok()) deferred_ = status;
      return;
    }
    finished_ = true;
    CancelExpiryLocked();
    reactor_->Finish(ToGrpc(status));
  }

  void CancelExpiryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (scheduled_) timer_->Cancel(expiry_);
    scheduled_ = false;
  }

  ServerShard* const shard_;
  DeadlineTimer* const timer_;
  ServerTrace* const trace_;
  const bool traced_;  // this pull's step is in the --trace timeline
  const ps::PullRequest request_;
  const int64_t message_floats_;
  absl::Mutex mu_;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor_ ABSL_GUARDED_BY(mu_);
  bool scheduled_ ABSL_GUARDED_BY(mu_) = false;
  DeadlineTimer::Handle expiry_ ABSL_GUARDED_BY(mu_);
  std::vector<Cursor> cursors_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, size_t> index_;     // key -> cursor; immutable
  std::deque<size_t> queue_ ABSL_GUARDED_BY(mu_);  // cursors with progress
  size_t keys_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Finished by writing the last key (StartWriteAndFinish).
  bool finished_ok_ ABSL_GUARDED_BY(mu_) = false;
  // --trace: the key whose last write is in flight (-1: none).
  int64_t last_write_key_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status deferred_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer message_ ABSL_GUARDED_BY(mu_);  // a KeyPart (ps/wire.h)
  const absl::Time start_;
};

// A server-streaming RPC whose messages this side encodes itself (ps/wire.h).
class PullCall : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullCall(ServerShard* shard, DeadlineTimer* timer, ServerTrace* trace,
           grpc::CallbackServerContext* context,
           const grpc::ByteBuffer* request_bytes, int64_t message_floats,
           absl::Duration max_wait) {
    ps::PullRequest request;
    grpc::ByteBuffer bytes = *request_bytes;  // shares the slices
    const absl::Status parsed = ParseMessage(&bytes, &request);
    // Not make_shared: the timer's weak reference must not keep the
    // state's memory (its message buffer) alive.
    state_.reset(
        new PullState(shard, timer, trace, request, message_floats, this));
    if (!parsed.ok()) {
      GS_LOG(WARNING) << shard->name() << ": pull: " << parsed.message();
      state_->Fail(Annotate(parsed, absl::StrCat(shard->name(), ": pull")));
      return;
    }
    // Give up a little before the worker does, so the worker hears which
    // peer is missing instead of a bare DEADLINE_EXCEEDED.
    const absl::Time now = absl::Now();
    absl::Time deadline = absl::FromChrono(context->deadline());
    if (deadline > now + max_wait) deadline = now + max_wait;
    const absl::Duration margin =
        std::min(absl::Seconds(1), (deadline - now) / 5);
    state_->ScheduleExpiry(deadline - margin);
    absl::Status status = shard->Pull(request, state_);
    if (!status.ok()) {
      GS_LOG(WARNING) << status.message();
      state_->Fail(status);  // nothing was registered or written
    }
  }

  void OnWriteDone(bool ok) override { state_->WriteDone(ok); }
  void OnCancel() override {
    state_->Fail(absl::CancelledError("pull cancelled by the worker"));
  }
  void OnDone() override {
    state_->Done();
    delete this;
  }

 private:
  std::shared_ptr<PullState> state_;
};

}  // namespace

// Pull is registered raw (byte buffers) so that its results are encoded by
// ps/wire.h, one copy from the shard; the other methods use the generated
// message classes.
using ServiceBase = ps::ParameterServer::WithCallbackMethod_Register<
    ps::ParameterServer::WithCallbackMethod_Push<
        ps::ParameterServer::WithRawCallbackMethod_Pull<
            ps::ParameterServer::WithCallbackMethod_Shutdown<
                ps::ParameterServer::Service>>>>;

class ParameterServer::Impl final : public ServiceBase {
 public:
  explicit Impl(const ParameterServerOptions& options)
      : options_(options),
        shard_(options.job_id, options.server_rank, options.num_servers,
               options.num_workers, options.message_bytes / 4,
               options.max_shard_bytes / 4),
        trace_(options.trace, options.trace_into_current, options.trace_steps,
               options.server_rank),
        last_activity_(absl::ToUnixNanos(absl::Now())) {}

  grpc::ServerReadReactor<ps::RegisterMessage>* Register(
      grpc::CallbackServerContext* context, ps::RegisterReply* reply) override {
    if (auto* refused = RefuseCallWithoutJobToken<
            grpc::ServerReadReactor<ps::RegisterMessage>>(context,
                                                          shard_.name())) {
      return refused;
    }
    Touch();
    return new RegisterCall(&shard_, reply, options_.server_rank);
  }

  grpc::ServerReadReactor<ps::KeyPart>* Push(
      grpc::CallbackServerContext* context, ps::PushReply* reply) override {
    if (auto* refused =
            RefuseCallWithoutJobToken<grpc::ServerReadReactor<ps::KeyPart>>(
                context, shard_.name())) {
      return refused;
    }
    Touch();
    return new PushCall(&shard_, &trace_, reply);
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Pull(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override {
    if (auto* refused = RefuseCallWithoutJobToken<
            grpc::ServerWriteReactor<grpc::ByteBuffer>>(context,
                                                        shard_.name())) {
      return refused;
    }
    Touch();
    return new PullCall(&shard_, &timer_, &trace_, context, request,
                        options_.message_bytes / 4, options_.max_wait);
  }

  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* context,
                                     const ps::ShutdownRequest* request,
                                     ps::ShutdownReply* reply) override {
    if (auto* refused = RefuseCallWithoutJobToken<grpc::ServerUnaryReactor>(
            context, shard_.name())) {
      return refused;
    }
    Touch();
    // The job counts as over only once the last worker's reply has gone out
    // (OnDone): stopping the server earlier would cancel that very reply.
    class Call : public grpc::ServerUnaryReactor {
     public:
      Call(Impl* impl, bool last) : impl_(impl), last_(last) {}
      void OnDone() override {
        if (last_) {
          absl::MutexLock lock(&impl_->mu_);
          impl_->all_shut_down_ = true;
        }
        delete this;
      }

     private:
      Impl* const impl_;
      const bool last_;
    };
    absl::StatusOr<bool> all_done = shard_.Shutdown(*request);
    // Written before the last worker hears back, so worker 0, which merges
    // the timelines once every worker is past its Shutdown, finds it.
    if (all_done.ok() && *all_done) WriteTrace();
    reply->set_summary_json(
        SummaryWithProcessCounters(shard_.SummaryJson(), options_.trace_path));
    auto* call = new Call(this, all_done.ok() && *all_done);
    call->Finish(ToGrpc(all_done.status()));
    return call;
  }

  absl::Status WaitForShutdown(absl::Duration idle_timeout) {
    absl::MutexLock lock(&mu_);
    auto over = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return all_shut_down_ || !aborted_.ok();
    };
    while (!all_shut_down_) {
      if (!aborted_.ok()) return aborted_;
      const absl::Time last = absl::FromUnixNanos(last_activity_.load());
      if (absl::Now() - last >= idle_timeout) {
        const std::vector<int> missing = shard_.WorkersNotShutDown();
        return absl::DeadlineExceededError(
            absl::StrCat(shard_.name(), ": no worker called for ",
                         absl::FormatDuration(idle_timeout), " and worker(s) ",
                         absl::StrJoin(missing, ", "),
                         " never said the job was over; they are gone"));
      }
      mu_.AwaitWithDeadline(absl::Condition(&over), last + idle_timeout);
    }
    return absl::OkStatus();
  }

  void Touch() { last_activity_.store(absl::ToUnixNanos(absl::Now())); }

  // The server's own timeline file, when it keeps one (a separate server);
  // written again at Stop with whatever came after the last Shutdown.
  void WriteTrace() {
    if (options_.trace == nullptr || options_.trace_path.empty()) return;
    const absl::Status written = options_.trace->WriteJson(options_.trace_path);
    if (!written.ok()) {
      GS_LOG(WARNING) << shard_.name() << ": writing its --trace timeline "
                      << options_.trace_path << ": " << written.message();
    }
  }

  const ParameterServerOptions options_;
  ServerShard shard_;
  ServerTrace trace_;
  // Declared after the shard and before the server: destroyed after the
  // gRPC server has finished every call, before the shard goes.
  DeadlineTimer timer_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int64_t> last_activity_;
  absl::Mutex mu_;
  bool all_shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopped_{false};
};

ParameterServer::ParameterServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ParameterServer::~ParameterServer() { Stop(); }

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(
    const ParameterServerOptions& options) {
  const std::string name = absl::StrCat("server ", options.server_rank);
  if (options.num_workers < 1 || options.num_servers < 1 ||
      options.server_rank < 0 || options.server_rank >= options.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": needs 0 <= rank < ", options.num_servers,
        " servers and >= 1 workers (got ", options.num_workers, ")"));
  }
  if (options.message_bytes < 4 || options.message_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": message size ", options.message_bytes,
                     " B must be a positive multiple of 4"));
  }
  KeepCallbackQueueAlive();
  auto impl = std::make_unique<Impl>(options);
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT (gRPC's default): another job's server on this port
  // would share its pushes.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A fixed flow-control window for the pushes (ps/settings.h says why at
  // kDefaultStreamWindowBytes), unless the link needs BDP probing
  // (ps/stream_window_rule.h).
  if (options.stream_window_bytes > 0) {
    builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                               static_cast<int>(options.stream_window_bytes));
    if (!options.bdp_probe) {
      builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    }
  }
  builder.AddListeningPort(options.bind_address,
                           grpc::InsecureServerCredentials(), &impl->port_);
  builder.RegisterService(impl.get());
  impl->server_ = builder.BuildAndStart();
  if (impl->server_ == nullptr || impl->port_ == 0) {
    const absl::Status free = CheckPortFree(options.bind_address);
    return absl::UnavailableError(absl::StrCat(
        name, ": cannot listen on ", options.bind_address,
        free.ok() ? "" : absl::StrCat(": ", free.message())));
  }
  return std::unique_ptr<ParameterServer>(new ParameterServer(std::move(impl)));
}

int ParameterServer::port() const { return impl_->port_; }

const std::string& ParameterServer::name() const {
  return impl_->shard_.name();
}

absl::Status ParameterServer::WaitForShutdown(absl::Duration idle_timeout) {
  return impl_->WaitForShutdown(idle_timeout);
}

void ParameterServer::Abort(const absl::Status& why) {
  absl::MutexLock lock(&impl_->mu_);
  if (impl_->aborted_.ok()) {
    impl_->aborted_ = absl::Status(
        why.code(), absl::StrCat(impl_->shard_.name(), ": ", why.message()));
  }
}

void ParameterServer::Stop() {
  if (impl_->stopped_.exchange(true)) return;
  // Calls in flight get a moment to finish; calls still waiting after it
  // (pulls for a step that will never complete) are cancelled. Shutdown
  // returns once every reactor is done.
  impl_->server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(500));
  impl_->WriteTrace();
}

std::string ParameterServer::SummaryJson() const {
  return impl_->shard_.SummaryJson();
}

const ServerShard& ParameterServer::shard() const { return impl_->shard_; }

}  // namespace gradsync
