// Parameter-server push+pull throughput on loopback, nccl-tests style, next
// to bare gRPC streaming of the same bytes measured in the same run.
//
//   bazel run //bench:ps_benchmark -- --workers=4 --servers=2 --max_bytes=67108864
//
// For each size S (64 KiB to --max_bytes, x4), N worker threads each push S
// bytes of gradient through --sync=ps (one tensor, chunked so the keys spread
// over all K in-process servers) and pull the S-byte average back; one
// iteration is BucketReady + Finish on every worker at once, timed from the
// common start to the last worker's Finish.
//
// The "grpc" columns move the same bytes in the same pattern (every worker
// streams S/K bytes to each server and S/K back, all at once, in messages of
// --message_kb) through a service that does nothing with them
// (TransportProbe in proto/parameter_server.proto): the cost of gRPC alone.
// ps/grpc is the PS's share of that (1.0 = no overhead; the target is >= 0.8).
//
// Columns: size (bytes per worker), chunk (key size), keys, time (us per
// iteration), algbw = size / time in GB/s (10^9 B/s), #wrong = elements of
// the final result that differ from the exact average (N+1)/2.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/device.h"
#include "core/logging.h"
#include "core/param_layout.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "ps/callback_queue.h"
#include "ps/loopback_cluster.h"
#include "ps/ps_sync.h"

ABSL_FLAG(int, workers, 2, "N: worker threads");
ABSL_FLAG(int, servers, 1, "K: parameter servers (in-process, own gRPC ports)");
ABSL_FLAG(int64_t, min_bytes, 64 << 10, "smallest size per worker");
ABSL_FLAG(int64_t, max_bytes, 256 << 20, "largest size per worker");
ABSL_FLAG(int64_t, chunk_kb, 4096, "largest key (--ps_chunk_kb)");
ABSL_FLAG(int64_t, message_kb, 1024, "largest message (--ps_message_kb)");
ABSL_FLAG(std::string, update, "worker", "--ps_update: worker or server");
ABSL_FLAG(int, warmup, 1, "untimed iterations per size");
ABSL_FLAG(int64_t, iter_bytes, 1 << 30,
          "iterations per size = clamp(iter_bytes / size, 3, 20)");
ABSL_FLAG(std::string, json, "", "also write one JSON line per size here");

namespace gradsync {
namespace {

// Runs `body(rank)` on N threads per iteration, all released together;
// returns each iteration's time from release to the last one's end.
class WorkerGang {
 public:
  explicit WorkerGang(int n) : n_(n) {}

  template <typename Body>
  absl::StatusOr<std::vector<double>> Run(int iterations, Body body) {
    std::vector<double> times;
    std::vector<absl::Status> errors(n_);
    std::vector<std::thread> threads;
    generation_ = 0;
    for (int r = 0; r < n_; ++r) {
      threads.emplace_back([this, r, iterations, &body, &errors] {
        for (int it = 0; it < iterations; ++it) {
          {
            absl::MutexLock lock(&mu_);
            auto released = [this, it] { return generation_ > it; };
            mu_.Await(absl::Condition(&released));
          }
          absl::Status status = body(r);
          if (!status.ok() && errors[r].ok()) errors[r] = status;
          absl::MutexLock lock(&mu_);
          ++done_;
        }
      });
    }
    for (int it = 0; it < iterations; ++it) {
      absl::Time start;
      {
        absl::MutexLock lock(&mu_);
        done_ = 0;
        start = absl::Now();
        ++generation_;
        auto all_done = [this] { return done_ == n_; };
        mu_.Await(absl::Condition(&all_done));
      }
      times.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    }
    for (std::thread& thread : threads) thread.join();
    for (const absl::Status& status : errors) RETURN_IF_ERROR(status);
    return times;
  }

 private:
  const int n_;
  absl::Mutex mu_;
  int generation_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

double Mean(const std::vector<double>& values, int skip) {
  double sum = 0;
  for (size_t i = skip; i < values.size(); ++i) sum += values[i];
  return sum / static_cast<double>(values.size() - skip);
}

struct PsRun {
  double time_us = 0;
  int64_t chunk_bytes = 0;
  int keys = 0;
  int64_t wrong = 0;
};

absl::StatusOr<PsRun> RunPs(int n, int k, int64_t bytes, int iterations,
                            int warmup, ps::UpdateMode mode) {
  const int64_t numel = bytes / 4;
  PsSyncOptions options;
  options.update_mode = mode;
  options.message_bytes = absl::GetFlag(FLAGS_message_kb) * 1024;
  // Keys small enough that all K servers get a share, as a real model's many
  // tensors would give them.
  const int64_t even_share = ((numel + k - 1) / k) * 4;
  options.chunk_bytes = std::min(absl::GetFlag(FLAGS_chunk_kb) * 1024, even_share);
  options.optimizer.kind = "sgd";
  options.optimizer.lr = 1.0f;
  options.optimizer.momentum = 0.0f;

  LoopbackClusterOptions cluster_options;
  cluster_options.num_workers = n;
  cluster_options.num_servers = k;
  cluster_options.job_id = "ps-benchmark";
  cluster_options.timeout = absl::Seconds(120);
  cluster_options.message_bytes = options.message_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<LoopbackCluster> cluster,
                   LoopbackCluster::Start(cluster_options));
  ASSIGN_OR_RETURN(ParamLayout layout,
                   ParamLayout::Create({{"tensor", {numel}}}, 0));
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateDevice(DeviceOptions()));

  std::vector<std::unique_ptr<GradientSync>> syncs(n);
  std::vector<std::vector<float>> grads(n), params(n);
  std::vector<absl::Status> setup(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      grads[r].assign(numel, static_cast<float>(r + 1));
      params[r].assign(numel, 0.0f);
      auto context = cluster->JoinWorker(r);
      if (!context.ok()) return void(setup[r] = context.status());
      auto sync = CreatePsSync(*context, options);
      if (!sync.ok()) return void(setup[r] = sync.status());
      syncs[r] = std::move(*sync);
      setup[r] = syncs[r]->Setup(layout, *device,
                                 {grads[r].data(), params[r].data()});
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : setup) RETURN_IF_ERROR(status);

  WorkerGang gang(n);
  ASSIGN_OR_RETURN(std::vector<double> times,
                   gang.Run(warmup + iterations, [&](int r) {
                     syncs[r]->BucketReady(0);
                     StepStats stats;
                     return syncs[r]->Finish(stats);
                   }));
  PsRun run;
  run.time_us = Mean(times, warmup);
  run.chunk_bytes = options.chunk_bytes;
  run.keys = static_cast<int>((numel * 4 + options.chunk_bytes - 1) / options.chunk_bytes);
  // Worker mode: the average of r + 1 over r < N, a fixed point of later
  // steps. Server mode (lr 1, plain SGD): parameters fall by it each step.
  const float average = static_cast<float>(n + 1) / 2.0f;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < numel; ++i) {
      const float expected =
          mode == ps::UPDATE_SERVER
              ? -average * static_cast<float>(warmup + iterations)
              : average;
      if ((mode == ps::UPDATE_SERVER ? params[r][i] : grads[r][i]) != expected) {
        ++run.wrong;
      }
    }
  }
  for (auto& sync : syncs) RETURN_IF_ERROR(sync->Shutdown());
  syncs.clear();
  RETURN_IF_ERROR(cluster->Finish());
  return run;
}

// --- Bare gRPC: the TransportProbe service and its client ------------------

class ProbeService final : public ps::TransportProbe::CallbackService {
 public:
  grpc::ServerReadReactor<ps::KeyPart>* Sink(grpc::CallbackServerContext*,
                                             ps::PushReply*) override {
    class Reactor : public grpc::ServerReadReactor<ps::KeyPart> {
     public:
      Reactor() { StartRead(&part_); }
      void OnReadDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::OK);
        StartRead(&part_);
      }
      void OnDone() override { delete this; }

     private:
      ps::KeyPart part_;
    };
    return new Reactor();
  }

  grpc::ServerWriteReactor<ps::KeyPart>* Source(
      grpc::CallbackServerContext*, const ps::PullRequest* request) override {
    class Reactor : public grpc::ServerWriteReactor<ps::KeyPart> {
     public:
      Reactor(int64_t total, int64_t part_bytes)
          : left_(total), part_bytes_(part_bytes) {
        data_.assign(static_cast<size_t>(part_bytes), '\0');
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::CANCELLED);
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (left_ == 0) return Finish(grpc::Status::OK);
        const int64_t n = std::min(left_, part_bytes_);
        left_ -= n;
        // Filled from a buffer like the PS fills from its sums: one copy.
        part_.mutable_data()->assign(data_.data(), static_cast<size_t>(n));
        StartWrite(&part_);
      }
      int64_t left_;
      const int64_t part_bytes_;
      std::string data_;
      ps::KeyPart part_;
    };
    return new Reactor(request->keys_size() > 0 ? request->keys(0) : 0,
                       request->header().key());
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
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    auto done = [this] { return left_ == 0; };
    mu_.Await(absl::Condition(&done));
    return status_;
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class SinkCall : public grpc::ClientWriteReactor<ps::KeyPart> {
 public:
  SinkCall(ps::TransportProbe::Stub* stub, ProbeRound* round, const float* src,
           int64_t bytes, int64_t part_bytes)
      : round_(round), src_(reinterpret_cast<const char*>(src)), left_(bytes),
        part_bytes_(part_bytes) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    stub->async()->Sink(&context_, &reply_, this);
    Next();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok && left_ > 0) Next();
  }
  void OnDone(const grpc::Status& status) override {
    round_->Done(status);
    delete this;
  }

 private:
  void Next() {
    const int64_t n = std::min(left_, part_bytes_);
    part_.mutable_data()->assign(src_, static_cast<size_t>(n));
    src_ += n;
    left_ -= n;
    if (left_ == 0) {
      StartWriteLast(&part_, grpc::WriteOptions());
    } else {
      StartWrite(&part_);
    }
  }
  ProbeRound* const round_;
  const char* src_;
  int64_t left_;
  const int64_t part_bytes_;
  grpc::ClientContext context_;
  ps::PushReply reply_;
  ps::KeyPart part_;
};

class SourceCall : public grpc::ClientReadReactor<ps::KeyPart> {
 public:
  SourceCall(ps::TransportProbe::Stub* stub, ProbeRound* round, float* dst,
             int64_t bytes, int64_t part_bytes)
      : round_(round), dst_(reinterpret_cast<char*>(dst)) {
    request_.add_keys(bytes);
    request_.mutable_header()->set_key(part_bytes);
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    stub->async()->Source(&context_, &request_, this);
    StartRead(&part_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::memcpy(dst_, part_.data().data(), part_.data().size());
    dst_ += part_.data().size();
    StartRead(&part_);
  }
  void OnDone(const grpc::Status& status) override {
    round_->Done(status);
    delete this;
  }

 private:
  ProbeRound* const round_;
  char* dst_;
  grpc::ClientContext context_;
  ps::PullRequest request_;
  ps::KeyPart part_;
};

absl::StatusOr<double> RunBareGrpc(int n, int k, int64_t bytes, int iterations,
                                   int warmup) {
  const int64_t part_bytes = absl::GetFlag(FLAGS_message_kb) * 1024;
  std::vector<std::unique_ptr<ProbeService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < k; ++s) {
    services.push_back(std::make_unique<ProbeService>());
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(services.back().get());
    servers.push_back(builder.BuildAndStart());
    if (servers.back() == nullptr) return absl::UnavailableError("probe server");
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  // Like the PS client: one channel per (worker, server).
  std::vector<std::vector<std::unique_ptr<ps::TransportProbe::Stub>>> stubs(n);
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < k; ++s) {
      stubs[r].push_back(ps::TransportProbe::NewStub(
          grpc::CreateChannel(addresses[s], grpc::InsecureChannelCredentials())));
    }
  }
  // S split over K servers on float boundaries, as the partitioner does.
  const int64_t numel = bytes / 4;
  std::vector<int64_t> share(k, (numel / k) * 4);
  for (int64_t i = 0; i < numel % k; ++i) share[i] += 4;
  std::vector<std::vector<float>> src(n, std::vector<float>(numel, 1.0f));
  std::vector<std::vector<float>> dst(n, std::vector<float>(numel, 0.0f));

  WorkerGang gang(n);
  ASSIGN_OR_RETURN(std::vector<double> times,
                   gang.Run(warmup + iterations, [&](int r) {
                     ProbeRound round(2 * k);
                     int64_t offset = 0;
                     for (int s = 0; s < k; ++s) {
                       new SinkCall(stubs[r][s].get(), &round,
                                    src[r].data() + offset / 4, share[s], part_bytes);
                       new SourceCall(stubs[r][s].get(), &round,
                                      dst[r].data() + offset / 4, share[s], part_bytes);
                       offset += share[s];
                     }
                     return round.Wait();
                   }));
  for (auto& server : servers) server->Shutdown(std::chrono::system_clock::now());
  return Mean(times, warmup);
}

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
      "# time: push+pull of <size> bytes per worker, all workers at once; "
      "algbw = size/time; GB/s = 1e9 B/s\n"
      "# grpc: the same bytes and pattern through a do-nothing gRPC stream "
      "service; ps/grpc = grpc time / ps time\n",
      n, k, absl::GetFlag(FLAGS_update).c_str(),
      static_cast<long long>(absl::GetFlag(FLAGS_message_kb)));
  std::printf("%12s %10s %6s %5s %12s %9s %12s %9s %8s %7s\n", "size", "chunk",
              "keys", "iters", "ps time(us)", "ps algbw", "grpc time",
              "grpc bw", "ps/grpc", "#wrong");
  for (int64_t bytes = absl::GetFlag(FLAGS_min_bytes);
       bytes <= absl::GetFlag(FLAGS_max_bytes); bytes *= 4) {
    const int iterations = static_cast<int>(std::clamp<int64_t>(
        absl::GetFlag(FLAGS_iter_bytes) / bytes, 3, 20));
    absl::StatusOr<PsRun> ps = RunPs(n, k, bytes, iterations, warmup, mode);
    if (!ps.ok()) {
      std::fprintf(stderr, "ps at %lld bytes: %s\n", static_cast<long long>(bytes),
                   std::string(ps.status().message()).c_str());
      return 1;
    }
    absl::StatusOr<double> bare = RunBareGrpc(n, k, bytes, iterations, warmup);
    if (!bare.ok()) {
      std::fprintf(stderr, "grpc at %lld bytes: %s\n",
                   static_cast<long long>(bytes),
                   std::string(bare.status().message()).c_str());
      return 1;
    }
    const double ps_bw = bytes / (ps->time_us * 1e3);
    const double bare_bw = bytes / (*bare * 1e3);
    std::printf("%12lld %10lld %6d %5d %12.1f %9.3f %12.1f %9.3f %8.2f %7lld\n",
                static_cast<long long>(bytes),
                static_cast<long long>(ps->chunk_bytes), ps->keys, iterations,
                ps->time_us, ps_bw, *bare, bare_bw, *bare / ps->time_us,
                static_cast<long long>(ps->wrong));
    std::fflush(stdout);
    if (json != nullptr) {
      *json << absl::StrFormat(
          "{\"benchmark\": \"ps\", \"workers\": %d, \"servers\": %d, "
          "\"update\": \"%s\", \"bytes\": %d, \"chunk_bytes\": %d, "
          "\"keys\": %d, \"iters\": %d, \"ps_time_us\": %.3f, "
          "\"ps_algbw_gbps\": %.4f, \"grpc_time_us\": %.3f, "
          "\"grpc_algbw_gbps\": %.4f, \"wrong\": %d}\n",
          n, k, absl::GetFlag(FLAGS_update), bytes, ps->chunk_bytes, ps->keys,
          iterations, ps->time_us, ps_bw, *bare, bare_bw, ps->wrong);
    }
  }
  return 0;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  gradsync::SetLogTag("ps_benchmark");
  gradsync::SetMinLogLevel(gradsync::LogLevel::kWarning);
  // The probe servers and channels come and go between sizes as well.
  gradsync::KeepCallbackQueueAlive();
  return gradsync::Main();
}
