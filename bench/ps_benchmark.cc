// Parameter-server push+pull throughput on loopback, nccl-tests style, next
// to bare gRPC streaming of the same bytes measured in the same run.
//
//   bazel run //bench:ps_benchmark -- --workers=4 --servers=2
//   --max_bytes=67108864
//
// For each size S (64 KiB to --max_bytes, x4), N worker threads each push S
// bytes of gradient through --sync=ps (one tensor, chunked so the keys spread
// over all K in-process servers) and pull the S-byte average back; one
// iteration is BucketReady + Finish on every worker at once, timed from the
// common start to the last worker's Finish. PS and bare-gRPC iterations
// alternate, so both see the same machine (this one is shared and noisy), and
// the table shows medians.
//
// The "grpc" columns move the same bytes in the same pattern (every worker
// streams S/K bytes to each server and S/K back, all at once, in messages of
// --message_kb) through a service that does nothing with them
// (TransportProbe in proto/parameter_server.proto), with the PS's own
// copy-free encoding (ps/wire.h): the cost of gRPC alone.
// ps/grpc is the PS's share of that (1.0 = no overhead; the target is >= 0.8).
//
// Columns: size (bytes per worker), chunk (key size), keys, time (us per
// iteration), algbw = size / time in GB/s (10^9 B/s), #wrong = elements of
// the final result that differ from the exact average (N+1)/2.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/malloc_tuning.h"
#include "core/base/status_macros.h"
#include "core/device/device.h"
#include "core/sync/param_layout.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/parameter_server.grpc.pb.h"
#include "ps/callback_queue.h"
#include "ps/loopback_cluster.h"
#include "ps/ps_sync.h"
#include "ps/wire.h"

ABSL_FLAG(int, workers, 2, "N: worker threads");
ABSL_FLAG(int, servers, 1, "K: parameter servers (in-process, own gRPC ports)");
ABSL_FLAG(int64_t, min_bytes, 64 << 10, "smallest size per worker");
ABSL_FLAG(int64_t, max_bytes, 256 << 20, "largest size per worker");
ABSL_FLAG(int64_t, chunk_kb, 4096, "largest key (--ps_chunk_kb)");
ABSL_FLAG(int64_t, message_kb, 1024, "largest message (--ps_message_kb)");
ABSL_FLAG(std::string, update, "worker", "--ps_update: worker or server");
ABSL_FLAG(int, warmup, 1, "untimed iterations per size");
ABSL_FLAG(int64_t, iter_bytes, 1 << 30,
          "timed iterations per size = clamp(iter_bytes / size, 5, 20)");
ABSL_FLAG(std::string, json, "", "also write one JSON line per size here");

namespace gradsync {
namespace {

// N threads that run `body(rank)` together, one round per Round() call;
// Round returns the time from the common release to the last one's end.
class WorkerGang {
 public:
  using Body = std::function<absl::Status(int)>;

  explicit WorkerGang(int n) : n_(n), errors_(n) {
    for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { Loop(r); });
  }
  ~WorkerGang() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& thread : threads_) thread.join();
  }

  absl::StatusOr<double> Round(const Body& body) {
    absl::Time start;
    {
      absl::MutexLock lock(&mu_);
      body_ = &body;
      done_ = 0;
      start = absl::Now();
      ++generation_;
      auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return done_ == n_;
      };
      mu_.Await(absl::Condition(&all_done));
    }
    const double us = absl::ToDoubleMicroseconds(absl::Now() - start);
    for (absl::Status& status : errors_) {
      if (!status.ok()) return std::exchange(status, absl::OkStatus());
    }
    return us;
  }

 private:
  void Loop(int rank) {
    int64_t seen = 0;
    while (true) {
      const Body* body;
      {
        absl::MutexLock lock(&mu_);
        auto released = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || generation_ > seen;
        };
        mu_.Await(absl::Condition(&released));
        if (stop_) return;
        seen = generation_;
        body = body_;
      }
      absl::Status status = (*body)(rank);
      absl::MutexLock lock(&mu_);
      if (!status.ok()) errors_[rank] = status;
      ++done_;
    }
  }

  const int n_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  const Body* body_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<absl::Status> errors_;  // written under mu_, read after a round
  std::vector<std::thread> threads_;
};

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return sum / static_cast<double>(values.size());
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The PS side of one size: a loopback cluster and N registered workers.
class PsJob {
 public:
  static absl::StatusOr<std::unique_ptr<PsJob>> Start(int n, int k,
                                                      int64_t bytes,
                                                      ps::UpdateMode mode) {
    std::unique_ptr<PsJob> job(new PsJob());
    job->n_ = n;
    job->mode_ = mode;
    job->numel_ = bytes / 4;
    PsSyncOptions options;
    options.update_mode = mode;
    options.message_bytes = absl::GetFlag(FLAGS_message_kb) * 1024;
    // Keys small enough that all K servers get a share, as a real model's
    // many tensors would give them.
    const int64_t even_share = ((job->numel_ + k - 1) / k) * 4;
    options.chunk_bytes =
        std::min(absl::GetFlag(FLAGS_chunk_kb) * 1024, even_share);
    options.optimizer.kind = "sgd";
    options.optimizer.lr = 1.0f;
    options.optimizer.momentum = 0.0f;
    job->chunk_bytes_ = options.chunk_bytes;
    job->keys_ = static_cast<int>((bytes + options.chunk_bytes - 1) /
                                  options.chunk_bytes);

    LoopbackClusterOptions cluster_options;
    cluster_options.num_workers = n;
    cluster_options.num_servers = k;
    cluster_options.job_id = "ps-benchmark";
    cluster_options.timeout = absl::Seconds(120);
    cluster_options.message_bytes = options.message_bytes;
    ASSIGN_OR_RETURN(job->cluster_, LoopbackCluster::Start(cluster_options));
    ASSIGN_OR_RETURN(job->layout_,
                     ParamLayout::Create({{"tensor", {job->numel_}}}, 0));
    ASSIGN_OR_RETURN(job->device_, CreateDevice(DeviceOptions()));
    job->syncs_.resize(n);
    job->grads_.resize(n);
    job->params_.resize(n);
    std::vector<absl::Status> setup(n);
    std::vector<std::thread> threads;
    PsJob* self = job.get();
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([self, r, &options, &setup] {
        self->grads_[r].assign(self->numel_, static_cast<float>(r + 1));
        self->params_[r].assign(self->numel_, 0.0f);
        auto context = self->cluster_->JoinWorker(r);
        if (!context.ok()) return void(setup[r] = context.status());
        auto sync = CreatePsSync(*context, options);
        if (!sync.ok()) return void(setup[r] = sync.status());
        self->syncs_[r] = std::move(*sync);
        setup[r] = self->syncs_[r]->Setup(
            self->layout_, *self->device_,
            {self->grads_[r].data(), self->params_[r].data()});
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const absl::Status& status : setup) RETURN_IF_ERROR(status);
    return job;
  }

  // One worker's step.
  absl::Status Step(int rank) {
    syncs_[rank]->BucketReady(0);
    StepStats stats;
    return syncs_[rank]->Finish(stats);
  }

  // Elements that differ from the exact result after `steps` steps. Worker
  // mode: the average of r + 1 over r < N, a fixed point of later steps.
  // Server mode (lr 1, plain SGD): the parameters fall by it every step.
  int64_t Wrong(int steps) const {
    const float average = static_cast<float>(n_ + 1) / 2.0f;
    int64_t wrong = 0;
    for (int r = 0; r < n_; ++r) {
      for (int64_t i = 0; i < numel_; ++i) {
        if (mode_ == ps::UPDATE_SERVER
                ? params_[r][i] != -average * static_cast<float>(steps)
                : grads_[r][i] != average) {
          ++wrong;
        }
      }
    }
    return wrong;
  }

  absl::Status Finish() {
    for (auto& sync : syncs_) RETURN_IF_ERROR(sync->Shutdown());
    syncs_.clear();
    return cluster_->Finish();
  }

  int64_t chunk_bytes() const { return chunk_bytes_; }
  int keys() const { return keys_; }

 private:
  PsJob() = default;
  int n_ = 0;
  ps::UpdateMode mode_ = ps::UPDATE_WORKER;
  int64_t numel_ = 0;
  int64_t chunk_bytes_ = 0;
  int keys_ = 0;
  std::unique_ptr<LoopbackCluster> cluster_;
  ParamLayout layout_;
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<GradientSync>> syncs_;
  std::vector<std::vector<float>> grads_, params_;
};

// --- Bare gRPC: the TransportProbe service and its client ------------------
//
// The bare side moves its bytes the way the PS does (ps/wire.h): a push's
// floats leave from the worker's buffer as a slice (no copy) and are decoded
// once on the server, into a scratch buffer where the PS sums them; a pull's
// floats are copied once on the server into a slice (as the PS copies its
// results) and once on the worker, from gRPC's buffers into place. So ps/grpc
// measures what the PS adds to the same transport, not protobuf's copies.

using RawProbeService = ps::TransportProbe::WithRawCallbackMethod_Sink<
    ps::TransportProbe::WithRawCallbackMethod_Source<
        ps::TransportProbe::Service>>;

class ProbeService final : public RawProbeService {
 public:
  grpc::ServerReadReactor<grpc::ByteBuffer>* Sink(
      grpc::CallbackServerContext*, grpc::ByteBuffer* response) override {
    class Reactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
     public:
      explicit Reactor(grpc::ByteBuffer* response) : response_(response) {
        StartRead(&part_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          *response_ = SerializeMessage(ps::PushReply());
          return Finish(grpc::Status::OK);
        }
        KeyPartHead head;
        const absl::Status decoded = DecodeKeyPart(
            &part_, &head,
            [this](const KeyPartHead&, size_t bytes) -> absl::StatusOr<char*> {
              if (scratch_.size() < bytes) scratch_.resize(bytes);
              return scratch_.data();
            });
        if (!decoded.ok()) {
          return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     std::string(decoded.message())));
        }
        StartRead(&part_);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer* const response_;
      grpc::ByteBuffer part_;
      std::string scratch_;
    };
    return new Reactor(response);
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Source(
      grpc::CallbackServerContext*, const grpc::ByteBuffer* raw) override {
    class Reactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
     public:
      Reactor(int64_t total, int64_t part_bytes)
          : left_(total / 4 * 4), part_bytes_(part_bytes / 4 * 4) {
        data_.assign(static_cast<size_t>(std::min(left_, part_bytes_) / 4),
                     0.0f);
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::CANCELLED);
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (left_ <= 0 || part_bytes_ <= 0) return Finish(grpc::Status::OK);
        const int64_t n = std::min(left_, part_bytes_);
        left_ -= n;
        // Copied once into a slice of its own, as the PS copies its results.
        part_ = EncodeKeyPart(
            KeyPartHead(), grpc::Slice(data_.data(), static_cast<size_t>(n)));
        StartWrite(&part_);
      }
      int64_t left_;
      const int64_t part_bytes_;
      std::vector<float> data_;
      grpc::ByteBuffer part_;
    };
    grpc::ByteBuffer copy(*raw);
    ps::PullRequest request;
    if (const absl::Status parsed = ParseMessage(&copy, &request);
        !parsed.ok()) {
      class Refusal : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
       public:
        explicit Refusal(const absl::Status& why) {
          Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              absl::StrCat("probe Source: unreadable request: ",
                                           why.message())));
        }
        void OnDone() override { delete this; }
      };
      return new Refusal(parsed);
    }
    return new Reactor(request.keys_size() > 0 ? request.keys(0) : 0,
                       request.header().key());
  }
};

// One worker's streams for one iteration; Wait returns when all are done.
class ProbeRound {
 public:
  explicit ProbeRound(int calls) : left_(calls) {}
  void Done(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (!status.ok() && status_.ok()) {
      status_ = absl::InternalError(status.error_message());
    }
    --left_;
  }
  void Fail(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = status;
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    auto done = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ == 0; };
    mu_.Await(absl::Condition(&done));
    return status_;
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

std::string ProbeMethod(const char* name) {
  return absl::StrCat("/", ps::TransportProbe::service_full_name(), "/", name);
}

// Client streaming on the wire (the generic stub calls every method
// bidirectional, which the server cannot tell apart), as the PS's pushes.
class SinkCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SinkCall(grpc::GenericStub* stub, ProbeRound* round, const float* src,
           int64_t bytes, int64_t part_bytes)
      : round_(round),
        src_(src),
        left_(bytes / 4),
        part_floats_(std::max<int64_t>(1, part_bytes / 4)) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(120));
    stub->PrepareBidiStreamingCall(&context_, ProbeMethod("Sink"),
                                   grpc::StubOptions(), this);
    StartRead(&reply_);
    Next();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok && left_ > 0) Next();
  }
  void OnReadDone(bool /*ok*/) override {}
  void OnDone(const grpc::Status& status) override {
    round_->Done(status);
    delete this;
  }

 private:
  void Next() {
    const int64_t n = std::min(left_, part_floats_);
    // The floats go as a slice that points at them: no copy.
    part_ = EncodeKeyPart(KeyPartHead(), src_, n);
    src_ += n;
    left_ -= n;
    if (left_ == 0) {
      StartWriteLast(&part_, grpc::WriteOptions());
    } else {
      StartWrite(&part_);
    }
  }
  ProbeRound* const round_;
  const float* src_;
  int64_t left_;  // floats
  const int64_t part_floats_;
  grpc::ClientContext context_;
  grpc::ByteBuffer part_, reply_;
};

// Server streaming on the wire, as the PS's pulls: each part decoded once,
// from gRPC's buffers straight into place.
class SourceCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SourceCall(grpc::GenericStub* stub, ProbeRound* round, float* dst,
             int64_t bytes, int64_t part_bytes)
      : round_(round), dst_(reinterpret_cast<char*>(dst)), left_(bytes) {
    ps::PullRequest request;
    request.add_keys(bytes);
    request.mutable_header()->set_key(part_bytes);
    request_ = SerializeMessage(request);
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(120));
    stub->PrepareBidiStreamingCall(&context_, ProbeMethod("Source"),
                                   grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&part_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    KeyPartHead head;
    const absl::Status decoded = DecodeKeyPart(
        &part_, &head,
        [this](const KeyPartHead&, size_t bytes) -> absl::StatusOr<char*> {
          if (static_cast<int64_t>(bytes) > left_) {
            return absl::InternalError("the probe sent more than asked");
          }
          char* place = dst_;
          dst_ += bytes;
          left_ -= static_cast<int64_t>(bytes);
          return place;
        });
    if (!decoded.ok()) {
      round_->Fail(decoded);
      context_.TryCancel();
      return;
    }
    StartRead(&part_);
  }
  void OnDone(const grpc::Status& status) override {
    round_->Done(status);
    delete this;
  }

 private:
  ProbeRound* const round_;
  char* dst_;
  int64_t left_;  // bytes still expected
  grpc::ClientContext context_;
  grpc::ByteBuffer request_, part_;
};

// The bare side of one size: K probe servers and the workers' stubs.
class BareJob {
 public:
  static absl::StatusOr<std::unique_ptr<BareJob>> Start(int n, int k,
                                                        int64_t bytes) {
    std::unique_ptr<BareJob> job(new BareJob());
    job->k_ = k;
    job->part_bytes_ = absl::GetFlag(FLAGS_message_kb) * 1024;
    std::vector<std::string> addresses;
    for (int s = 0; s < k; ++s) {
      job->services_.push_back(std::make_unique<ProbeService>());
      int port = 0;
      grpc::ServerBuilder builder;
      // Like every listener of a job: no SO_REUSEPORT (ps/server/server.cc).
      builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port);
      builder.RegisterService(job->services_.back().get());
      job->servers_.push_back(builder.BuildAndStart());
      if (job->servers_.back() == nullptr) {
        return absl::UnavailableError("cannot start a probe server");
      }
      addresses.push_back(absl::StrCat("127.0.0.1:", port));
    }
    // Like the PS client: one channel and connection per (worker, server).
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    job->stubs_.resize(n);
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < k; ++s) {
        job->stubs_[r].push_back(
            std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
                addresses[s], grpc::InsecureChannelCredentials(), args)));
      }
    }
    // S split over K servers on float boundaries, as the partitioner does.
    const int64_t numel = bytes / 4;
    job->share_.assign(k, (numel / k) * 4);
    for (int64_t i = 0; i < numel % k; ++i) job->share_[i] += 4;
    job->src_.assign(n, std::vector<float>(numel, 1.0f));
    job->dst_.assign(n, std::vector<float>(numel, 0.0f));
    return job;
  }

  ~BareJob() {
    for (auto& server : servers_)
      server->Shutdown(std::chrono::system_clock::now());
  }

  // One worker's push and pull of its bytes to and from every server.
  absl::Status Step(int rank) {
    ProbeRound round(2 * k_);
    int64_t offset = 0;
    for (int s = 0; s < k_; ++s) {
      new SinkCall(stubs_[rank][s].get(), &round,
                   src_[rank].data() + offset / 4, share_[s], part_bytes_);
      new SourceCall(stubs_[rank][s].get(), &round,
                     dst_[rank].data() + offset / 4, share_[s], part_bytes_);
      offset += share_[s];
    }
    return round.Wait();
  }

 private:
  BareJob() = default;
  int k_ = 0;
  int64_t part_bytes_ = 0;
  std::vector<std::unique_ptr<ProbeService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs_;
  std::vector<int64_t> share_;
  std::vector<std::vector<float>> src_, dst_;
};

int Main() {
  const int n = absl::GetFlag(FLAGS_workers);
  const int k = absl::GetFlag(FLAGS_servers);
  auto mode = absl::GetFlag(FLAGS_update) == "server" ? ps::UPDATE_SERVER
                                                      : ps::UPDATE_WORKER;
  const int warmup = absl::GetFlag(FLAGS_warmup);
  std::unique_ptr<std::ofstream> json;
  if (!absl::GetFlag(FLAGS_json).empty()) {
    json = std::make_unique<std::ofstream>(absl::GetFlag(FLAGS_json));
  }
  std::printf(
      "# gradsync ps_benchmark: %d workers, %d servers, --ps_update=%s, "
      "message %lld KiB, loopback, one process\n"
      "# time: median us of one push+pull of <size> bytes per worker, all "
      "workers at once; algbw = size/time; GB/s = 1e9 B/s\n"
      "# grpc: the same bytes and pattern through a do-nothing gRPC stream "
      "service; ps/grpc = grpc time / ps time\n",
      n, k, absl::GetFlag(FLAGS_update).c_str(),
      static_cast<long long>(absl::GetFlag(FLAGS_message_kb)));
  std::printf("%12s %10s %6s %5s %12s %9s %12s %9s %8s %7s\n", "size", "chunk",
              "keys", "iters", "ps time(us)", "ps algbw", "grpc time",
              "grpc bw", "ps/grpc", "#wrong");
  WorkerGang gang(n);
  for (int64_t bytes = absl::GetFlag(FLAGS_min_bytes);
       bytes <= absl::GetFlag(FLAGS_max_bytes); bytes *= 4) {
    const int iterations = static_cast<int>(
        std::clamp<int64_t>(absl::GetFlag(FLAGS_iter_bytes) / bytes, 5, 20));
    auto fail = [bytes](const absl::Status& status) {
      std::fprintf(stderr, "at %lld bytes: %s\n", static_cast<long long>(bytes),
                   std::string(status.message()).c_str());
      return 1;
    };
    absl::StatusOr<std::unique_ptr<PsJob>> ps_job =
        PsJob::Start(n, k, bytes, mode);
    if (!ps_job.ok()) return fail(ps_job.status());
    absl::StatusOr<std::unique_ptr<BareJob>> bare_job =
        BareJob::Start(n, k, bytes);
    if (!bare_job.ok()) return fail(bare_job.status());
    const WorkerGang::Body ps_step = [&](int r) { return (*ps_job)->Step(r); };
    const WorkerGang::Body bare_step = [&](int r) {
      return (*bare_job)->Step(r);
    };
    std::vector<double> ps_times, bare_times;
    for (int it = 0; it < warmup + iterations; ++it) {
      absl::StatusOr<double> ps_us = gang.Round(ps_step);
      if (!ps_us.ok()) return fail(ps_us.status());
      absl::StatusOr<double> bare_us = gang.Round(bare_step);
      if (!bare_us.ok()) return fail(bare_us.status());
      if (it >= warmup) {
        ps_times.push_back(*ps_us);
        bare_times.push_back(*bare_us);
      }
    }
    const int64_t wrong = (*ps_job)->Wrong(warmup + iterations);
    const int64_t chunk_bytes = (*ps_job)->chunk_bytes();
    const int keys = (*ps_job)->keys();
    absl::Status finished = (*ps_job)->Finish();
    if (!finished.ok()) return fail(finished);
    ps_job->reset();
    bare_job->reset();

    const double ps_us = Median(ps_times);
    const double bare_us = Median(bare_times);
    const double ps_bw = bytes / (ps_us * 1e3);
    const double bare_bw = bytes / (bare_us * 1e3);
    std::printf("%12lld %10lld %6d %5d %12.1f %9.3f %12.1f %9.3f %8.2f %7lld\n",
                static_cast<long long>(bytes),
                static_cast<long long>(chunk_bytes), keys, iterations, ps_us,
                ps_bw, bare_us, bare_bw, bare_us / ps_us,
                static_cast<long long>(wrong));
    std::fflush(stdout);
    if (json != nullptr) {
      const nlohmann::json line = {
          {"benchmark", "ps"},
          {"workers", n},
          {"servers", k},
          {"update", absl::GetFlag(FLAGS_update)},
          {"bytes", bytes},
          {"chunk_bytes", chunk_bytes},
          {"keys", keys},
          {"iters", iterations},
          {"ps_median_us", ps_us},
          {"ps_mean_us", Mean(ps_times)},
          {"ps_algbw_gbps", ps_bw},
          {"grpc_median_us", bare_us},
          {"grpc_mean_us", Mean(bare_times)},
          {"grpc_algbw_gbps", bare_bw},
          {"wrong", wrong},
      };
      *json << line.dump(-1, ' ', false,
                         nlohmann::json::error_handler_t::replace)
            << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  gradsync::KeepFreedMemoryForReuse();
  absl::ParseCommandLine(argc, argv);
  gradsync::SetLogTag("ps_benchmark");
  gradsync::SetMinLogLevel(gradsync::LogLevel::kWarning);
  // The probe servers and channels come and go between sizes as well.
  gradsync::KeepCallbackQueueAlive();
  return gradsync::Main();
}
