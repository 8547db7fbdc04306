// Fan-out push/pull to the parameter servers with gRPC's callback API.
//
// Pushes and pulls go through a generic stub with byte buffers, so that a
// part's floats leave from the gradient buffer itself and arrive straight in
// the result buffer (ps/wire.h); the wire format is the service's protobuf
// one. Register and Shutdown, small and once per run, use the generated stub.
#include "ps/client/client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"
#include "core/cluster/grpc_job_token.h"
#include "core/telemetry/trace.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "ps/callback_queue.h"
#include "ps/client/send_queue.h"
#include "ps/key_compression.h"
#include "ps/wire.h"

namespace gradsync {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// Pairs the begin and end of the client's spans in the --trace timeline.
int64_t NextTraceId() {
  static std::atomic<int64_t> next{1};
  return next.fetch_add(1);
}

}  // namespace

class PsClient::Impl {
 public:
  // One RPC in flight; registered with the step's bookkeeping so a failure
  // elsewhere can cancel it and a stuck wait can name it.
  class Call {
   public:
    Call(Impl* client, int server, std::string what, int bucket = -1)
        : client_(client),
          server_(server),
          bucket_(bucket),
          what_(std::move(what)) {}
    virtual ~Call() = default;
    // Push and pull calls: begins the RPC (the calls' own Start).
    virtual void Start() {}
    grpc::ClientContext* context() { return &context_; }
    const std::string& what() const { return what_; }
    int server() const { return server_; }
    int bucket() const { return bucket_; }
    // --schedule=priority: the call waited in its server's SendQueue, was
    // counted as outstanding when queued, and holds `credit_bytes` of the
    // queue's credit while it runs.
    bool queued() const { return credit_bytes_ >= 0; }
    int64_t credit_bytes() const { return credit_bytes_; }
    void set_queued(int64_t credit_bytes) { credit_bytes_ = credit_bytes; }

   protected:
    Impl* const client_;
    const int server_;
    const int bucket_;        // the push's or pull's; -1 for other calls
    const std::string what_;  // "push of bucket 2 (keys 3 4) to server 1 at
                              // 127.0.0.1:4100, step 7"
    int64_t credit_bytes_ = -1;  // -1: not queued (fifo, other calls)
    grpc::ClientContext context_;
  };

  class PushCall;
  class PullCall;

  Impl(const PsClientOptions& options, const Partition& partition,
       std::vector<std::string> servers)
      : options_(options), partition_(partition), servers_(std::move(servers)) {
    // A connection of its own per client and server: gRPC would otherwise
    // share one TCP connection among every channel of the process with the
    // same target, and workers run as threads (tests, benchmark, colocated
    // runs) would queue behind each other on it, unlike separate processes.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // A fixed flow-control window for the pulls (ps/settings.h says why at
    // kDefaultStreamWindowBytes), unless the link needs BDP probing
    // (ps/stream_window_rule.h).
    if (options_.stream_window_bytes > 0) {
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                  static_cast<int>(options_.stream_window_bytes));
      if (!options_.bdp_probe) args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    }
    for (const std::string& address : servers_) {
      std::shared_ptr<grpc::Channel> channel = CreateChannelWithJobToken(
          address, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(ps::ParameterServer::NewStub(channel));
      generic_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    GroupKeysByBucket();
    if (options_.priority) {
      absl::MutexLock lock(&mu_);
      for (size_t s = 0; s < servers_.size(); ++s) {
        push_queues_.emplace_back(options_.push_credit_bytes);
        pull_queues_.emplace_back(options_.pull_credit_bytes);
      }
    }
    bytes_to_.assign(servers_.size(), 0);
    bytes_from_.assign(servers_.size(), 0);
  }

  // [bucket][server] -> keys, from partition_ as it is now.
  void GroupKeysByBucket() {
    const int num_buckets = [&] {
      int n = 0;
      for (const PsKey& key : partition_.keys())
        n = std::max(n, key.bucket + 1);
      return n;
    }();
    bucket_server_keys_.assign(
        num_buckets, std::vector<std::vector<const PsKey*>>(servers_.size()));
    for (const PsKey& key : partition_.keys()) {
      bucket_server_keys_[key.bucket][key.server].push_back(&key);
    }
  }

  ~Impl() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Impl::NoneOutstanding));
  }

  std::string ServerName(int server) const {
    return absl::StrCat("server ", server, " at ", servers_[server]);
  }

  ps::Header MakeHeader(int64_t step, int64_t key) const {
    ps::Header header;
    header.set_job_id(options_.job_id);
    header.set_rank(options_.rank);
    header.set_step(step);
    header.set_key(key);
    return header;
  }

  absl::Status RegisterWith(int server, const float* params);
  absl::Status ShutdownWith(int server, int64_t steps, std::string* summary);
  void StartBucket(int bucket, int64_t step, const float* src, float* dst,
                   const std::vector<std::string>* encoded);
  // --schedule=priority: queues every key of `bucket` on its server's push
  // and pull queues and starts what the credits allow.
  void QueueBucket(int bucket, int64_t step, const float* src, float* dst,
                   const std::vector<std::string>* encoded);
  absl::Status WaitAll(PsStepStats* stats);
  absl::Status WaitBucket(int bucket);

  // Step bookkeeping, called by the calls.
  void Begin(Call* call, bool push) {
    absl::MutexLock lock(&mu_);
    if (!call->queued()) {  // a queued call was counted when queued
      ++outstanding_;
      ++bucket_outstanding_[call->bucket()];
    }
    live_.push_back(call);
    const absl::Time now = absl::Now();
    if (push && !any_push_) {
      first_push_ = now;
      any_push_ = true;
    }
    if (!push && !any_pull_) {
      first_pull_ = now;
      any_pull_ = true;
    }
    // A call started after the step already failed is pointless.
    if (!first_error_.ok() || !aborted_.ok()) call->context()->TryCancel();
  }
  void NoteClock(const ps::Header& header) {
    if (options_.consistency == ps::CONSISTENCY_BSP) return;
    absl::MutexLock lock(&mu_);
    const int64_t clock = header.slowest_clock();
    if (slowest_clock_ < 0 || clock < slowest_clock_) slowest_clock_ = clock;
    wait_saved_us_ += header.wait_saved_us();
  }
  void CountBytes(int server, int64_t to, int64_t from) {
    absl::MutexLock lock(&mu_);
    bytes_to_[server] += to;
    bytes_from_[server] += from;
  }
  void End(Call* call, bool push, const absl::Status& status) {
    std::vector<Call*> to_start;
    std::vector<Call*> dropped;
    {
      absl::MutexLock lock(&mu_);
      --outstanding_;
      --bucket_outstanding_[call->bucket()];
      live_.remove(call);
      const absl::Time now = absl::Now();
      if (push) last_push_ = std::max(last_push_, now);
      if (!push) last_pull_ = std::max(last_pull_, now);
      if (!status.ok() && first_error_.ok()) {
        first_error_ = absl::Status(
            status.code(), absl::StrCat("worker ", options_.rank, ": ",
                                        call->what(), ": ", status.message()));
        // Don't leave the rest of the step to run into its deadlines.
        for (Call* other : live_) other->context()->TryCancel();
      }
      if (call->queued()) {
        SendQueue& queue = push ? push_queues_[call->server()]
                                : pull_queues_[call->server()];
        queue.Done(call->credit_bytes());
        // Taken under the lock that counts them: while they are outstanding
        // the destructor waits, so starting them below is safe.
        TakeStartable(call->server(), &to_start, &dropped);
      }
    }
    // Deleting a call that never started touches nothing of this client;
    // the calls taken are started outside the lock (their Begin takes it).
    // Nothing here may use `this` once the lock is released: with nothing
    // left outstanding the destructor may already be running.
    for (Call* never_started : dropped) delete never_started;
    for (Call* next : to_start) next->Start();
  }
  void Abort(const absl::Status& why) {
    std::vector<Call*> dropped;
    {
      absl::MutexLock lock(&mu_);
      if (!aborted_.ok()) return;
      aborted_ = why;
      for (Call* call : live_) call->context()->TryCancel();
      DropQueued(&dropped);
    }
    for (Call* never_started : dropped) delete never_started;
  }
  // --schedule=priority. Moves into `to_start` the calls of `server` whose
  // turn has come, both directions; once the step failed, every queued call
  // of every server into `dropped` instead (uncounted: never started).
  void TakeStartable(int server, std::vector<Call*>* to_start,
                     std::vector<Call*>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!first_error_.ok() || !aborted_.ok()) {
      DropQueued(dropped);
      return;
    }
    for (const SendQueue::Item& item : push_queues_[server].Take()) {
      Call* push = static_cast<Call*>(item.payload);
      to_start->push_back(push);
      auto pull = pull_after_push_.find(push);
      if (pull != pull_after_push_.end()) {
        pull_queues_[server].Add(pull->second);
        pull_after_push_.erase(pull);
      }
    }
    for (const SendQueue::Item& item : pull_queues_[server].Take()) {
      to_start->push_back(static_cast<Call*>(item.payload));
    }
  }
  void DropQueued(std::vector<Call*>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<SendQueue::Item> items;
    for (std::vector<SendQueue>* queues : {&push_queues_, &pull_queues_}) {
      for (SendQueue& queue : *queues) {
        for (const SendQueue::Item& item : queue.Drain()) items.push_back(item);
      }
    }
    for (const auto& [push, pull] : pull_after_push_) items.push_back(pull);
    pull_after_push_.clear();
    for (const SendQueue::Item& item : items) {
      Call* call = static_cast<Call*>(item.payload);
      --outstanding_;
      --bucket_outstanding_[call->bucket()];
      dropped->push_back(call);
    }
  }

  bool NoneOutstanding() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outstanding_ == 0;
  }

  const PsClientOptions options_;
  const Partition& partition_;
  const std::vector<std::string> servers_;
  std::vector<std::unique_ptr<ps::ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs_;
  const std::string push_method_ =
      absl::StrCat("/", ps::ParameterServer::service_full_name(), "/Push");
  const std::string pull_method_ =
      absl::StrCat("/", ps::ParameterServer::service_full_name(), "/Pull");
  // [bucket][server] -> keys.
  std::vector<std::vector<std::vector<const PsKey*>>> bucket_server_keys_;

  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls in flight per bucket, for WaitBucket.
  absl::flat_hash_map<int, int> bucket_outstanding_ ABSL_GUARDED_BY(mu_);
  std::list<Call*> live_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  // Set by Abort: every step from then on fails with it.
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool any_push_ ABSL_GUARDED_BY(mu_) = false;
  bool any_pull_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time first_push_ ABSL_GUARDED_BY(mu_);
  absl::Time last_push_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time first_pull_ ABSL_GUARDED_BY(mu_);
  absl::Time last_pull_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // --schedule=priority: per server, its keys' pushes and pulls waiting
  // for their turn (empty under fifo).
  std::vector<SendQueue> push_queues_ ABSL_GUARDED_BY(mu_);
  std::vector<SendQueue> pull_queues_ ABSL_GUARDED_BY(mu_);
  // --schedule=priority: a key's pull, held back until its push leaves the
  // push queue. A pull queued beside its push could take pull credit while
  // the push waits behind later, higher-priority pushes: the server cannot
  // answer it until this worker's push arrives, so the credit would sit on
  // the keys the next forward needs last (a priority inversion).
  absl::flat_hash_map<Call*, SendQueue::Item> pull_after_push_
      ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> bytes_to_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> bytes_from_ ABSL_GUARDED_BY(mu_);
  int64_t slowest_clock_ ABSL_GUARDED_BY(mu_) = -1;  // PsStepStats's
  int64_t wait_saved_us_ ABSL_GUARDED_BY(mu_) = 0;   // over keys
};

namespace {

std::string KeyList(const std::vector<const PsKey*>& keys) {
  std::vector<int> ids;
  for (const PsKey* key : keys) ids.push_back(key->id);
  if (ids.size() > 8) {
    return absl::StrCat(absl::StrJoin(ids.begin(), ids.begin() + 8, " "),
                        " ... (", ids.size(), " keys)");
  }
  return absl::StrJoin(ids, " ");
}

}  // namespace

// Streams the parts of the bucket's keys held by one server, each key's parts
// in order, the next message built when the previous one has been handed to
// the transport. The messages refer to `src` (no copy): the trainer leaves
// the gradients alone until WaitAll, and WaitAll returns after OnDone.
// A client-streaming RPC on the wire; the generic stub calls every method
// bidirectional, which the server cannot tell apart.
class PsClient::Impl::PushCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public Call {
 public:
  PushCall(Impl* client, int server, int bucket, int64_t step,
           std::vector<const PsKey*> keys, const float* src,
           const std::vector<std::string>* encoded)
      : Call(client, server,
             absl::StrCat("push of bucket ", bucket, " (keys ", KeyList(keys),
                          ") to ", client->ServerName(server), ", step ", step),
             bucket),
        step_(step),
        keys_(std::move(keys)),
        src_(src),
        encoded_(encoded),
        message_floats_(client->options_.message_bytes / 4) {}

  void Start() override {
    if (CurrentTrace() != nullptr) start_us_ = TraceRecorder::NowMicros();
    context_.set_deadline(DeadlineAfter(client_->options_.timeout));
    client_->Begin(this, /*push=*/true);
    client_->generic_stubs_[server_]->PrepareBidiStreamingCall(
        &context_, client_->push_method_, grpc::StubOptions(), this);
    StartRead(&reply_);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    // A failed write means the call is over; OnDone says why.
    if (!ok) return;
    client_->CountBytes(server_, part_bytes_, 0);
    if (index_ < keys_.size()) WriteNext();
  }

  // The PushReply; only the status that follows it matters.
  void OnReadDone(bool /*ok*/) override {}

  void OnDone(const grpc::Status& status) override {
    // The server answers a push once it summed every part: the span ends
    // when this worker's share of the server's link was through.
    if (TraceRecorder* trace = CurrentTrace();
        trace != nullptr && start_us_ > 0) {
      // Under priority a push is one key: the span names it, so the order
      // the keys left in is on the timeline.
      trace->AsyncSpan(
          queued() ? absl::StrCat("push of key ", keys_[0]->id, " to server ",
                                  server_, ", step ", step_)
                   : absl::StrCat("push to server ", server_, ", step ", step_),
          "ps push", NextTraceId(), start_us_, TraceRecorder::NowMicros());
    }
    client_->End(this, /*push=*/true, FromGrpc(status));
    delete this;
  }

 private:
  void WriteNext() {
    const PsKey& key = *keys_[index_];
    KeyPartHead head;
    head.header = client_->MakeHeader(step_, key.id);
    head.key_numel = key.numel;
    head.offset = offset_;
    const std::string* encoding =
        encoded_ != nullptr && !(*encoded_)[key.id].empty()
            ? &(*encoded_)[key.id]
            : nullptr;
    // How far into the key (floats, or an encoding's bytes) this part ends.
    int64_t whole = key.numel;
    if (encoding != nullptr) {
      // The encoding's bytes in parts of at most the message size, sent
      // from the encoding itself (it lives until WaitAll).
      whole = static_cast<int64_t>(encoding->size());
      const int64_t n =
          std::min(client_->options_.message_bytes, whole - offset_);
      head.encoded_bytes = whole;
      part_ = EncodeKeyPart(
          head, grpc::Slice(encoding->data() + offset_, static_cast<size_t>(n),
                            grpc::Slice::STATIC_SLICE));
      part_bytes_ = n;
      offset_ += n;
    } else {
      const int64_t n = std::min(message_floats_, key.numel - offset_);
      part_ = EncodeKeyPart(head, src_ + key.offset + offset_, n);
      part_bytes_ = n * static_cast<int64_t>(sizeof(float));
      offset_ += n;
    }
    if (offset_ == whole) {
      ++index_;
      offset_ = 0;
    }
    if (index_ == keys_.size()) {
      // The last message half-closes the stream in the same operation.
      StartWriteLast(&part_, grpc::WriteOptions());
    } else {
      StartWrite(&part_);
    }
  }

  const int64_t step_;
  const std::vector<const PsKey*> keys_;
  const float* const src_;
  const std::vector<std::string>* const encoded_;  // by key id; may be null
  const int64_t message_floats_;
  int64_t start_us_ = 0;    // for --trace
  size_t index_ = 0;        // key being sent
  int64_t offset_ = 0;      // next float (or encoding byte) of that key
  grpc::ByteBuffer part_;   // the message being written
  int64_t part_bytes_ = 0;  // its floats' bytes
  grpc::ByteBuffer reply_;
};

// Receives the results of the bucket's keys held by one server, in whatever
// order the server completes them, each part copied from gRPC's receive
// buffers straight into `dst`. A server-streaming RPC on the wire.
class PsClient::Impl::PullCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public Call {
 public:
  PullCall(Impl* client, int server, int bucket, int64_t step,
           std::vector<const PsKey*> keys, float* dst)
      : Call(client, server,
             absl::StrCat("pull of bucket ", bucket, " (keys ", KeyList(keys),
                          ") from ", client->ServerName(server), ", step ",
                          step),
             bucket),
        step_(step),
        keys_(std::move(keys)),
        dst_(dst),
        received_(keys_.size(), 0),
        encodings_(keys_.size()),
        encoded_size_(keys_.size(), 0) {
    ps::PullRequest request;
    *request.mutable_header() = client->MakeHeader(step, -1);
    for (size_t i = 0; i < keys_.size(); ++i) {
      request.add_keys(keys_[i]->id);
      index_[keys_[i]->id] = i;
    }
    request_ = SerializeMessage(request);
  }

  void Start() override {
    if (CurrentTrace() != nullptr) start_us_ = TraceRecorder::NowMicros();
    context_.set_deadline(DeadlineAfter(client_->options_.timeout));
    client_->Begin(this, /*push=*/false);
    client_->generic_stubs_[server_]->PrepareBidiStreamingCall(
        &context_, client_->pull_method_, grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&part_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // end of stream (or failure): OnDone follows
    absl::Status status = Accept();
    if (!status.ok()) {
      error_ = status;
      context_.TryCancel();
      return;
    }
    StartRead(&part_);
  }

  void OnDone(const grpc::Status& grpc_status) override {
    absl::Status status = error_.ok() ? FromGrpc(grpc_status) : error_;
    if (status.ok()) {
      for (size_t i = 0; i < keys_.size(); ++i) {
        if (encoded_size_[i] > 0 && received_[i] == encoded_size_[i]) continue;
        if (encoded_size_[i] > 0 || received_[i] != keys_[i]->numel) {
          status = absl::DataLossError(absl::StrCat(
              "the server ended the stream with ", received_[i], " of ",
              keys_[i]->numel, " floats of key ", keys_[i]->id));
          break;
        }
      }
    }
    client_->End(this, /*push=*/false, status);
    delete this;
  }

 private:
  // Checks one message against what was asked and copies its floats into
  // place; nothing is written for a part that does not fit.
  absl::Status Accept() {
    size_t i = 0;
    int64_t n = 0;
    KeyPartHead decoded;
    absl::Status status = DecodeKeyPart(
        &part_, &decoded,
        [&](const KeyPartHead& head, size_t bytes) -> absl::StatusOr<char*> {
          const ps::Header& header = head.header;
          auto it = index_.find(header.key());
          if (header.step() != step_ || it == index_.end()) {
            return absl::InternalError(absl::StrCat(
                "the server answered key ", header.key(), " step ",
                header.step(), ", which this pull did not ask for"));
          }
          i = it->second;
          const PsKey& key = *keys_[i];
          if (head.encoded_bytes != 0 || encoded_size_[i] != 0) {
            // A piece of the key's encoded result, collected whole and
            // decoded into place once its last byte is in.
            n = static_cast<int64_t>(bytes);
            if ((encoded_size_[i] != 0 &&
                 head.encoded_bytes != encoded_size_[i]) ||
                head.encoded_bytes < 1 ||
                head.encoded_bytes > MaxEncodedBytes(key.numel) ||
                head.offset != received_[i] ||
                n > head.encoded_bytes - head.offset) {
              return absl::InternalError(absl::StrCat(
                  "bad encoded part of key ", key.id, ": ", bytes,
                  " bytes at byte ", head.offset, " after ", received_[i],
                  " of ", head.encoded_bytes));
            }
            if (encoded_size_[i] == 0) {
              encoded_size_[i] = head.encoded_bytes;
              encodings_[i].resize(static_cast<size_t>(head.encoded_bytes));
            }
            return encodings_[i].data() + head.offset;
          }
          n = static_cast<int64_t>(bytes / 4);
          if (bytes % 4 != 0 || head.offset != received_[i] ||
              head.offset + n > key.numel) {
            return absl::InternalError(
                absl::StrCat("bad part of key ", key.id, ": ", bytes,
                             " bytes at offset ", head.offset, " after ",
                             received_[i], " of ", key.numel, " floats"));
          }
          return reinterpret_cast<char*>(dst_ + key.offset + head.offset);
        });
    if (!status.ok()) return status;
    client_->NoteClock(decoded.header);
    received_[i] += n;
    const bool encoded = encoded_size_[i] > 0;
    if (encoded && received_[i] == encoded_size_[i]) {
      const PsKey& key = *keys_[i];
      absl::Status decoded_result = DecodeKeyResult(
          encodings_[i],
          absl::MakeSpan(dst_ + key.offset, static_cast<size_t>(key.numel)));
      std::string().swap(encodings_[i]);
      if (!decoded_result.ok()) {
        return absl::InternalError(
            absl::StrCat("the result of key ", key.id, " does not decode: ",
                         decoded_result.message()));
      }
    }
    // Each key's result from the pull's start to its last float: which key
    // of which server this worker waited for, and how long.
    if (TraceRecorder* trace = CurrentTrace();
        trace != nullptr && start_us_ > 0 &&
        received_[i] == (encoded ? encoded_size_[i] : keys_[i]->numel)) {
      trace->AsyncSpan(absl::StrCat("key ", keys_[i]->id, " from server ",
                                    server_, ", step ", step_),
                       "ps pull", NextTraceId(), start_us_,
                       TraceRecorder::NowMicros());
    }
    client_->CountBytes(server_, 0,
                        encoded ? n : n * static_cast<int64_t>(sizeof(float)));
    return absl::OkStatus();
  }

  const int64_t step_;
  const std::vector<const PsKey*> keys_;
  float* const dst_;
  std::vector<int64_t> received_;  // floats, or an encoding's bytes
  // Keys whose result comes encoded: the bytes so far and the size (0: a
  // float32 result).
  std::vector<std::string> encodings_;
  std::vector<int64_t> encoded_size_;
  absl::flat_hash_map<int64_t, size_t> index_;
  int64_t start_us_ = 0;  // for --trace
  grpc::ByteBuffer request_;
  grpc::ByteBuffer part_;
  absl::Status error_;
};

void PsClient::Impl::StartBucket(int bucket, int64_t step, const float* src,
                                 float* dst,
                                 const std::vector<std::string>* encoded) {
  if (bucket < 0 || bucket >= static_cast<int>(bucket_server_keys_.size())) {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok()) {
      first_error_ = absl::InvalidArgumentError(absl::StrCat(
          "worker ", options_.rank, ": no bucket ", bucket, " in the layout"));
    }
    return;
  }
  if (options_.priority) {
    QueueBucket(bucket, step, src, dst, encoded);
    return;
  }
  // The pull goes out with the push: the server answers it the moment the
  // last worker's push completes a key, with no extra round trip.
  for (int server = 0; server < static_cast<int>(servers_.size()); ++server) {
    const std::vector<const PsKey*>& keys = bucket_server_keys_[bucket][server];
    if (keys.empty()) continue;
    (new PushCall(this, server, bucket, step, keys, src, encoded))->Start();
    (new PullCall(this, server, bucket, step, keys, dst))->Start();
  }
}

void PsClient::Impl::QueueBucket(int bucket, int64_t step, const float* src,
                                 float* dst,
                                 const std::vector<std::string>* encoded) {
  std::vector<Call*> to_start;
  std::vector<Call*> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (int server = 0; server < static_cast<int>(servers_.size());
         ++server) {
      const std::vector<const PsKey*>& keys =
          bucket_server_keys_[bucket][server];
      if (keys.empty()) continue;
      for (const PsKey* key : keys) {
        // What the key puts on the link: its encoding where it has one; a
        // result is counted at its float32 size, its largest.
        const int64_t floats = key->numel * static_cast<int64_t>(sizeof(float));
        const int64_t push_bytes =
            encoded != nullptr && !(*encoded)[key->id].empty()
                ? static_cast<int64_t>((*encoded)[key->id].size())
                : floats;
        auto* push =
            new PushCall(this, server, bucket, step, {key}, src, encoded);
        auto* pull = new PullCall(this, server, bucket, step, {key}, dst);
        push->set_queued(push_bytes);
        pull->set_queued(floats);
        outstanding_ += 2;
        bucket_outstanding_[bucket] += 2;
        // The key's offset is its place in the next forward: every worker
        // derives the same order from the same layout.
        // The queues hold Call pointers: a call's Call base is not at its
        // address (the reactor comes first).
        push_queues_[server].Add(
            {key->offset, push_bytes, static_cast<Call*>(push)});
        pull_after_push_[static_cast<Call*>(push)] = {
            key->offset, floats, static_cast<Call*>(pull)};
      }
      TakeStartable(server, &to_start, &dropped);
    }
  }
  for (Call* never_started : dropped) delete never_started;
  for (Call* next : to_start) next->Start();
}

absl::Status PsClient::Impl::WaitAll(PsStepStats* stats) {
  absl::MutexLock lock(&mu_);
  // Every call has a deadline of options_.timeout, so this wait ends by
  // itself; the extra margin only guards against a lost callback.
  const absl::Duration limit = options_.timeout + absl::Seconds(10);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &Impl::NoneOutstanding),
                            limit)) {
    std::vector<std::string> names;
    for (Call* call : live_) {
      names.push_back(call->what());
      call->context()->TryCancel();
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "worker ", options_.rank, ": after ", absl::FormatDuration(limit),
        " still waiting for ", absl::StrJoin(names, "; ")));
  }
  if (stats != nullptr) {
    stats->push_ms =
        any_push_ ? absl::ToDoubleMilliseconds(last_push_ - first_push_) : 0;
    stats->pull_ms =
        any_pull_ ? absl::ToDoubleMilliseconds(last_pull_ - first_pull_) : 0;
    stats->bytes_to_server = bytes_to_;
    stats->bytes_from_server = bytes_from_;
    stats->slowest_clock = slowest_clock_;
    stats->wait_saved_ms =
        partition_.keys().empty()
            ? 0
            : wait_saved_us_ / 1000.0 /
                  static_cast<double>(partition_.keys().size());
  }
  slowest_clock_ = -1;
  wait_saved_us_ = 0;
  // A call's own failure (a server's connection refused) is the more precise
  // symptom; the abort's reason stands in for cancellations it caused.
  absl::Status status = first_error_;
  if (!aborted_.ok() && (status.ok() || absl::IsCancelled(status)))
    status = aborted_;
  first_error_ = absl::OkStatus();
  any_push_ = any_pull_ = false;
  last_push_ = last_pull_ = absl::InfinitePast();
  std::fill(bytes_to_.begin(), bytes_to_.end(), 0);
  std::fill(bytes_from_.begin(), bytes_from_.end(), 0);
  return status;
}

absl::Status PsClient::Impl::WaitBucket(int bucket) {
  absl::MutexLock lock(&mu_);
  // Called by Await with mu_ held; the annotation tells clang's analysis so.
  auto bucket_done = [this, bucket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto it = bucket_outstanding_.find(bucket);
    return it == bucket_outstanding_.end() || it->second == 0 ||
           !first_error_.ok() || !aborted_.ok();
  };
  // As in WaitAll: every call has its own deadline, the margin only guards
  // against a lost callback.
  const absl::Duration limit = options_.timeout + absl::Seconds(10);
  if (!mu_.AwaitWithTimeout(absl::Condition(&bucket_done), limit)) {
    std::vector<std::string> names;
    for (Call* call : live_) {
      if (call->bucket() == bucket) names.push_back(call->what());
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "worker ", options_.rank, ": after ", absl::FormatDuration(limit),
        " still waiting for ", absl::StrJoin(names, "; ")));
  }
  // The step's error stays for WaitAll, which reports it again.
  if (!first_error_.ok()) return first_error_;
  return aborted_;
}

absl::Status PsClient::Impl::RegisterWith(int server, const float* params) {
  const std::string context = absl::StrCat(
      "worker ", options_.rank, ": registering with ", ServerName(server));
  grpc::ClientContext rpc;
  rpc.set_deadline(DeadlineAfter(options_.timeout));
  // The server may still be starting when a worker gets its address.
  rpc.set_wait_for_ready(true);
  ps::RegisterReply reply;
  std::unique_ptr<grpc::ClientWriter<ps::RegisterMessage>> writer =
      stubs_[server]->Register(&rpc, &reply);

  ps::RegisterMessage message;
  ps::RegisterConfig* config = message.mutable_config();
  *config->mutable_header() = MakeHeader(-1, -1);
  config->set_num_workers(options_.num_workers);
  config->set_num_servers(static_cast<int>(servers_.size()));
  config->set_server_rank(server);
  config->set_update_mode(options_.update_mode);
  config->set_consistency(options_.consistency);
  config->set_staleness(options_.staleness);
  config->set_partition(options_.partition);
  config->set_compression(options_.compression);
  config->set_pull(options_.pull);
  *config->mutable_optimizer() = options_.optimizer;
  *config->mutable_checkpoint() = options_.checkpoint;
  for (int id : partition_.keys_of_server(server)) {
    ps::KeySpec* spec = config->add_keys();
    spec->set_key(id);
    spec->set_numel(partition_.keys()[id].numel);
    spec->set_row_width(partition_.keys()[id].row_width);
  }
  // A key table too large for one message would need a stream of its own;
  // refuse clearly instead (it takes ~10^5 keys: raise --ps_chunk_kb).
  if (message.ByteSizeLong() > static_cast<size_t>(3 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": ", config->keys_size(),
        " keys do not fit one registration message; raise --ps_chunk_kb"));
  }
  bool ok = writer->Write(message);
  if (ok && options_.update_mode == ps::UPDATE_SERVER && options_.rank == 0 &&
      !options_.checkpoint.resume()) {
    const int64_t message_floats = options_.message_bytes / 4;
    for (int id : partition_.keys_of_server(server)) {
      const PsKey& key = partition_.keys()[id];
      for (int64_t offset = 0; ok && offset < key.numel;
           offset += message_floats) {
        const int64_t n = std::min(message_floats, key.numel - offset);
        ps::RegisterMessage part;
        ps::KeyPart* params_part = part.mutable_params();
        *params_part->mutable_header() = MakeHeader(-1, id);
        params_part->set_key_numel(key.numel);
        params_part->set_offset(offset);
        params_part->mutable_data()->assign(
            reinterpret_cast<const char*>(params + key.offset + offset),
            static_cast<size_t>(n) * sizeof(float));
        ok = writer->Write(part);
      }
    }
  }
  if (ok) writer->WritesDone();
  return Annotate(FromGrpc(writer->Finish()), context);
}

absl::Status PsClient::Impl::ShutdownWith(int server, int64_t steps,
                                          std::string* summary) {
  grpc::ClientContext rpc;
  rpc.set_deadline(DeadlineAfter(options_.timeout));
  ps::ShutdownRequest request;
  *request.mutable_header() = MakeHeader(steps, -1);
  ps::ShutdownReply reply;
  absl::Status status =
      FromGrpc(stubs_[server]->Shutdown(&rpc, request, &reply));
  *summary = reply.summary_json();
  return Annotate(status, absl::StrCat("worker ", options_.rank,
                                       ": shutting down ", ServerName(server)));
}

PsClient::PsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsClient::~PsClient() = default;

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options, const Partition& partition,
    std::vector<std::string> servers) {
  if (static_cast<int>(servers.size()) != partition.num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", options.rank, ": ", servers.size(),
                     " server addresses for a partition over ",
                     partition.num_servers(), " servers"));
  }
  if (options.message_bytes < 4 || options.message_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", options.rank, ": message size ", options.message_bytes,
        " B must be a positive multiple of 4"));
  }
  KeepCallbackQueueAlive();
  return std::unique_ptr<PsClient>(new PsClient(
      std::make_unique<Impl>(options, partition, std::move(servers))));
}

absl::Status PsClient::Register(const float* params) {
  if (impl_->options_.update_mode == ps::UPDATE_SERVER &&
      impl_->options_.rank == 0 && !impl_->options_.checkpoint.resume() &&
      params == nullptr) {
    return absl::InvalidArgumentError(
        "worker 0: server mode needs the initial parameters to register");
  }
  // Setup-time calls: one thread per server is simple and still concurrent.
  const int k = static_cast<int>(impl_->servers_.size());
  std::vector<absl::Status> results(k);
  std::vector<std::thread> threads;
  for (int s = 0; s < k; ++s) {
    threads.emplace_back([this, s, params, &results] {
      results[s] = impl_->RegisterWith(s, params);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : results) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

void PsClient::StartBucket(int bucket, int64_t step, const float* src,
                           float* dst,
                           const std::vector<std::string>* encoded) {
  impl_->StartBucket(bucket, step, src, dst, encoded);
}

absl::Status PsClient::WaitAll(PsStepStats* stats) {
  return impl_->WaitAll(stats);
}

absl::Status PsClient::WaitBucket(int bucket) {
  return impl_->WaitBucket(bucket);
}

void PsClient::Abort(const absl::Status& why) { impl_->Abort(why); }

absl::Status PsClient::Shutdown(int64_t steps,
                                std::vector<std::string>* summaries) {
  const int k = static_cast<int>(impl_->servers_.size());
  std::vector<absl::Status> results(k);
  std::vector<std::string> replies(k);
  std::vector<std::thread> threads;
  for (int s = 0; s < k; ++s) {
    threads.emplace_back([this, s, steps, &results, &replies] {
      results[s] = impl_->ShutdownWith(s, steps, &replies[s]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (summaries != nullptr) {
    for (std::string& reply : replies) {
      if (!reply.empty()) summaries->push_back(std::move(reply));
    }
  }
  for (const absl::Status& status : results) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::Status PsClient::RegroupBuckets() {
  {
    absl::MutexLock lock(&impl_->mu_);
    if (!impl_->NoneOutstanding()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", impl_->options_.rank,
                       ": buckets regrouped while calls are in flight"));
    }
  }
  impl_->GroupKeysByBucket();
  return absl::OkStatus();
}

const std::vector<std::string>& PsClient::servers() const {
  return impl_->servers_;
}

}  // namespace gradsync
