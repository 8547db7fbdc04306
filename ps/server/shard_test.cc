// The server shard without gRPC: BSP aggregation, the server-side optimizer,
// SSP and ASP, and refusal of bad input without changing any state.
#include "ps/server/shard.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ps/consistency.h"
#include "ps/key_compression.h"
#include "core/sync/compression.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "shard-test";
// Blocks larger than any key: a key's result is final all at once.
constexpr int64_t kWholeKeys = 1 << 20;

ps::Header MakeHeader(int rank, int64_t step, int64_t key,
                      const std::string& job = kJob) {
  ps::Header header;
  header.set_job_id(job);
  header.set_rank(rank);
  header.set_step(step);
  header.set_key(key);
  return header;
}

ps::KeyPart MakePart(int rank, int64_t step, int64_t key, int64_t key_numel,
                     int64_t offset, const std::vector<float>& values,
                     const std::string& job = kJob) {
  ps::KeyPart part;
  *part.mutable_header() = MakeHeader(rank, step, key, job);
  part.set_key_numel(key_numel);
  part.set_offset(offset);
  part.mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(float));
  return part;
}

ps::RegisterConfig MakeConfig(int rank, int num_workers,
                              std::vector<std::pair<int64_t, int64_t>> keys,
                              ps::UpdateMode mode = ps::UPDATE_WORKER) {
  ps::RegisterConfig config;
  *config.mutable_header() = MakeHeader(rank, -1, -1);
  config.set_num_workers(num_workers);
  config.set_num_servers(1);
  config.set_server_rank(0);
  config.set_update_mode(mode);
  for (const auto& [key, numel] : keys) {
    ps::KeySpec* spec = config.add_keys();
    spec->set_key(key);
    spec->set_numel(numel);
  }
  return config;
}

std::vector<float> Read(ServerShard& shard, int64_t key, int64_t step) {
  ps::KeyPart part;
  absl::Status status =
      shard.ReadResult(key, step, /*rank=*/0, 0, 1 << 20, &part);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<float> values(part.data().size() / 4);
  std::memcpy(values.data(), part.data().data(), part.data().size());
  return values;
}

std::vector<int> Workers(const std::vector<ServerShard::MissingPush>& pushes) {
  std::vector<int> workers;
  for (const auto& push : pushes) workers.push_back(push.worker);
  return workers;
}

class RecordingWaiter : public KeyWaiter {
 public:
  void KeyProgress(int64_t key) override {
    absl::MutexLock lock(&mu_);
    ready_.push_back(key);
  }
  std::vector<int64_t> ready() {
    absl::MutexLock lock(&mu_);
    return ready_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> ready_;
};

ps::PullRequest MakePull(int rank, int64_t step, std::vector<int64_t> keys) {
  ps::PullRequest request;
  *request.mutable_header() = MakeHeader(rank, step, -1);
  for (int64_t key : keys) request.add_keys(key);
  return request;
}

TEST(ServerShardTest, PullIsAnsweredOnceEveryWorkerPushed) {
  ServerShard shard(kJob, 0, 1, 3, kWholeKeys);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(shard.Register(MakeConfig(r, 3, {{4, 3}, {9, 2}})).ok());
  }
  auto waiter = std::make_shared<RecordingWaiter>();
  ASSERT_TRUE(shard.Pull(MakePull(1, 0, {4, 9}), waiter).ok());
  // Parts of one push may be split anywhere.
  ASSERT_TRUE(shard.Push(MakePart(0, 0, 4, 3, 0, {1, 2})).ok());
  ASSERT_TRUE(shard.Push(MakePart(0, 0, 4, 3, 2, {3})).ok());
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 4, 3, 0, {10, 20, 30})).ok());
  EXPECT_TRUE(waiter->ready().empty());
  EXPECT_EQ(Workers(shard.MissingWorkers(4, 0, 1)), std::vector<int>{2});
  EXPECT_EQ(Workers(shard.MissingWorkers(9, 0, 1)),
            (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(shard.Push(MakePart(2, 0, 4, 3, 0, {100, 200, 300})).ok());
  EXPECT_EQ(waiter->ready(), std::vector<int64_t>{4});
  EXPECT_TRUE(shard.MissingWorkers(4, 0, 1).empty());
  EXPECT_EQ(Read(shard, 4, 0),
            (std::vector<float>{111.0f / 3, 222.0f / 3, 333.0f / 3}));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(shard.Push(MakePart(r, 0, 9, 2, 0, {1, float(r)})).ok());
  }
  EXPECT_EQ(waiter->ready(), (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(Read(shard, 9, 0), (std::vector<float>{1, 1}));
  // A pull for a completed step is answered at once.
  auto late = std::make_shared<RecordingWaiter>();
  ASSERT_TRUE(shard.Pull(MakePull(2, 0, {9}), late).ok());
  EXPECT_EQ(late->ready(), std::vector<int64_t>{9});
}

// Two buffers alternate by step parity: many steps in a row stay exact, and
// the result of step t is readable while step t + 1 accumulates.
TEST(ServerShardTest, ManyStepsReuseTwoBuffers) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ASSERT_TRUE(shard.Register(MakeConfig(0, 2, {{0, 2}})).ok());
  ASSERT_TRUE(shard.Register(MakeConfig(1, 2, {{0, 2}})).ok());
  for (int step = 0; step < 50; ++step) {
    const float a = static_cast<float>(step);
    ASSERT_TRUE(shard.Push(MakePart(0, step, 0, 2, 0, {a, 1})).ok());
    if (step > 0) {
      // Step - 1 is still readable while this step accumulates.
      EXPECT_EQ(Read(shard, 0, step - 1),
                (std::vector<float>{(2 * a - 2 + 1) / 2, 2}));
    }
    ASSERT_TRUE(shard.Push(MakePart(1, step, 0, 2, 0, {a + 1, 3})).ok());
    EXPECT_EQ(Read(shard, 0, step), (std::vector<float>{(2 * a + 1) / 2, 2}));
    ps::KeyPart part;
    if (step > 0) {
      EXPECT_FALSE(shard.ReadResult(0, step - 1, 0, 0, 2, &part).ok());
    }
  }
}

// Every refused push leaves sums, steps and counters as they were: after all
// of them, the legitimate pushes still produce exactly the average.
TEST(ServerShardTest, BadPushesAreRefusedAndChangeNothing) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ASSERT_TRUE(shard.Register(MakeConfig(0, 2, {{0, 4}, {1, 2}})).ok());
  ASSERT_TRUE(shard.Register(MakeConfig(1, 2, {{0, 4}, {1, 2}})).ok());
  ASSERT_TRUE(shard.Push(MakePart(0, 0, 0, 4, 0, {1, 2, 3, 4})).ok());
  const std::string before = shard.SummaryJson();

  struct Case {
    const char* name;
    ps::KeyPart part;
    absl::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"wrong key size", MakePart(1, 0, 0, 5, 0, {1, 2, 3, 4, 5}),
       absl::StatusCode::kInvalidArgument, "this server's has 4"},
      {"too long", MakePart(1, 0, 0, 4, 0, {1, 2, 3, 4, 5}),
       absl::StatusCode::kInvalidArgument, "does not continue"},
      {"out of order", MakePart(1, 0, 0, 4, 2, {1, 2}),
       absl::StatusCode::kInvalidArgument, "does not continue"},
      {"unknown key", MakePart(1, 0, 7, 4, 0, {1, 2, 3, 4}),
       absl::StatusCode::kInvalidArgument, "unknown key 7"},
      {"second push", MakePart(0, 0, 0, 4, 0, {1, 2, 3, 4}),
       absl::StatusCode::kAlreadyExists, "worker 0 already pushed"},
      {"ahead", MakePart(1, 1, 0, 4, 0, {1, 2, 3, 4}),
       absl::StatusCode::kOutOfRange, "too far ahead"},
      {"unknown rank", MakePart(2, 0, 0, 4, 0, {1, 2, 3, 4}),
       absl::StatusCode::kInvalidArgument, "unknown worker rank 2"},
      {"negative rank", MakePart(-1, 0, 0, 4, 0, {1, 2, 3, 4}),
       absl::StatusCode::kInvalidArgument, "unknown worker rank -1"},
      {"wrong job", MakePart(1, 0, 0, 4, 0, {1, 2, 3, 4}, "other-job"),
       absl::StatusCode::kFailedPrecondition, "job id 'other-job'"},
  };
  for (const Case& c : cases) {
    absl::Status status = shard.Push(c.part);
    EXPECT_EQ(status.code(), c.code) << c.name << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(std::string(status.message()), HasSubstr("server 0: push"))
        << c.name;
  }
  {
    ps::KeyPart ragged = MakePart(1, 0, 0, 4, 0, {1});
    ragged.mutable_data()->push_back('x');
    EXPECT_EQ(shard.Push(ragged).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(shard.SummaryJson(), before);

  ASSERT_TRUE(shard.Push(MakePart(1, 0, 0, 4, 0, {10, 20, 30, 40})).ok());
  EXPECT_EQ(Read(shard, 0, 0), (std::vector<float>{5.5f, 11, 16.5f, 22}));
  // Key 1 was untouched by all of the above: it completes normally.
  ASSERT_TRUE(shard.Push(MakePart(0, 0, 1, 2, 0, {2, 4})).ok());
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 1, 2, 0, {4, 8})).ok());
  EXPECT_EQ(Read(shard, 1, 0), (std::vector<float>{3, 6}));

  // Step 0 is over: pushing it again is a step from the past.
  absl::Status past = shard.Push(MakePart(1, 0, 0, 4, 0, {1, 2, 3, 4}));
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.message()), HasSubstr("in the past"));
  EXPECT_EQ(Read(shard, 0, 0), (std::vector<float>{5.5f, 11, 16.5f, 22}));
}

TEST(ServerShardTest, BadPullsRegisterNothing) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ASSERT_TRUE(shard.Register(MakeConfig(0, 2, {{0, 1}, {1, 1}})).ok());
  ASSERT_TRUE(shard.Register(MakeConfig(1, 2, {{0, 1}, {1, 1}})).ok());
  auto waiter = std::make_shared<RecordingWaiter>();
  struct Case {
    ps::PullRequest request;
    absl::StatusCode code;
    const char* message;
  };
  ps::PullRequest wrong_job = MakePull(0, 0, {0});
  wrong_job.mutable_header()->set_job_id("nope");
  const std::vector<Case> cases = {
      {MakePull(0, 1, {0, 1}), absl::StatusCode::kOutOfRange, "too far ahead"},
      {MakePull(0, 0, {0, 5}), absl::StatusCode::kInvalidArgument,
       "unknown key 5"},
      {MakePull(0, 0, {1, 1}), absl::StatusCode::kInvalidArgument,
       "requested twice"},
      {MakePull(0, 0, {}), absl::StatusCode::kInvalidArgument, "names no keys"},
      {MakePull(3, 0, {0}), absl::StatusCode::kInvalidArgument,
       "unknown worker rank 3"},
      {wrong_job, absl::StatusCode::kFailedPrecondition, "job id 'nope'"},
  };
  for (const Case& c : cases) {
    absl::Status status = shard.Pull(c.request, waiter);
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
  // Complete both keys: a waiter from a refused pull must never be told.
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(shard.Push(MakePart(r, 0, 0, 1, 0, {1})).ok());
    ASSERT_TRUE(shard.Push(MakePart(r, 0, 1, 1, 0, {1})).ok());
  }
  EXPECT_TRUE(waiter->ready().empty());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(shard.Push(MakePart(r, 1, 0, 1, 0, {1})).ok());
  }
  absl::Status past = shard.Pull(MakePull(0, 0, {0}), waiter);
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.message()), HasSubstr("in the past"));
}

TEST(ServerShardTest, RegistrationsMustAgree) {
  ServerShard shard(kJob, 0, 1, 3, kWholeKeys);
  ASSERT_TRUE(shard.Register(MakeConfig(0, 3, {{0, 4}, {1, 2}})).ok());
  absl::Status table = shard.Register(MakeConfig(1, 3, {{0, 4}, {1, 3}}));
  EXPECT_EQ(table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(table.message()), HasSubstr("key table differs"));
  absl::Status mode =
      shard.Register(MakeConfig(1, 3, {{0, 4}, {1, 2}}, ps::UPDATE_SERVER));
  EXPECT_THAT(std::string(mode.message()), HasSubstr("--ps_update=server"));
  absl::Status world = shard.Register(MakeConfig(1, 4, {{0, 4}, {1, 2}}));
  EXPECT_THAT(std::string(world.message()), HasSubstr("4 workers"));
  EXPECT_EQ(shard.Register(MakeConfig(0, 3, {{0, 4}, {1, 2}})).code(),
            absl::StatusCode::kAlreadyExists);
  // A worker that never registered cannot push.
  absl::Status unregistered = shard.Push(MakePart(2, 0, 0, 4, 0, {1, 2, 3, 4}));
  EXPECT_THAT(std::string(unregistered.message()),
              HasSubstr("has not registered"));
  EXPECT_TRUE(shard.Register(MakeConfig(1, 3, {{0, 4}, {1, 2}})).ok());
}

TEST(ServerShardTest, OversizedRegistrationIsRefusedBeforeAllocating) {
  // Limit 1,000 floats; the declared sizes would need exabytes, and their sum
  // overflows int64 — refused either way, and nothing is configured.
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys, /*max_floats=*/1000);
  absl::Status huge = shard.Register(MakeConfig(
      0, 2, {{0, 600}, {1, int64_t{1} << 62}, {2, int64_t{1} << 62}}));
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.message()), HasSubstr("--ps_max_shard_mb"));
  EXPECT_THAT(std::string(huge.message()), HasSubstr("at key 1"));
  absl::Status sum = shard.Register(MakeConfig(0, 2, {{0, 600}, {1, 401}}));
  EXPECT_EQ(sum.code(), absl::StatusCode::kResourceExhausted);
  // Exactly at the limit is fine, and the refusals left no trace.
  EXPECT_TRUE(shard.Register(MakeConfig(0, 2, {{0, 600}, {1, 400}})).ok());
  EXPECT_EQ(shard.KeyNumel(1), 400);
}

TEST(ServerShardTest, ShutdownCountsEveryWorker) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ps::ShutdownRequest request;
  *request.mutable_header() = MakeHeader(1, 3, -1);
  auto first = shard.Shutdown(request);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(*first);
  EXPECT_EQ(shard.WorkersNotShutDown(), std::vector<int>{0});
  *request.mutable_header() = MakeHeader(0, 3, -1);
  auto second = shard.Shutdown(request);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(*second);
}

// The server-side optimizer runs core's optimizer on sum / N, so it is the
// very arithmetic a worker would run on the averaged gradient: bit for bit.
void CheckServerOptimizerMatchesCore(const OptimizerOptions& options,
                                     int64_t block_floats) {
  constexpr int kWorkers = 4;
  constexpr int64_t kNumel = 37;
  ServerShard shard(kJob, 0, 1, kWorkers, block_floats);
  ps::RegisterConfig config =
      MakeConfig(0, kWorkers, {{0, kNumel}}, ps::UPDATE_SERVER);
  ps::OptimizerConfig* o = config.mutable_optimizer();
  o->set_kind(options.kind);
  o->set_lr(options.lr);
  o->set_momentum(options.momentum);
  o->set_weight_decay(options.weight_decay);
  o->set_beta1(options.beta1);
  o->set_beta2(options.beta2);
  o->set_epsilon(options.epsilon);
  for (int r = 0; r < kWorkers; ++r) {
    *config.mutable_header() = MakeHeader(r, -1, -1);
    ASSERT_TRUE(shard.Register(config).ok());
  }
  std::vector<float> params(kNumel);
  for (int64_t i = 0; i < kNumel; ++i) params[i] = 0.01f * (i - 17);
  EXPECT_FALSE(shard.CheckParamsComplete().ok());
  ps::KeyPart init = MakePart(0, -1, 0, kNumel, 0, params);
  ASSERT_TRUE(shard.InitParams(init).ok());
  ASSERT_TRUE(shard.CheckParamsComplete().ok());

  auto device = CreateDevice(DeviceOptions());
  ASSERT_TRUE(device.ok());
  auto reference = CreateOptimizer(options);
  ASSERT_TRUE(reference.ok());
  ASSERT_TRUE((*reference)->Bind(**device, kNumel).ok());

  for (int step = 0; step < 3; ++step) {
    std::vector<float> sum(kNumel, 0.0f);
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<float> grads(kNumel);
      for (int64_t i = 0; i < kNumel; ++i) {
        grads[i] = 0.37f * (r + 1) - 0.011f * i + 0.5f * step;
        sum[i] += grads[i];
      }
      // In two parts, so blocks are finalised while the key is incomplete.
      const std::vector<float> head(grads.begin(), grads.begin() + 20);
      const std::vector<float> tail(grads.begin() + 20, grads.end());
      ASSERT_TRUE(shard.Push(MakePart(r, step, 0, kNumel, 0, head)).ok());
      ASSERT_TRUE(shard.Push(MakePart(r, step, 0, kNumel, 20, tail)).ok());
    }
    std::vector<float> average(kNumel);
    for (int64_t i = 0; i < kNumel; ++i) average[i] = sum[i] / kWorkers;
    (*reference)->Step(params.data(), average.data(), options.lr);
    EXPECT_EQ(Read(shard, 0, step), params) << options.kind << " step " << step;
  }
}

TEST(ServerShardTest, ServerSgdIsCoreSgd) {
  OptimizerOptions options;
  options.kind = "sgd";
  options.lr = 0.1f;
  options.momentum = 0.9f;
  options.weight_decay = 0.01f;
  CheckServerOptimizerMatchesCore(options, kWholeKeys);
  CheckServerOptimizerMatchesCore(options, 8);
}

TEST(ServerShardTest, ServerAdamIsCoreAdam) {
  OptimizerOptions options;
  options.kind = "adam";
  options.lr = 0.01f;
  options.weight_decay = 0.001f;
  CheckServerOptimizerMatchesCore(options, kWholeKeys);
  CheckServerOptimizerMatchesCore(options, 8);
}

// With blocks of 2 floats, the first blocks of a key are final (and pulled)
// as soon as the slowest worker has pushed past them.
TEST(ServerShardTest, BlocksBecomeFinalBeforeTheKeyCompletes) {
  ServerShard shard(kJob, 0, 1, 2, /*block_floats=*/2);
  ASSERT_TRUE(shard.Register(MakeConfig(0, 2, {{0, 5}})).ok());
  ASSERT_TRUE(shard.Register(MakeConfig(1, 2, {{0, 5}})).ok());
  auto waiter = std::make_shared<RecordingWaiter>();
  ASSERT_TRUE(shard.Pull(MakePull(0, 0, {0}), waiter).ok());
  ASSERT_TRUE(shard.Push(MakePart(0, 0, 0, 5, 0, {2, 4, 6, 8, 10})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 0, 0), 0);
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 0, 5, 0, {4, 6, 8})).ok());
  // Both pushed 3 floats: the first block (2 floats) is final.
  EXPECT_EQ(shard.FinalFloats(0, 0, 0), 2);
  EXPECT_EQ(waiter->ready(), std::vector<int64_t>{0});
  EXPECT_EQ(Read(shard, 0, 0), (std::vector<float>{3, 5}));
  ps::KeyPart part;
  EXPECT_FALSE(shard.ReadResult(0, 0, 0, 2, 10, &part).ok());
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 0, 5, 3, {10, 12})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 0, 0), 5);
  EXPECT_EQ(waiter->ready(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(Read(shard, 0, 0), (std::vector<float>{3, 5, 7, 9, 11}));
  // Step 1: nothing final yet, and step 0's result stays readable.
  EXPECT_EQ(shard.FinalFloats(0, 1, 0), 0);
  ASSERT_TRUE(shard.Push(MakePart(0, 1, 0, 5, 0, {1, 1, 1, 1, 1})).ok());
  EXPECT_EQ(Read(shard, 0, 0), (std::vector<float>{3, 5, 7, 9, 11}));
}

// --- Stale-synchronous and asynchronous modes --------------------------------

// A server-mode registration under `consistency` (SGD, lr 0.5, no momentum).
ps::RegisterConfig AsyncConfig(int rank, int num_workers,
                               ps::Consistency consistency, int staleness,
                               int64_t numel) {
  ps::RegisterConfig config =
      MakeConfig(rank, num_workers, {{0, numel}}, ps::UPDATE_SERVER);
  config.mutable_optimizer()->set_kind("sgd");
  config.mutable_optimizer()->set_lr(0.5f);
  config.set_consistency(consistency);
  config.set_staleness(staleness);
  return config;
}

// Registers every worker with `config` (its header's rank replaced) and
// sends worker 0's initial parameters.
void RegisterAll(ServerShard& shard, ps::RegisterConfig config, int workers,
                 const std::vector<float>& params) {
  for (int r = 0; r < workers; ++r) {
    *config.mutable_header() = MakeHeader(r, -1, -1);
    ASSERT_TRUE(shard.Register(config).ok()) << r;
  }
  ASSERT_TRUE(
      shard.InitParams(MakePart(0, -1, 0, params.size(), 0, params)).ok());
}

nlohmann::json Summary(const ServerShard& shard) {
  return nlohmann::json::parse(shard.SummaryJson());
}

// SSP with staleness 2: the fast worker's pulls of steps 0 and 1 are
// answered while the slow one has pushed nothing; its pull of step 2 (it
// would then compute step 3, three ahead) waits, naming the slow worker and
// the step it must push, and is answered the moment that push is applied.
TEST(ServerShardTest, SspFastWorkerWaitsExactlyStalenessAhead) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  RegisterAll(shard, AsyncConfig(0, 2, ps::CONSISTENCY_SSP, 2, 3), 2,
              {1, 1, 1});
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(shard.Push(MakePart(0, step, 0, 3, 0, {1, 2, 3})).ok());
    EXPECT_EQ(shard.FinalFloats(0, step, 0), 3) << step;
    Read(shard, 0, step);
  }
  auto waiter = std::make_shared<RecordingWaiter>();
  ASSERT_TRUE(shard.Pull(MakePull(0, 2, {0}), waiter).ok());
  ASSERT_TRUE(shard.Push(MakePart(0, 2, 0, 3, 0, {1, 2, 3})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 2, 0), 0);
  const std::vector<ServerShard::MissingPush> missing =
      shard.MissingWorkers(0, 2, 0);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].worker, 1);
  EXPECT_EQ(missing[0].step, 0);
  ps::KeyPart part;
  EXPECT_FALSE(shard.ReadResult(0, 2, 0, 0, 10, &part).ok());
  // The slow worker's first push releases the fast one.
  const size_t told = waiter->ready().size();
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 0, 3, 0, {0, 0, 0})).ok());
  EXPECT_GT(waiter->ready().size(), told);
  EXPECT_EQ(shard.FinalFloats(0, 2, 0), 3);
  ASSERT_TRUE(shard.ReadResult(0, 2, 0, 0, 10, &part).ok());
  EXPECT_EQ(part.header().slowest_clock(), 1);
  // Worker 0's step-2 gradient was computed on parameters read when the
  // slowest worker had pushed nothing: staleness 2, the bound.
  const nlohmann::json summary = Summary(shard);
  EXPECT_EQ(summary["consistency"], "ssp");
  EXPECT_EQ(summary["staleness_max"][0], 2);
  EXPECT_EQ(summary["staleness_max"][1], 0);
  EXPECT_EQ(summary["steps"], 1);  // every worker pushed step 0
}

// ASP never waits for others; SGD applies each push on its own with lr / N,
// which for plain SGD is the BSP step's sum, one push at a time.
TEST(ServerShardTest, AspAppliesEachPushAsItArrives) {
  ServerShard shard(kJob, 0, 1, 2, /*block_floats=*/2);
  RegisterAll(shard, AsyncConfig(0, 2, ps::CONSISTENCY_ASP, 0, 3), 2,
              {1, 1, 1});
  std::vector<float> expected = {1, 1, 1};
  const float lr = 0.5f / 2;
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> grads = {1, 2, float(step)};
    // In two parts: the first block is applied before the second arrives.
    ASSERT_TRUE(shard.Push(MakePart(0, step, 0, 3, 0, {1, 2})).ok());
    ASSERT_TRUE(shard.Push(MakePart(0, step, 0, 3, 2, {float(step)})).ok());
    for (int i = 0; i < 3; ++i) expected[i] -= lr * grads[i];
    EXPECT_EQ(Read(shard, 0, step), expected) << step;
  }
  // The slow worker's push of step 0 lands on the current parameters, at
  // least 2 ms after worker 0's pull of step 0 was answered: BSP would have
  // answered it only now, which worker 0's next read of the key reports.
  absl::SleepFor(absl::Milliseconds(2));
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 0, 3, 0, {4, 4, 4})).ok());
  {
    ps::KeyPart again;
    ASSERT_TRUE(shard.ReadResult(0, 9, 0, 0, 10, &again).ok());
    EXPECT_GE(again.header().wait_saved_us(), 2000);
    ASSERT_TRUE(shard.ReadResult(0, 9, 0, 0, 10, &again).ok());
    EXPECT_EQ(again.header().wait_saved_us(), 0);  // told once
  }
  for (float& p : expected) p -= lr * 4;
  ps::KeyPart part;
  ASSERT_TRUE(shard.ReadResult(0, 0, 1, 0, 10, &part).ok());
  std::vector<float> got(3);
  std::memcpy(got.data(), part.data().data(), 12);
  EXPECT_EQ(got, expected);
  const nlohmann::json summary = Summary(shard);
  EXPECT_EQ(summary["staleness_max"][0], 9);
  EXPECT_GT(summary["wait_saved_ms_mean"][0].get<double>(), 0.0);
  // Pushes come in each worker's own step order.
  absl::Status ahead = shard.Push(MakePart(1, 5, 0, 3, 0, {1, 1, 1}));
  EXPECT_TRUE(absl::IsOutOfRange(ahead)) << ahead;
  EXPECT_THAT(ahead.message(), HasSubstr("next push is for step 1 (ASP)"));
  absl::Status past = shard.Push(MakePart(0, 3, 0, 3, 0, {1, 1, 1}));
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
}

// Checkpoint steps and the run's last step are barriers in every mode; a
// pull of a checkpoint step reads the snapshot, which the fast worker's next
// push does not change.
TEST(ServerShardTest, AspCheckpointStepIsABarrierWithAConsistentRead) {
  const std::string path = ::testing::TempDir() + "/asp_barrier.ckpt";
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ps::RegisterConfig config = AsyncConfig(0, 2, ps::CONSISTENCY_ASP, 0, 2);
  ps::CheckpointConfig* checkpoint = config.mutable_checkpoint();
  checkpoint->set_path(path);
  checkpoint->set_every(2);
  checkpoint->set_steps_per_epoch(100);
  checkpoint->set_total_steps(4);
  RegisterAll(shard, config, 2, {0, 0});
  ASSERT_TRUE(shard.Push(MakePart(0, 0, 0, 2, 0, {1, 1})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 0, 0), 2);  // not a barrier
  ASSERT_TRUE(shard.Push(MakePart(0, 1, 0, 2, 0, {1, 1})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 1, 0), 0);  // step 2 is checkpointed
  EXPECT_EQ(Workers(shard.MissingWorkers(0, 1, 0)), std::vector<int>{1});
  ASSERT_TRUE(shard.Push(MakePart(1, 0, 0, 2, 0, {2, 2})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 1, 0), 0);
  ASSERT_TRUE(shard.Push(MakePart(1, 1, 0, 2, 0, {2, 2})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 1, 0), 2);
  const std::vector<float> at_two = Read(shard, 0, 1);
  EXPECT_EQ(at_two, (std::vector<float>{-1.5f, -1.5f}));
  absl::StatusOr<Checkpoint> written = ReadCheckpoint(path + ".server0");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->step, 2);
  EXPECT_EQ(written->params, at_two);
  // Worker 0 goes on; worker 1 still reads step 1 as the snapshot.
  ASSERT_TRUE(shard.Push(MakePart(0, 2, 0, 2, 0, {8, 8})).ok());
  ps::KeyPart part;
  ASSERT_TRUE(shard.ReadResult(0, 1, 1, 0, 10, &part).ok());
  std::vector<float> got(2);
  std::memcpy(got.data(), part.data().data(), 8);
  EXPECT_EQ(got, at_two);
  EXPECT_EQ(part.header().slowest_clock(), 2);
  // Step 3 is the run's last: a barrier too.
  EXPECT_EQ(shard.FinalFloats(0, 2, 0), 2);
  ASSERT_TRUE(shard.Push(MakePart(0, 3, 0, 2, 0, {1, 1})).ok());
  EXPECT_EQ(shard.FinalFloats(0, 3, 0), 0);
}

TEST(ServerShardTest, BadConsistencySettingsAreRefused) {
  {
    ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
    ps::RegisterConfig worker_mode = MakeConfig(0, 2, {{0, 2}});
    worker_mode.set_consistency(ps::CONSISTENCY_ASP);
    absl::Status status = shard.Register(worker_mode);
    EXPECT_THAT(status.message(), HasSubstr("needs --ps_update=server"));
  }
  for (int staleness : {-1, kMaxStaleness + 1}) {
    ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
    absl::Status status =
        shard.Register(AsyncConfig(0, 2, ps::CONSISTENCY_SSP, staleness, 2));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << staleness;
  }
  {
    ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
    ASSERT_TRUE(
        shard.Register(AsyncConfig(0, 2, ps::CONSISTENCY_SSP, 1, 2)).ok());
    absl::Status status =
        shard.Register(AsyncConfig(1, 2, ps::CONSISTENCY_SSP, 2, 2));
    EXPECT_THAT(status.message(),
                HasSubstr("--ps_staleness=2 but worker 0 registered "
                          "--ps_consistency=ssp --ps_staleness=1"));
  }
}

// Workers that shared the keys differently would disagree on which server
// holds what: the second one is refused, naming both policies.
TEST(ServerShardTest, WorkersMustUseTheSamePartition) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ps::RegisterConfig balanced = MakeConfig(0, 2, {{0, 2}});
  balanced.set_partition("balanced");
  ASSERT_TRUE(shard.Register(balanced).ok());
  ps::RegisterConfig equal = MakeConfig(1, 2, {{0, 2}});
  equal.set_partition("equal");
  absl::Status status = shard.Register(equal);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("--ps_partition=equal but worker 0 registered "
                        "--ps_partition=balanced"));
}

// --- Compressed and row-sparse pushes (ps/key_compression.h) ---

ps::KeyPart EncodedPart(int rank, int64_t step, int64_t key, int64_t key_numel,
                        const EncodedBucket& encoded) {
  ps::KeyPart part;
  *part.mutable_header() = MakeHeader(rank, step, key);
  part.set_key_numel(key_numel);
  part.set_offset(0);
  AppendSerialized(encoded, part.mutable_data());
  part.set_encoded_bytes(static_cast<int64_t>(part.data().size()));
  return part;
}

ps::RegisterConfig CompressedConfig(int rank, int num_workers, int64_t numel,
                                    const std::string& compression,
                                    const std::string& pull,
                                    int32_t row_width = 0) {
  ps::RegisterConfig config = MakeConfig(rank, num_workers, {{0, numel}});
  config.set_compression(compression);
  config.set_pull(pull);
  config.mutable_keys(0)->set_row_width(row_width);
  return config;
}

std::vector<float> ReadEncoded(ServerShard& shard, int64_t key, int64_t step,
                               int64_t numel) {
  absl::StatusOr<int64_t> size = shard.EncodedResultBytes(key, step, 0);
  EXPECT_TRUE(size.ok()) << size.status();
  std::string bytes(static_cast<size_t>(size.value_or(0)), '\0');
  // In small pieces, as the pull stream reads it.
  for (int64_t offset = 0; offset < *size;) {
    absl::StatusOr<int64_t> n = shard.ReadEncodedResult(
        key, step, 0, offset, 7,
        [&](int64_t) { return bytes.data() + offset; });
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok()) break;
    offset += *n;
  }
  std::vector<float> values(numel, -1.0f);
  EXPECT_TRUE(DecodeKeyResult(bytes, absl::MakeSpan(values)).ok());
  return values;
}

TEST(ShardCompressionTest, UnionOfTopKPushesIsTheExactAverage) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        shard.Register(CompressedConfig(r, 2, 10, "topk:0.2", "union")).ok());
  }
  std::vector<float> a(10, 0.0f), b(10, 0.0f);
  a[1] = 4.0f;
  a[7] = -2.0f;
  b[7] = 6.0f;
  b[9] = 1.0f;
  ASSERT_TRUE(shard.Push(EncodedPart(0, 0, 0, 10, TopKOf(a, 2))).ok());
  // Not final until every worker pushed.
  EXPECT_EQ(*shard.EncodedResultBytes(0, 0, 0), 0);
  ASSERT_TRUE(shard.Push(EncodedPart(1, 0, 0, 10, TopKOf(b, 2))).ok());
  std::vector<float> expected(10, 0.0f);
  expected[1] = 2.0f;
  expected[7] = 2.0f;
  expected[9] = 0.5f;
  EXPECT_EQ(ReadEncoded(shard, 0, 0, 10), expected);
  // Three pairs of (index, value): the union, not the dense key.
  EXPECT_EQ(*shard.EncodedResultBytes(0, 0, 0), 9 + 12 + 3 * 8);
}

TEST(ShardCompressionTest, TopKPullKeepsTheLargestOfTheAverage) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        shard.Register(CompressedConfig(r, 2, 10, "topk:0.2", "topk")).ok());
  }
  std::vector<float> a(10, 0.0f), b(10, 0.0f);
  a[1] = 4.0f;
  a[7] = -2.0f;
  b[7] = -6.0f;
  b[9] = 1.0f;
  ASSERT_TRUE(shard.Push(EncodedPart(0, 0, 0, 10, TopKOf(a, 2))).ok());
  ASSERT_TRUE(shard.Push(EncodedPart(1, 0, 0, 10, TopKOf(b, 2))).ok());
  std::vector<float> average(10, 0.0f);
  average[1] = 2.0f;
  average[7] = -4.0f;
  average[9] = 0.5f;
  std::vector<float> expected(10, 0.0f);
  ASSERT_TRUE(AddDecoded(TopKOf(average, 2), absl::MakeSpan(expected)).ok());
  EXPECT_EQ(ReadEncoded(shard, 0, 0, 10), expected);
  EXPECT_EQ(expected[9], 0.0f);  // dropped by the pull
}

TEST(ShardCompressionTest, Fp16PullRoundsTheFloat32AverageOnce) {
  ServerShard shard(kJob, 0, 1, 3, kWholeKeys);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(shard.Register(CompressedConfig(r, 3, 4, "fp16", "same")).ok());
  }
  const std::vector<float> pushed = {1.0f, 0.1f, -3.0f, 1000.0f};
  EncodedBucket half;
  Compressor compressor(*CompressionSpec::Parse("fp16"), 0);
  ASSERT_TRUE(compressor.Encode(pushed, {}, 0, 0, &half).ok());
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(shard.Push(EncodedPart(r, 0, 0, 4, half)).ok());
  }
  const std::vector<float> result = ReadEncoded(shard, 0, 0, 4);
  for (int i = 0; i < 4; ++i) {
    const float sum = HalfToFloat(half.halves[i]) * 3.0f;
    EXPECT_EQ(result[i], HalfToFloat(FloatToHalf(sum / 3.0f)));
    EXPECT_NEAR(result[i], pushed[i], std::fabs(pushed[i]) * 0x1p-10f);
  }
}

TEST(ShardCompressionTest, RowSparsePushesAreSummedRowByRow) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        shard.Register(CompressedConfig(r, 2, 12, "none", "dense", 3)).ok());
  }
  std::vector<float> a(12, 0.0f), b(12, 0.0f);
  for (int j = 0; j < 3; ++j) {
    a[3 + j] = 2.0f;  // row 1
    b[3 + j] = 4.0f;  // row 1
    b[9 + j] = 6.0f;  // row 3
  }
  ASSERT_TRUE(shard.Push(EncodedPart(0, 0, 0, 12, SparseRowsOf(a, 3))).ok());
  ASSERT_TRUE(shard.Push(EncodedPart(1, 0, 0, 12, SparseRowsOf(b, 3))).ok());
  std::vector<float> expected(12, 0.0f);
  for (int j = 0; j < 3; ++j) {
    expected[3 + j] = 3.0f;
    expected[9 + j] = 3.0f;
  }
  EXPECT_EQ(ReadEncoded(shard, 0, 0, 12), expected);
  EXPECT_EQ(*shard.EncodedResultBytes(0, 0, 0), 9 + 12 + 2 * 4 + 6 * 4);
}

TEST(ShardCompressionTest, EncodingInPartsIsAssembled) {
  ServerShard shard(kJob, 0, 1, 1, kWholeKeys);
  ASSERT_TRUE(
      shard.Register(CompressedConfig(0, 1, 8, "bf16", "dense")).ok());
  EncodedBucket half;
  Compressor compressor(*CompressionSpec::Parse("bf16"), 0);
  const std::vector<float> pushed = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(compressor.Encode(pushed, {}, 0, 0, &half).ok());
  const ps::KeyPart whole = EncodedPart(0, 0, 0, 8, half);
  for (size_t offset = 0; offset < whole.data().size(); offset += 5) {
    ps::KeyPart part = whole;
    part.set_offset(static_cast<int64_t>(offset));
    part.set_data(whole.data().substr(offset, 5));
    ASSERT_TRUE(shard.Push(part).ok()) << offset;
  }
  EXPECT_FALSE(shard.EncodedResult(0));  // --ps_pull=dense: float32 back
  EXPECT_EQ(Read(shard, 0, 0), pushed);
}

TEST(ShardCompressionTest, BadEncodedPushesAreRefusedNamingWorkerAndKey) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        shard.Register(CompressedConfig(r, 2, 10, "topk:0.2", "union")).ok());
  }
  // An index past the key.
  EncodedBucket pairs = TopKOf(std::vector<float>(10, 1.0f), 2);
  pairs.index[1] = 10;
  absl::Status status = shard.Push(EncodedPart(1, 0, 0, 10, pairs));
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("push from worker 1, step 0, key 0"));
  EXPECT_THAT(status.message(), HasSubstr("out of order or range"));
  // Another key's length.
  pairs = TopKOf(std::vector<float>(12, 1.0f), 2);
  EXPECT_THAT(shard.Push(EncodedPart(1, 0, 0, 10, pairs)).message(),
              HasSubstr("of 12 floats but the key has 10"));
  // The wrong encoding (a worker with --compression=fp16).
  EncodedBucket half;
  Compressor compressor(*CompressionSpec::Parse("fp16"), 0);
  ASSERT_TRUE(compressor.Encode(std::vector<float>(10, 1.0f), {}, 0, 0, &half)
                  .ok());
  EXPECT_THAT(shard.Push(EncodedPart(1, 0, 0, 10, half)).message(),
              HasSubstr("encoded as fp16 but this key takes (index, value)"));
  // Float32 data where an encoding is expected.
  EXPECT_THAT(
      shard.Push(MakePart(1, 0, 0, 10, 0, std::vector<float>(10, 1.0f)))
          .message(),
      HasSubstr("pushed float32 data but this key takes (index, value)"));
  // A size beyond any encoding of the key, refused before buffering.
  ps::KeyPart huge = EncodedPart(1, 0, 0, 10, TopKOf(std::vector<float>(10, 1.0f), 2));
  huge.set_encoded_bytes(int64_t{1} << 40);
  EXPECT_THAT(shard.Push(huge).message(), HasSubstr("at most"));
  // Garbage bytes.
  ps::KeyPart garbage = EncodedPart(1, 0, 0, 10, pairs);
  garbage.set_data(std::string("\x07", 1) + std::string(8, '\0'));
  garbage.set_encoded_bytes(9);
  EXPECT_THAT(std::string(shard.Push(garbage).message()),
              HasSubstr("unknown encoding 7"));
  // None of it counted: worker 0 and then 1 push properly and the step
  // completes with their average alone.
  std::vector<float> a(10, 0.0f);
  a[3] = 2.0f;
  ASSERT_TRUE(shard.Push(EncodedPart(0, 0, 0, 10, TopKOf(a, 2))).ok());
  ASSERT_TRUE(shard.Push(EncodedPart(1, 0, 0, 10, TopKOf(a, 2))).ok());
  std::vector<float> expected(10, 0.0f);
  expected[3] = 2.0f;
  EXPECT_EQ(ReadEncoded(shard, 0, 0, 10), expected);
}

TEST(ShardCompressionTest, WorkersMustAgreeOnCompression) {
  ServerShard shard(kJob, 0, 1, 2, kWholeKeys);
  ASSERT_TRUE(
      shard.Register(CompressedConfig(0, 2, 10, "topk:0.2", "union")).ok());
  absl::Status status =
      shard.Register(CompressedConfig(1, 2, 10, "fp16", "same"));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--compression=fp16 --ps_pull=same but worker 0 "
                        "registered --compression=topk:0.2 --ps_pull=union"));
  ServerShard other(kJob, 0, 1, 1, kWholeKeys);
  EXPECT_THAT(
      other.Register(CompressedConfig(0, 1, 10, "none", "topk")).message(),
      HasSubstr("--ps_pull=topk with --compression=none"));
  ps::RegisterConfig server_mode =
      CompressedConfig(0, 1, 10, "topk:0.1", "topk");
  server_mode.set_update_mode(ps::UPDATE_SERVER);
  EXPECT_THAT(other.Register(server_mode).message(),
              HasSubstr("--ps_update=server"));
}

// SSP/ASP apply each worker's push on its own: a compressed push is decoded
// whole and applied as the float32 push it stands for.
TEST(ShardCompressionTest, AspAppliesEachDecodedPush) {
  ServerShard shard(kJob, 0, 1, 2, /*block_floats=*/2);
  ps::RegisterConfig config = AsyncConfig(0, 2, ps::CONSISTENCY_ASP, 0, 4);
  config.set_compression("topk:0.5");
  config.set_pull("dense");
  RegisterAll(shard, config, 2, {1, 1, 1, 1});
  std::vector<float> expected = {1, 1, 1, 1};
  const float lr = 0.5f / 2;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> grads = {0, 2, float(-step - 3), 1};
    const EncodedBucket top = TopKOf(grads, 2);  // elements 1 and 2
    ASSERT_TRUE(shard.Push(EncodedPart(0, step, 0, 4, top)).ok());
    expected[1] -= lr * grads[1];
    expected[2] -= lr * grads[2];
    EXPECT_EQ(Read(shard, 0, step), expected) << step;
  }
}

}  // namespace
}  // namespace gradsync
