// libFuzzer target: sequences of the messages a parameter server's shard
// (ps/server/shard.h) handles — Register, InitParams, Push, Pull, Shutdown, and
// the reads pulls make — from two fuzzed workers, with fuzzed job ids, ranks,
// steps, keys, sizes, offsets and payloads; some built field by field (mostly
// valid, so that calls get past the first checks and reach the arithmetic),
// some parsed from raw bytes as gRPC would. ps/server/server.cc only moves
// these messages between the wire and the shard (after its job-token check), so
// this is the boundary a hostile or confused peer reaches.
//
// Compression (ps/key_compression.h): each run registers one --compression and
// --ps_pull (sometimes garbage) and row-sparse keys; pushes are then mostly
// encodings of the key (core/sync/compression.h's byte format, with fuzzed
// indices, lengths and encodings, cut into parts), sometimes float32 or raw
// bytes, and encoded results are read as the pull writer reads them.
//
// Checks, besides ASan/UBSan's: no refusal is long; a key never reports more
// final floats than it has, nor an encoded read more bytes than the result
// has; a huge declared size is refused, not allocated (libFuzzer's
// -rss_limit_mb catches the allocation).
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
#include "core/sync/compression.h"
#include "ps/server/shard.h"

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

// The run's --compression and --ps_pull, as real workers agree on them.
struct Codec {
  std::string compression;
  std::string pull;
};

Codec PickCodec(FuzzInput& in) {
  static const char* const kCompressions[] = {
      "", "none", "fp16", "bf16", "topk:0.25", "randomk:0.5", "onebit"};
  static const char* const kPulls[] = {"", "dense", "union", "topk", "same"};
  Codec codec;
  codec.compression = in.InRange(0, 15) == 0
                          ? in.String(20)
                          : kCompressions[in.InRange(0, 6)];
  codec.pull = in.InRange(0, 15) == 0 ? in.String(10) : kPulls[in.InRange(0, 4)];
  return codec;
}

// Key 0 (40 floats) is mostly a row-sparse table of rows of 4.
int32_t RowWidth(int64_t key) { return key == 0 ? 4 : 0; }

// An encoding of a key of `numel` floats: mostly well formed (sparse rows of
// `row_width`, 16-bit values, signs), with fuzzed values, indices and
// lengths now and then.
std::string FuzzedEncoding(FuzzInput& in, int64_t numel, int32_t row_width) {
  EncodedBucket encoded;
  encoded.numel = in.InRange(0, 15) == 0 ? in.InRange(0, 64) : numel;
  switch (in.InRange(0, 4)) {
    case 0:
      encoded.encoding = Encoding::kFloat32;
      encoded.values.assign(encoded.numel, 1.0f);
      break;
    case 1:
    case 2:
      encoded.encoding = in.Bool() ? Encoding::kFp16 : Encoding::kBf16;
      for (int64_t i = 0; i < encoded.numel; ++i) {
        encoded.halves.push_back(static_cast<uint16_t>(in.Integral<uint16_t>()));
      }
      break;
    case 3: {
      encoded.encoding = Encoding::kSparse;
      encoded.row_width = in.InRange(0, 7) == 0 ? in.InRange(0, 8)
                          : row_width > 0      ? row_width
                                               : 1;
      const int64_t rows =
          encoded.row_width > 0 ? encoded.numel / encoded.row_width : 0;
      int64_t row = -1;
      for (int k = in.InRange(0, 6); k > 0; --k) {
        row = in.InRange(0, 7) == 0 ? in.InRange(0, rows + 2)
                                    : row + 1 + in.InRange(0, 3);
        if (row < 0) continue;
        encoded.index.push_back(static_cast<uint32_t>(row));
        for (int32_t j = 0; j < encoded.row_width; ++j) {
          encoded.values.push_back(static_cast<float>(in.InRange(-8, 8)));
        }
      }
      break;
    }
    default:
      encoded.encoding = Encoding::kOneBit;
      encoded.positive_scale = static_cast<float>(in.InRange(0, 4));
      encoded.negative_scale = static_cast<float>(in.InRange(0, 4));
      encoded.signs.assign((encoded.numel + 63) / 64, in.Integral<uint64_t>());
      break;
  }
  std::string bytes;
  AppendSerialized(encoded, &bytes);
  if (in.InRange(0, 15) == 0) bytes.resize(in.InRange(0, bytes.size()));
  return bytes;
}

// An encoded part of `key` for `step`: a piece of a fuzzed encoding.
void FillEncodedPart(FuzzInput& in, int64_t step, ps::KeyPart* part) {
  const int64_t key = in.InRange(0, kKeys);
  FillHeader(in, step, key, part->mutable_header());
  const int64_t numel = KeySize(key);
  part->set_key_numel(in.InRange(0, 7) == 0 ? in.Integral<int64_t>() : numel);
  const std::string encoding = FuzzedEncoding(in, numel, RowWidth(key));
  const int64_t size = static_cast<int64_t>(encoding.size());
  // Mostly the whole encoding or its first piece, sometimes anything.
  const int64_t offset = in.InRange(0, 3) == 0 ? in.InRange(0, size) : 0;
  const int64_t length = in.Bool() ? size - offset : in.InRange(0, size - offset);
  part->set_offset(in.InRange(0, 15) == 0 ? in.Integral<int64_t>() : offset);
  part->set_data(encoding.substr(offset, length));
  part->set_encoded_bytes(in.InRange(0, 15) == 0 ? in.Integral<int64_t>()
                                                 : size);
}

// `consistency`: 0 BSP, 1 SSP, 2 ASP (for the whole run, as real workers
// agree on it; SSP's staleness is 1).
void FillRegister(FuzzInput& in, bool server_mode, int consistency,
                  const Codec& codec, ps::RegisterConfig* config) {
  config->set_compression(codec.compression);
  config->set_pull(codec.pull);
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
    spec->set_row_width(in.InRange(0, 15) == 0 ? in.Integral<int32_t>()
                                               : RowWidth(key));
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
  const Codec codec = PickCodec(in);
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
          FillRegister(in, server_mode, consistency, codec, &config);
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
        } else if (in.Bool()) {
          FillEncodedPart(in, step, &part);
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
        if (shard.EncodedResult(key)) {
          absl::StatusOr<int64_t> size = shard.EncodedResultBytes(key, at, rank);
          Check(size.status());
          if (size.ok() && *size > 0) {
            std::string bytes(static_cast<size_t>(*size), '\0');
            const int64_t from = in.InRange(0, 3) == 0
                                     ? in.Integral<int64_t>()
                                     : in.InRange(0, *size);
            absl::StatusOr<int64_t> n = shard.ReadEncodedResult(
                key, at, rank, from, in.InRange(0, 64), [&](int64_t count) {
                  if (from < 0 || count > *size - from) std::abort();
                  return bytes.data() + from;
                });
            Check(n.status());
          }
        }
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
