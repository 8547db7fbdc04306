// libFuzzer target: sequences of the messages a parameter server's shard
// (ps/shard.h) handles — Register, InitParams, Push, Pull, Shutdown, and the
// reads pulls make — from two fuzzed workers, with fuzzed job ids, ranks,
// steps, keys, sizes, offsets and payloads; some built field by field (mostly
// valid, so that calls get past the first checks and reach the arithmetic),
// some parsed from raw bytes as gRPC would. ps/server.cc only moves these
// messages between the wire and the shard (after its job-token check), so
// this is the boundary a hostile or confused peer reaches.
//
// Checks, besides ASan/UBSan's: no refusal is long; a key never reports more
// final floats than it has; a huge declared size is refused, not allocated
// (libFuzzer's -rss_limit_mb catches the allocation).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/base/logging.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/parameter_server.pb.h"
#include "ps/shard.h"

namespace gradsync {
namespace {

constexpr char kJob[] = "fuzz-job";
constexpr int kWorkers = 2;
constexpr int kServers = 1;
constexpr int64_t kBlockFloats = 16;
// The keys a well-behaved worker registers: sizes around the block size,
// empty and one-float keys included.
constexpr int64_t kKeySizes[] = {40, 0, 1, 17};
constexpr int kKeys = sizeof(kKeySizes) / sizeof(kKeySizes[0]);
// A registration asking for more is refused (--ps_max_shard_mb); small, so
// that a shard that allocated before checking would show at once.
constexpr int64_t kMaxFloats = 1 << 16;

class CountingWaiter : public KeyWaiter {
 public:
  void KeyProgress(int64_t) override { ++calls; }
  int64_t calls = 0;
};

std::string Pick(FuzzInput& in, const std::string& usual) {
  if (in.InRange(0, 7) != 0) return usual;
  return in.String(300);
}

int64_t Step(FuzzInput& in, int64_t usual) {
  switch (in.InRange(0, 7)) {
    case 0:
      return in.Integral<int64_t>();
    case 1:
      return usual + in.InRange(-3, 3);
    default:
      return usual;
  }
}

void FillHeader(FuzzInput& in, int64_t step, int64_t key, ps::Header* header) {
  header->set_job_id(Pick(in, kJob));
  header->set_rank(in.InRange(0, 7) == 0 ? in.Integral<int32_t>()
                                         : in.InRange(0, kWorkers - 1));
  header->set_step(Step(in, step));
  header->set_key(in.InRange(0, 7) == 0 ? in.Integral<int64_t>() : key);
}

int64_t KeySize(int64_t key) {
  return key >= 0 && key < kKeys ? kKeySizes[key] : 0;
}

// A part of `key`: mostly its true size, an offset inside it and a payload of
// small integers that fits; sometimes anything.
void FillPart(FuzzInput& in, int64_t step, ps::KeyPart* part) {
  const int64_t key = in.InRange(0, kKeys);  // kKeys itself is unknown
  FillHeader(in, step, key, part->mutable_header());
  const int64_t numel = KeySize(key);
  part->set_key_numel(in.InRange(0, 7) == 0 ? in.Integral<int64_t>() : numel);
  const int64_t offset =
      in.InRange(0, 3) == 0 ? in.Integral<int64_t>() : in.InRange(0, numel);
  part->set_offset(offset);
  int64_t floats = in.InRange(0, 48);
  std::vector<float> data(floats);
  for (float& value : data) value = static_cast<float>(in.InRange(-8, 8));
  std::string bytes(reinterpret_cast<const char*>(data.data()),
                    data.size() * sizeof(float));
  if (in.InRange(0, 7) == 0) bytes.resize(in.InRange(0, bytes.size()));
  part->set_data(bytes);
}

// `consistency`: 0 BSP, 1 SSP, 2 ASP (for the whole run, as real workers
// agree on it; SSP's staleness is 1).
void FillRegister(FuzzInput& in, bool server_mode, int consistency,
                  ps::RegisterConfig* config) {
  FillHeader(in, -1, -1, config->mutable_header());
  config->set_num_workers(in.InRange(0, 7) == 0 ? in.Integral<int32_t>()
                                                : kWorkers);
  config->set_num_servers(in.InRange(0, 7) == 0 ? in.Integral<int32_t>()
                                                : kServers);
  config->set_server_rank(in.InRange(0, 7) == 0 ? in.Integral<int32_t>() : 0);
  config->set_update_mode(server_mode ? ps::UPDATE_SERVER : ps::UPDATE_WORKER);
  config->set_consistency(static_cast<ps::Consistency>(consistency));
  config->set_staleness(in.InRange(0, 7) == 0 ? in.Integral<int32_t>()
                                              : (consistency == 1 ? 1 : 0));
  ps::OptimizerConfig* optimizer = config->mutable_optimizer();
  optimizer->set_kind(in.InRange(0, 7) == 0 ? in.String(8)
                                            : (in.Bool() ? "sgd" : "adam"));
  optimizer->set_lr(0.5f);
  optimizer->set_momentum(0.5f);
  optimizer->set_beta1(0.9f);
  optimizer->set_beta2(0.999f);
  optimizer->set_epsilon(1e-8f);
  for (int key = 0; key < kKeys; ++key) {
    if (in.InRange(0, 15) == 0) continue;  // a key left out
    ps::KeySpec* spec = config->add_keys();
    spec->set_key(in.InRange(0, 15) == 0 ? in.Integral<int64_t>() : key);
    spec->set_numel(in.InRange(0, 15) == 0 ? in.Integral<int64_t>()
                                           : kKeySizes[key]);
  }
}

void Check(const absl::Status& status) {
  if (status.message().size() > 2000) std::abort();
}

}  // namespace
}  // namespace gradsync

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Refusals are logged; a million log lines would only slow the fuzzer.
  gradsync::SetMinLogLevel(gradsync::LogLevel::kFatal);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  FuzzInput in(data, size);
  ServerShard shard(kJob, /*server_rank=*/0, kServers, kWorkers, kBlockFloats,
                    kMaxFloats);
  const bool server_mode = in.Bool();
  const int consistency = server_mode ? in.InRange(0, 2) : 0;
  auto waiter = std::make_shared<CountingWaiter>();
  // The step a well-behaved worker would be at: pushes and pulls mostly aim
  // at it, so that steps complete and the next ones are exercised too.
  int64_t step = 0;
  for (int calls = 0; calls < 96 && in.remaining() > 0; ++calls) {
    const bool raw = in.InRange(0, 7) == 0;
    absl::Status status;
    switch (in.InRange(0, 6)) {
      case 0: {
        ps::RegisterConfig config;
        if (raw) {
          if (!config.ParseFromString(in.String(2000))) continue;
        } else {
          FillRegister(in, server_mode, consistency, &config);
        }
        status = shard.Register(config);
        break;
      }
      case 1: {
        ps::KeyPart part;
        if (raw) {
          if (!part.ParseFromString(in.String(2000))) continue;
        } else {
          FillPart(in, -1, &part);
        }
        status = shard.InitParams(part);
        if (in.Bool()) Check(shard.CheckParamsComplete());
        break;
      }
      case 2:
      case 3: {
        ps::KeyPart part;
        if (raw) {
          if (!part.ParseFromString(in.String(2000))) continue;
        } else {
          FillPart(in, step, &part);
        }
        status = shard.Push(part);
        break;
      }
      case 4: {
        ps::PullRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(2000))) continue;
        } else {
          FillHeader(in, step, -1, request.mutable_header());
          for (int k = in.InRange(0, kKeys); k > 0; --k) {
            request.add_keys(in.InRange(0, 15) == 0 ? in.Integral<int64_t>()
                                                    : in.InRange(0, kKeys));
          }
        }
        status = shard.Pull(request, waiter);
        break;
      }
      case 5: {
        // What a pull's writer does once told a key made progress.
        const int64_t key = in.InRange(0, 7) == 0 ? in.Integral<int64_t>()
                                                  : in.InRange(0, kKeys);
        const int64_t at = Step(in, step);
        const int rank = in.InRange(0, 7) == 0 ? in.Integral<int32_t>()
                                               : in.InRange(0, kWorkers - 1);
        const int64_t final_floats = shard.FinalFloats(key, at, rank);
        const int64_t numel = shard.KeyNumel(key);
        if (final_floats > numel || numel < 0) std::abort();
        ps::KeyPart part;
        const int64_t offset = in.InRange(0, 3) == 0 ? in.Integral<int64_t>()
                                                     : in.InRange(0, numel);
        status = shard.ReadResult(key, at, rank, offset,
                                  in.InRange(0, 7) == 0
                                      ? in.Integral<int64_t>()
                                      : in.InRange(1, kBlockFloats),
                                  &part);
        if (status.ok() &&
            static_cast<int64_t>(part.data().size()) >
                (numel - part.offset()) * static_cast<int64_t>(sizeof(float))) {
          std::abort();  // read past the key's end
        }
        shard.MissingWorkers(key, at, rank);
        if (in.InRange(0, 3) == 0) ++step;  // the workers move on
        break;
      }
      default: {
        ps::ShutdownRequest request;
        if (raw) {
          if (!request.ParseFromString(in.String(200))) continue;
        } else {
          FillHeader(in, step, -1, request.mutable_header());
        }
        status = shard.Shutdown(request).status();
        shard.WorkersNotShutDown();
        break;
      }
    }
    Check(status);
  }
  shard.SummaryJson();
  return 0;
}
