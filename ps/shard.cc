// BSP aggregation and the server-side optimizer for one shard of the keys.
#include "ps/shard.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "ps/consistency.h"

namespace gradsync {
namespace {

// dst[i] += src[i] for float32 data in a byte string. memcpy of one float
// compiles to a plain (vectorisable) load and keeps the code free of
// alignment and aliasing assumptions about the protobuf's string buffer.
void AddFloats(float* dst, const char* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    float value;
    std::memcpy(&value, src + 4 * i, sizeof(float));
    dst[i] += value;
  }
}

std::string OptimizerString(const ps::OptimizerConfig& o) {
  return absl::StrFormat(
      "%s lr=%g momentum=%g weight_decay=%g beta1=%g beta2=%g epsilon=%g",
      o.kind(), o.lr(), o.momentum(), o.weight_decay(), o.beta1(), o.beta2(),
      o.epsilon());
}

bool SameOptimizer(const ps::OptimizerConfig& a, const ps::OptimizerConfig& b) {
  return a.kind() == b.kind() && a.lr() == b.lr() &&
         a.momentum() == b.momentum() && a.weight_decay() == b.weight_decay() &&
         a.beta1() == b.beta1() && a.beta2() == b.beta2() &&
         a.epsilon() == b.epsilon();
}

int64_t NanosSince(absl::Time start) {
  return absl::ToInt64Nanoseconds(absl::Now() - start);
}

// "3 keys (0: 100 floats, 4: 250 floats, ...)", for errors about key tables.
std::string DescribeKeys(const std::vector<CheckpointKey>& keys) {
  std::vector<std::string> items;
  for (size_t i = 0; i < keys.size() && i < 6; ++i) {
    items.push_back(absl::StrCat(keys[i].key, ": ", keys[i].numel, " floats"));
  }
  if (keys.size() > 6) items.push_back("...");
  return absl::StrCat(keys.size(), " keys (", absl::StrJoin(items, ", "), ")");
}

}  // namespace

struct ServerShard::KeyState {
  int64_t id = 0;
  int64_t numel = 0;
  // Where the key's floats start in the shard's checkpoint (keys in
  // registration order, concatenated).
  int64_t shard_offset = 0;
  mutable absl::Mutex mu;
  // The last step whose result is ready; pushes are for completed + 1.
  int64_t completed ABSL_GUARDED_BY(mu) = -1;
  // Worker mode: sums by step parity (the other one is the last result).
  // Server mode: sums[0] only; the result is `params`.
  std::vector<float> sums[2];
  // Floats of step completed + 1 received from each worker.
  std::vector<int64_t> received ABSL_GUARDED_BY(mu);
  // max_r received[r]: below it the sum buffer holds this step's partial
  // sum, above it stale data. The first worker to reach a float copies it
  // instead of adding, which spares zeroing the buffer between steps.
  int64_t written ABSL_GUARDED_BY(mu) = 0;
  // Leading floats of step completed + 1 whose result is final (a multiple
  // of the block size, or numel just before the step completes).
  int64_t final_floats ABSL_GUARDED_BY(mu) = 0;
  // Server mode.
  std::vector<float> params;
  int64_t params_received ABSL_GUARDED_BY(mu) = 0;
  // One per block: the optimizer steps each block when it is final. The
  // update is element-wise, so per block it is the same arithmetic as over
  // the whole buffer; each block's Adam step count advances once per step.
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  // Pulls waiting on step completed + 1 (SSP/ASP: any pull not answered
  // yet). Weak: a pull that gave up (deadline, cancelled) is simply skipped.
  std::vector<std::weak_ptr<KeyWaiter>> waiters ABSL_GUARDED_BY(mu);

  // SSP/ASP (see shard.h), per worker: the steps it pushed completely (its
  // clock), its current push (staged until applied, block by block: every
  // whole block of `received` is), and the key's clock when it last read
  // the key.
  std::vector<int64_t> clock ABSL_GUARDED_BY(mu);
  std::vector<std::vector<float>> staged;
  std::vector<int64_t> read_clock ABSL_GUARDED_BY(mu);
  // The key's clock: min over workers of `clock`.
  int64_t slowest ABSL_GUARDED_BY(mu) = 0;
  // Pulls answered before every worker had pushed their step (BSP would
  // still hold them), until that happens: the wait they saved.
  struct EarlyRead {
    int worker;
    int64_t step;
    absl::Time at;
  };
  std::vector<EarlyRead> early ABSL_GUARDED_BY(mu);
  // Per worker: the wait those saved, not yet told to it (Header's
  // wait_saved_us).
  std::vector<int64_t> unreported_saved_ns ABSL_GUARDED_BY(mu);
};

ServerShard::ServerShard(std::string job_id, int server_rank, int num_servers,
                         int num_workers, int64_t block_floats,
                         int64_t max_floats)
    : job_id_(std::move(job_id)),
      server_rank_(server_rank),
      num_servers_(num_servers),
      num_workers_(num_workers),
      block_floats_(std::max<int64_t>(block_floats, 1)),
      max_floats_(max_floats),
      name_(absl::StrCat("server ", server_rank)),
      registered_(new std::atomic<bool>[num_workers]),
      shut_down_(num_workers, false),
      staleness_max_(num_workers, 0),
      staleness_sum_(num_workers, 0),
      staleness_count_(num_workers, 0),
      saved_ns_(num_workers, 0),
      reads_(num_workers, 0) {
  for (int r = 0; r < num_workers; ++r) registered_[r] = false;
}

ServerShard::~ServerShard() = default;

std::string ServerShard::Context(const ps::Header& header,
                                 const char* what) const {
  std::string out =
      absl::StrCat(name_, ": ", what, " from worker ", header.rank());
  if (header.step() >= 0) absl::StrAppend(&out, ", step ", header.step());
  if (header.key() >= 0) absl::StrAppend(&out, ", key ", header.key());
  return out;
}

absl::Status ServerShard::CheckHeader(const ps::Header& header,
                                      const char* what) const {
  if (header.job_id() != job_id_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Context(header, what), ": job id '", header.job_id(),
                     "' is not this server's job '", job_id_, "'"));
  }
  if (header.rank() < 0 || header.rank() >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        Context(header, what), ": unknown worker rank ", header.rank(),
        "; the job has ", num_workers_, " workers"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerShard::KeyState*> ServerShard::FindKey(
    const ps::Header& header, int64_t key, const char* what) const {
  if (!configured_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(absl::StrCat(
        Context(header, what), ": no worker has registered with ", name_));
  }
  auto it = key_index_.find(key);
  if (it == key_index_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Context(header, what), ": unknown key ", key, "; ", name_,
                     " holds ", keys_.size(), " keys"));
  }
  return it->second;
}

absl::Status ServerShard::Register(const ps::RegisterConfig& config) {
  const ps::Header& header = config.header();
  RETURN_IF_ERROR(CheckHeader(header, "registration"));
  const std::string context = Context(header, "registration");
  if (config.num_workers() != num_workers_ ||
      config.num_servers() != num_servers_ ||
      config.server_rank() != server_rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": the worker expects server ", config.server_rank(), " of ",
        config.num_servers(), " with ", config.num_workers(),
        " workers, but this is server ", server_rank_, " of ", num_servers_,
        " with ", num_workers_, " workers"));
  }
  absl::MutexLock lock(&config_mu_);
  if (registered_[header.rank()].load()) {
    return absl::AlreadyExistsError(
        absl::StrCat(context, ": worker ", header.rank(), " registered twice"));
  }
  // The first registration defines the shard; later ones must describe the
  // same one.
  RETURN_IF_ERROR(configured_.load(std::memory_order_relaxed)
                      ? CheckAgreesWithFirst(config, context)
                      : BuildFromFirst(config, context));
  registered_[header.rank()].store(true);
  return absl::OkStatus();
}

namespace {

OptimizerOptions OptimizerOptionsOf(const ps::OptimizerConfig& o) {
  OptimizerOptions options;
  options.kind = o.kind();
  options.lr = o.lr();
  options.momentum = o.momentum();
  options.weight_decay = o.weight_decay();
  options.beta1 = o.beta1();
  options.beta2 = o.beta2();
  options.epsilon = o.epsilon();
  return options;
}

// Sizes are checked before anything is allocated: the sum of what the
// worker declares is bounded, overflow included.
absl::Status CheckKeySizes(const ps::RegisterConfig& config, int64_t max_floats,
                           const std::string& context) {
  int64_t total_floats = 0;
  for (const ps::KeySpec& spec : config.keys()) {
    if (spec.numel() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": key ", spec.key(), " has ", spec.numel(), " floats"));
    }
    if (spec.numel() > max_floats - total_floats) {
      return absl::ResourceExhaustedError(absl::StrCat(
          context, ": the keys add up to more than this server's limit of ",
          max_floats / (int64_t{1} << 18), " MiB (at key ", spec.key(), " of ",
          spec.numel(),
          " floats); raise --ps_max_shard_mb or use more servers"));
    }
    total_floats += spec.numel();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerShard::KeyState>> ServerShard::NewKey(
    const ps::KeySpec& spec, int64_t shard_offset, int64_t start_step,
    Device* optimizer_device, const OptimizerOptions& optimizer,
    bool asynchronous, const std::string& context) const {
  auto state = std::make_unique<KeyState>();
  state->id = spec.key();
  state->numel = spec.numel();
  state->shard_offset = shard_offset;
  // The first push is for the start step (non-zero after a resume).
  state->completed = start_step - 1;
  state->received.assign(num_workers_, 0);
  state->sums[0].assign(spec.numel(), 0.0f);
  if (optimizer_device == nullptr) {  // worker mode: sums by step parity
    state->sums[1].assign(spec.numel(), 0.0f);
    return state;
  }
  state->params.assign(spec.numel(), 0.0f);
  if (asynchronous) {
    state->clock.assign(num_workers_, start_step);
    state->read_clock.assign(num_workers_, start_step);
    state->unreported_saved_ns.assign(num_workers_, 0);
    state->staged.assign(num_workers_, std::vector<float>(spec.numel()));
    state->slowest = start_step;
  }
  for (int64_t begin = 0; begin < spec.numel(); begin += block_floats_) {
    absl::StatusOr<std::unique_ptr<Optimizer>> block_optimizer =
        CreateOptimizer(optimizer);
    if (!block_optimizer.ok()) {
      return Annotate(block_optimizer.status(), context);
    }
    RETURN_IF_ERROR(
        Annotate((*block_optimizer)
                     ->Bind(*optimizer_device,
                            std::min(block_floats_, spec.numel() - begin)),
                 absl::StrCat(context, ", key ", spec.key())));
    state->optimizers.push_back(std::move(*block_optimizer));
  }
  return state;
}

absl::Status ServerShard::BuildFromFirst(const ps::RegisterConfig& config,
                                         const std::string& context) {
  // Everything is built before it is published, so a failure leaves the
  // shard unconfigured.
  const bool server_mode = config.update_mode() == ps::UPDATE_SERVER;
  const OptimizerOptions optimizer = OptimizerOptionsOf(config.optimizer());
  std::unique_ptr<Device> device;
  if (server_mode) {
    // One BLAS thread: the optimizer is element-wise and the server's cores
    // belong to gRPC.
    DeviceOptions device_options;
    device_options.type = DeviceType::kCpu;
    device_options.cpu_threads = 1;
    auto created = CreateDevice(device_options);
    if (!created.ok()) return Annotate(created.status(), context);
    device = std::move(*created);
  }
  const ps::CheckpointConfig& checkpoint = config.checkpoint();
  if (checkpoint.start_step() < 0 || checkpoint.every() < 0 ||
      (server_mode && !checkpoint.path().empty() &&
       checkpoint.steps_per_epoch() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": bad schedule (start step ", checkpoint.start_step(),
        ", checkpoint every ", checkpoint.every(), ", ",
        checkpoint.steps_per_epoch(), " steps per epoch)"));
  }
  RETURN_IF_ERROR(
      Annotate(CheckConsistency(config.consistency(), config.staleness(),
                                config.update_mode()),
               context));
  RETURN_IF_ERROR(CheckKeySizes(config, max_floats_, context));
  std::vector<std::unique_ptr<KeyState>> keys;
  absl::flat_hash_map<int64_t, KeyState*> index;
  int64_t shard_floats = 0;  // the offset of each key in a checkpoint
  for (const ps::KeySpec& spec : config.keys()) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<KeyState> state,
        NewKey(spec, shard_floats, checkpoint.start_step(), device.get(),
               optimizer, config.consistency() != ps::CONSISTENCY_BSP,
               context));
    if (!index.emplace(spec.key(), state.get()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": key ", spec.key(), " listed twice"));
    }
    shard_floats += spec.numel();
    keys.push_back(std::move(state));
  }
  // A server without keys (more servers than keys) has no state to keep.
  if (server_mode && checkpoint.resume() && !keys.empty()) {
    RETURN_IF_ERROR(LoadCheckpoint(config, keys, *device, context));
  }
  keys_ = std::move(keys);
  shard_floats_ = shard_floats;
  checkpoint_ = checkpoint;
  optimizer_kind_ = config.optimizer().kind();
  key_index_ = std::move(index);
  device_ = std::move(device);
  mode_ = config.update_mode();
  consistency_ = config.consistency();
  staleness_ = config.staleness();
  lr_ = config.optimizer().lr();
  config_ = config;
  configured_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status ServerShard::CheckAgreesWithFirst(
    const ps::RegisterConfig& config, const std::string& context) const {
  const int first = config_.header().rank();
  if (config.update_mode() != config_.update_mode()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": --ps_update=", UpdateModeName(config.update_mode()),
        " but worker ", first,
        " registered --ps_update=", UpdateModeName(config_.update_mode())));
  }
  if (config.consistency() != config_.consistency() ||
      config.staleness() != config_.staleness()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": --ps_consistency=", ConsistencyName(config.consistency()),
        " --ps_staleness=", config.staleness(), " but worker ", first,
        " registered --ps_consistency=", ConsistencyName(config_.consistency()),
        " --ps_staleness=", config_.staleness()));
  }
  if (config.partition() != config_.partition()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": --ps_partition=", config.partition(), " but worker ", first,
        " registered --ps_partition=", config_.partition(),
        "; run every worker with the same --ps_partition"));
  }
  if (config.checkpoint().start_step() != checkpoint_.start_step()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": the worker starts at step ",
        config.checkpoint().start_step(), " but worker ", first, " at step ",
        checkpoint_.start_step(),
        "; with --resume every worker must read the same --checkpoint"));
  }
  if (config.checkpoint().SerializeAsString() !=
      checkpoint_.SerializeAsString()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": checkpoint settings {",
        config.checkpoint().ShortDebugString(), "} differ from worker ", first,
        "'s {", checkpoint_.ShortDebugString(),
        "}; run every worker with the same --checkpoint, "
        "--checkpoint_every, --resume, --epochs and --max_steps"));
  }
  if (mode_ == ps::UPDATE_SERVER &&
      !SameOptimizer(config.optimizer(), config_.optimizer())) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": optimizer {", OptimizerString(config.optimizer()),
        "} differs from worker ", first, "'s {",
        OptimizerString(config_.optimizer()), "}"));
  }
  const int n = std::max(config.keys_size(), config_.keys_size());
  for (int i = 0; i < n; ++i) {
    const bool mine = i < config.keys_size();
    const bool theirs = i < config_.keys_size();
    if (mine && theirs && config.keys(i).key() == config_.keys(i).key() &&
        config.keys(i).numel() == config_.keys(i).numel()) {
      continue;
    }
    auto describe = [](bool present, const ps::KeySpec& spec) {
      return present ? absl::StrCat("key ", spec.key(), " with ", spec.numel(),
                                    " floats")
                     : std::string("no key");
    };
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": its key table differs from worker ", first, "'s at entry ",
        i, " (", describe(mine, mine ? config.keys(i) : ps::KeySpec()), " vs ",
        describe(theirs, theirs ? config_.keys(i) : ps::KeySpec()),
        "); run every worker with the same model and --ps_chunk_kb"));
  }
  return absl::OkStatus();
}

absl::Status ServerShard::InitParams(const ps::KeyPart& part) {
  const ps::Header& header = part.header();
  RETURN_IF_ERROR(CheckHeader(header, "initial parameters"));
  const std::string context = Context(header, "initial parameters");
  ASSIGN_OR_RETURN(KeyState * key,
                   FindKey(header, header.key(), "initial parameters"));
  if (mode_ != ps::UPDATE_SERVER || header.rank() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context,
                     ": only worker 0 sends initial parameters, and only with "
                     "--ps_update=server"));
  }
  if (part.data().size() % 4 != 0 || part.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": ", part.data().size(), " bytes are not whole floats"));
  }
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  absl::MutexLock lock(&key->mu);
  if (part.offset() != key->params_received || part.offset() + n > key->numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": part [", part.offset(), ", ", part.offset() + n,
        ") does not continue the ", key->params_received, " of ", key->numel,
        " floats received"));
  }
  std::memcpy(key->params.data() + part.offset(), part.data().data(),
              part.data().size());
  key->params_received += n;
  return absl::OkStatus();
}

absl::Status ServerShard::CheckParamsComplete() const {
  if (mode_ != ps::UPDATE_SERVER) return absl::OkStatus();
  for (const auto& key : keys_) {
    absl::MutexLock lock(&key->mu);
    if (key->params_received != key->numel) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, ": worker 0 sent ", key->params_received, " of ",
                       key->numel, " initial parameters of key ", key->id));
    }
  }
  return absl::OkStatus();
}

absl::Status ServerShard::Push(const ps::KeyPart& part) {
  const ps::Header& header = part.header();
  RETURN_IF_ERROR(CheckHeader(header, "push"));
  if (!registered_[header.rank()].load()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Context(header, "push"), ": worker ", header.rank(),
                     " has not registered with ", name_));
  }
  ASSIGN_OR_RETURN(KeyState * key, FindKey(header, header.key(), "push"));
  if (part.key_numel() != key->numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(Context(header, "push"), ": the worker's key has ",
                     part.key_numel(), " floats but this server's has ",
                     key->numel, " (a different model or --ps_chunk_kb?)"));
  }
  if (part.data().size() % 4 != 0 || part.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Context(header, "push"), ": ", part.data().size(),
                     " bytes are not a whole, non-zero number of floats"));
  }
  std::vector<std::weak_ptr<KeyWaiter>> ready;
  {
    absl::MutexLock lock(&key->mu);
    RETURN_IF_ERROR(asynchronous() ? PushAsync(*key, part, &ready)
                                   : PushBsp(*key, part, &ready));
  }
  bytes_in_ += static_cast<int64_t>(part.data().size());
  ++pushes_;
  for (const auto& weak : ready) {
    if (auto waiter = weak.lock()) waiter->KeyProgress(key->id);
  }
  if (checkpoint_failed_.load()) {
    // The training state can no longer be saved as asked: stop the job
    // (every later push fails too) rather than run on without checkpoints.
    absl::MutexLock lock(&checkpoint_mu_);
    return checkpoint_status_;
  }
  return absl::OkStatus();
}

absl::Status ServerShard::PushBsp(
    KeyState& key, const ps::KeyPart& part,
    std::vector<std::weak_ptr<KeyWaiter>>* notify) {
  key.mu.AssertHeld();
  const ps::Header& header = part.header();
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  const int rank = header.rank();
  if (header.step() <= key.completed) {
    return absl::OutOfRangeError(
        absl::StrCat(Context(header, "push"), ": step ", header.step(),
                     " is in the past; this key completed step ", key.completed,
                     " and takes pushes for step ", key.completed + 1));
  }
  if (header.step() > key.completed + 1) {
    return absl::OutOfRangeError(
        absl::StrCat(Context(header, "push"), ": step ", header.step(),
                     " is too far ahead; this key takes pushes for step ",
                     key.completed + 1, " (BSP)"));
  }
  const int64_t received = key.received[rank];
  if (received == key.numel) {
    return absl::AlreadyExistsError(absl::StrCat(
        Context(header, "push"), ": worker ", rank, " already pushed all ",
        key.numel, " floats of this key for step ", header.step()));
  }
  RETURN_IF_ERROR(CheckPartContinues(key, part));
  // After this part, every worker has pushed [0, pushed).
  int64_t pushed = received + n;
  for (int r = 0; r < num_workers_; ++r) {
    if (r != rank) pushed = std::min(pushed, key.received[r]);
  }
  if (mode_ == ps::UPDATE_SERVER &&
      (pushed == key.numel ||
       pushed / block_floats_ * block_floats_ > key.final_floats)) {
    RETURN_IF_ERROR(CheckParamsInitialized(key, header));
  }
  const absl::Time start = absl::Now();
  const int slot =
      mode_ == ps::UPDATE_SERVER ? 0 : static_cast<int>(header.step() % 2);
  float* sums = key.sums[slot].data();
  // [begin, end) = [begin, first) already written by someone (add) +
  // [first, end) reached first by this worker (copy).
  const int64_t begin = part.offset();
  const int64_t end = begin + n;
  const int64_t first = std::clamp(key.written, begin, end);
  const char* data = part.data().data();
  AddFloats(sums + begin, data, first - begin);
  std::memcpy(sums + first, data + (first - begin) * 4,
              static_cast<size_t>(end - first) * 4);
  key.written = std::max(key.written, end);
  sum_ns_ += NanosSince(start);
  key.received[rank] += n;
  if (Finalize(key, pushed)) {
    // Waiters stay registered until the key's step completes.
    if (key.completed == header.step()) {
      notify->swap(key.waiters);
    } else {
      *notify = key.waiters;
    }
  }
  return absl::OkStatus();
}

absl::Status ServerShard::PushAsync(
    KeyState& key, const ps::KeyPart& part,
    std::vector<std::weak_ptr<KeyWaiter>>* notify) {
  key.mu.AssertHeld();
  const ps::Header& header = part.header();
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  const int rank = header.rank();
  const int64_t next = key.clock[rank];
  if (header.step() != next) {
    return absl::OutOfRangeError(absl::StrCat(
        Context(header, "push"), ": step ", header.step(),
        header.step() < next ? " is in the past" : " is too far ahead",
        "; worker ", rank, " pushed ", next,
        " steps of this key, so its next push is for step ", next,
        ConsistencyNote()));
  }
  const int64_t received = key.received[rank];
  RETURN_IF_ERROR(CheckPartContinues(key, part));
  RETURN_IF_ERROR(CheckParamsInitialized(key, header));
  if (received == 0) {
    // The parameters this gradient was computed on held every worker's
    // steps before read_clock.
    const int64_t staleness = header.step() - key.read_clock[rank];
    absl::MutexLock lock(&stats_mu_);
    staleness_max_[rank] = std::max(staleness_max_[rank], staleness);
    staleness_sum_[rank] += staleness;
    ++staleness_count_[rank];
  }
  const absl::Time start = absl::Now();
  std::memcpy(key.staged[rank].data() + received, part.data().data(),
              part.data().size());
  sum_ns_ += NanosSince(start);
  key.received[rank] += n;
  const int64_t pushed = key.received[rank];
  // Every whole block of what had arrived was applied then.
  ApplyAsync(
      key, rank, received / block_floats_ * block_floats_,
      pushed == key.numel ? key.numel : pushed / block_floats_ * block_floats_);
  if (pushed == key.numel) {
    AdvanceClock(key, rank, header.step());
    // Any waiting pull may have become answerable (its own push is done, or
    // the slowest worker moved); the ones that gave up are dropped.
    key.waiters.erase(
        std::remove_if(key.waiters.begin(), key.waiters.end(),
                       [](const std::weak_ptr<KeyWaiter>& waiter) {
                         return waiter.expired();
                       }),
        key.waiters.end());
    *notify = key.waiters;
  }
  return absl::OkStatus();
}

void ServerShard::ApplyAsync(KeyState& key, int rank, int64_t begin,
                             int64_t end) {
  key.mu.AssertHeld();
  if (end <= begin) return;
  const absl::Time start = absl::Now();
  // One optimizer step per worker's push, on its own gradient, with 1/N of
  // the learning rate: N pushes move the parameters as far as one BSP step.
  const float lr = lr_ / static_cast<float>(num_workers_);
  for (int64_t block = begin; block < end; block += block_floats_) {
    key.optimizers[block / block_floats_]->Step(
        key.params.data() + block, key.staged[rank].data() + block, lr);
    ++blocks_;
  }
  update_ns_ += NanosSince(start);
}

void ServerShard::AdvanceClock(KeyState& key, int rank, int64_t step) {
  key.mu.AssertHeld();
  key.clock[rank] = step + 1;
  key.received[rank] = 0;
  const int64_t slowest = *std::min_element(key.clock.begin(), key.clock.end());
  if (slowest == key.slowest) return;
  // One worker's clock moved by one, so the key's moves by at most one.
  key.slowest = slowest;
  ++completions_;
  if (IsCheckpointStep(slowest)) SnapshotKey(key, slowest);
  // BSP would answer pulls of the steps before `slowest` only now.
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&stats_mu_);
  auto caught_up = std::remove_if(
      key.early.begin(), key.early.end(), [&](const KeyState::EarlyRead& read) {
        if (read.step >= slowest) return false;
        const int64_t saved = absl::ToInt64Nanoseconds(now - read.at);
        saved_ns_[read.worker] += saved;
        key.unreported_saved_ns[read.worker] += saved;
        return true;
      });
  key.early.erase(caught_up, key.early.end());
}

int64_t ServerShard::RequiredClock(int64_t step) const {
  if (IsBarrierStep(step + 1)) return step + 1;
  if (consistency_ == ps::CONSISTENCY_SSP) return step + 1 - staleness_;
  return std::numeric_limits<int64_t>::min();  // ASP
}

int ServerShard::AsyncReadiness(const KeyState& key, int64_t step,
                                int rank) const {
  key.mu.AssertHeld();
  if (step < key.clock[rank] - 1) return -1;  // it pushed later steps since
  if (key.clock[rank] < step + 1) return 0;   // its own push is not all in
  return key.slowest >= RequiredClock(step) ? 1 : 0;
}

absl::Status ServerShard::CheckPartContinues(const KeyState& key,
                                             const ps::KeyPart& part) const {
  key.mu.AssertHeld();
  const int64_t received = key.received[part.header().rank()];
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  if (part.offset() == received && part.offset() + n <= key.numel) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Context(part.header(), "push"), ": part [", part.offset(),
                   ", ", part.offset() + n, ") of a ", key.numel,
                   "-float key does not continue the ", received,
                   " floats received (parts come in order and fill the key)"));
}

absl::Status ServerShard::CheckParamsInitialized(
    const KeyState& key, const ps::Header& header) const {
  key.mu.AssertHeld();
  if (key.params_received == key.numel) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(Context(header, "push"),
                   ": worker 0 has not sent this key's "
                   "initial parameters, so the optimizer cannot run"));
}

bool ServerShard::IsBarrierStep(int64_t steps) const {
  return IsCheckpointStep(steps) ||
         (checkpoint_.total_steps() > 0 && steps == checkpoint_.total_steps());
}

std::string ServerShard::ConsistencyNote() const {
  switch (consistency_) {
    case ps::CONSISTENCY_SSP:
      return absl::StrCat(" (SSP, staleness ", staleness_, ")");
    case ps::CONSISTENCY_ASP:
      return " (ASP)";
    default:
      return "";
  }
}

bool ServerShard::Finalize(KeyState& key, int64_t pushed) {
  key.mu.AssertHeld();
  const int64_t end =
      pushed == key.numel ? key.numel : pushed / block_floats_ * block_floats_;
  if (end <= key.final_floats) return false;
  const absl::Time start = absl::Now();
  const int64_t step = key.completed + 1;
  // sum / N in float, the arithmetic of the ring and of the local reference,
  // so results agree to float rounding of the sums.
  const float n = static_cast<float>(num_workers_);
  for (int64_t begin = key.final_floats; begin < end; begin += block_floats_) {
    const int64_t count = std::min(block_floats_, key.numel - begin);
    if (mode_ == ps::UPDATE_SERVER) {
      float* grads = key.sums[0].data() + begin;
      for (int64_t i = 0; i < count; ++i) grads[i] = grads[i] / n;
      key.optimizers[begin / block_floats_]->Step(key.params.data() + begin,
                                                  grads, lr_);
    } else {
      float* sums = key.sums[step % 2].data() + begin;
      for (int64_t i = 0; i < count; ++i) sums[i] = sums[i] / n;
    }
    ++blocks_;
  }
  key.final_floats = end;
  if (end == key.numel) {
    // Step + 1 sums into the other buffer (worker mode), which holds step -
    // 1's result: every worker has pulled it, since each pushed `step` and
    // does so only after its pull of step - 1 finished. In server mode the
    // one sum buffer is free again likewise. Either way its old contents are
    // overwritten by step + 1's first arrivals (written = 0).
    key.completed = step;
    if (mode_ == ps::UPDATE_SERVER && IsCheckpointStep(step + 1)) {
      SnapshotKey(key, step + 1);
    }
    key.final_floats = 0;
    key.written = 0;
    std::fill(key.received.begin(), key.received.end(), 0);
    ++completions_;
  }
  update_ns_ += NanosSince(start);
  return true;
}

std::string ServerShard::CheckpointPath(const std::string& path) const {
  return absl::StrCat(path, ".server", server_rank_);
}

std::string ServerShard::PreviousPath(const std::string& path) {
  return absl::StrCat(path, ".previous");
}

std::string ServerShard::ShardName() const {
  return absl::StrCat("ps shard: server ", server_rank_, " of ", num_servers_);
}

bool ServerShard::IsCheckpointStep(int64_t steps) const {
  if (checkpoint_.path().empty()) return false;
  // The steps at which the trainer's worker 0 writes (core/train/trainer.cc).
  return (checkpoint_.every() > 0 && steps % checkpoint_.every() == 0) ||
         steps % checkpoint_.steps_per_epoch() == 0 ||
         steps == checkpoint_.total_steps();
}

void ServerShard::SnapshotKey(const KeyState& key, int64_t steps) {
  key.mu.AssertHeld();
  absl::MutexLock lock(&checkpoint_mu_);
  if (snapshot_.step != steps || snapshot_keys_ == keys_.size()) {
    // The first key of this checkpoint (BSP: every key completed the
    // previous checkpoint step before any completes this one).
    snapshot_.model = ShardName();
    snapshot_.step = steps;
    snapshot_.optimizer = optimizer_kind_;
    snapshot_.optimizer_on_servers = true;
    snapshot_.params.resize(shard_floats_);
    snapshot_.optimizer_state.resize(
        keys_.front()->optimizers.front()->StateBuffers().size());
    for (auto& state : snapshot_.optimizer_state) state.resize(shard_floats_);
    snapshot_.keys.clear();
    for (const auto& k : keys_) snapshot_.keys.push_back({k->id, k->numel});
    snapshot_keys_ = 0;
  }
  std::copy(key.params.begin(), key.params.end(),
            snapshot_.params.begin() + key.shard_offset);
  for (size_t b = 0; b < key.optimizers.size(); ++b) {
    const int64_t begin = static_cast<int64_t>(b) * block_floats_;
    const int64_t count = std::min(block_floats_, key.numel - begin);
    const std::vector<float*> state = key.optimizers[b]->StateBuffers();
    for (size_t i = 0; i < state.size(); ++i) {
      // The optimizer's device is the CPU: a plain copy.
      absl::Status copied = device_->CopyToHost(
          snapshot_.optimizer_state[i].data() + key.shard_offset + begin,
          state[i], static_cast<size_t>(count) * sizeof(float));
      if (!copied.ok() && checkpoint_status_.ok()) checkpoint_status_ = copied;
    }
    // Every block steps once per step, so all counts are equal.
    snapshot_.optimizer_step = key.optimizers[b]->step();
  }
  if (++snapshot_keys_ < keys_.size()) return;
  const std::string path = CheckpointPath(checkpoint_.path());
  absl::Status written = checkpoint_status_;
  // The shard of the previous checkpoint stays as <path>.previous: worker 0
  // writes its checkpoint of this step only once the step is over, so a job
  // that stops in between resumes from worker 0's previous checkpoint, and
  // the servers need their shards of that step. (They are never further
  // ahead: the next checkpoint step cannot complete before worker 0 has
  // written this one.)
  if (written.ok() &&
      std::rename(path.c_str(), PreviousPath(path).c_str()) != 0 &&
      errno != ENOENT) {
    written = absl::InternalError(absl::StrCat("cannot rename ", path, " to ",
                                               PreviousPath(path), ": ",
                                               std::strerror(errno)));
  }
  if (written.ok()) written = WriteCheckpoint(path, snapshot_);
  if (!written.ok()) {
    if (checkpoint_status_.ok()) {
      checkpoint_status_ =
          absl::Status(written.code(),
                       absl::StrCat(name_, ": writing the checkpoint of step ",
                                    steps, ": ", written.message()));
    }
    checkpoint_failed_ = true;
    GS_LOG(ERROR) << checkpoint_status_.message();
    return;
  }
  ++checkpoints_written_;
  GS_LOG(DEBUG) << name_ << ": checkpoint of step " << steps << " written to "
                << path;
}

absl::Status ServerShard::LoadCheckpoint(
    const ps::RegisterConfig& config,
    const std::vector<std::unique_ptr<KeyState>>& keys, Device& device,
    const std::string& context) {
  std::string path = CheckpointPath(config.checkpoint().path());
  const int64_t start_step = config.checkpoint().start_step();
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  if (!read.ok() || read->step != start_step) {
    // The job may have stopped after this server wrote the shard of a step
    // and before worker 0 wrote its own (see SnapshotKey).
    absl::StatusOr<Checkpoint> previous = ReadCheckpoint(PreviousPath(path));
    if (previous.ok() && previous->step == start_step) {
      path = PreviousPath(path);
      read = std::move(previous);
    }
  }
  if (absl::IsNotFound(read.status())) {
    return absl::NotFoundError(absl::StrCat(
        context, ": --resume: no shard checkpoint at ", path, " (server ",
        server_rank_,
        " writes it next to --checkpoint with --ps_update=server;"
        " it must be on storage this server shares with worker 0)"));
  }
  if (!read.ok()) {
    return Annotate(read.status(), absl::StrCat(context, ": --resume"));
  }
  const Checkpoint& c = *read;
  const std::string refused =
      absl::StrCat(context, ": --resume: shard checkpoint ", path);
  if (c.model != ShardName()) {
    return absl::FailedPreconditionError(
        absl::StrCat(refused, " is '", c.model, "', not '", ShardName(),
                     "'; resume with the same number of servers"));
  }
  if (c.step != start_step) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, " holds step ", c.step, " but the workers resume at step ",
        start_step,
        " from worker 0's checkpoint; the two are written at the "
        "same steps, so one of them is from another run (or the job stopped "
        "between the two writes)"));
  }
  std::vector<CheckpointKey> mine;
  for (const auto& key : keys) mine.push_back({key->id, key->numel});
  if (c.keys != mine) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, " covers ", DescribeKeys(c.keys),
        " but under the current partition this server owns ",
        DescribeKeys(mine),
        "; resume with the same model, number of servers and --ps_chunk_kb"));
  }
  const size_t buffers =
      keys.front()->optimizers.front()->StateBuffers().size();
  if (c.optimizer != config.optimizer().kind() ||
      c.optimizer_state.size() != buffers) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, " holds the state of optimizer ", c.optimizer, " (",
        c.optimizer_state.size(), " buffers) but this run uses ",
        config.optimizer().kind(), " (", buffers,
        " buffers); resume with the same --optimizer and --momentum"));
  }
  for (const auto& key : keys) {
    std::copy_n(c.params.begin() + key->shard_offset, key->numel,
                key->params.begin());
    key->params_received = key->numel;
    for (size_t b = 0; b < key->optimizers.size(); ++b) {
      const int64_t begin = static_cast<int64_t>(b) * block_floats_;
      const int64_t count = std::min(block_floats_, key->numel - begin);
      const std::vector<float*> state = key->optimizers[b]->StateBuffers();
      for (size_t i = 0; i < state.size(); ++i) {
        RETURN_IF_ERROR(Annotate(
            device.CopyToDevice(
                state[i],
                c.optimizer_state[i].data() + key->shard_offset + begin,
                static_cast<size_t>(count) * sizeof(float)),
            refused));
      }
      key->optimizers[b]->set_step(c.optimizer_step);
    }
  }
  GS_LOG(INFO) << name_ << ": resumed " << keys.size() << " keys at step "
               << c.step << " from " << path;
  return absl::OkStatus();
}

absl::Status ServerShard::Pull(const ps::PullRequest& request,
                               const std::shared_ptr<KeyWaiter>& waiter) {
  const ps::Header& header = request.header();
  RETURN_IF_ERROR(CheckHeader(header, "pull"));
  const std::string context = Context(header, "pull");
  if (!registered_[header.rank()].load()) {
    return absl::FailedPreconditionError(
        absl::StrCat(context, ": worker ", header.rank(),
                     " has not registered with ", name_));
  }
  if (request.keys().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": names no keys"));
  }
  const int64_t step = header.step();
  // Check everything first, so a bad request registers nothing.
  std::vector<KeyState*> keys;
  for (int64_t id : request.keys()) {
    ASSIGN_OR_RETURN(KeyState * key, FindKey(header, id, "pull"));
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": key ", id, " requested twice"));
    }
    absl::MutexLock lock(&key->mu);
    if (asynchronous()) {
      // Its own push of `step` may still be on the way.
      const int64_t pushed = key->clock[header.rank()];
      if (step != pushed && step != pushed - 1) {
        return absl::OutOfRangeError(
            absl::StrCat(context, ": worker ", header.rank(), " pushed ",
                         pushed, " steps of key ", id, ", so it can pull step ",
                         pushed - 1, " or ", pushed, ConsistencyNote()));
      }
    } else if (step < key->completed) {
      return absl::OutOfRangeError(
          absl::StrCat(context, ": step ", step, " is in the past for key ", id,
                       ", which completed step ", key->completed));
    } else if (step > key->completed + 1) {
      return absl::OutOfRangeError(absl::StrCat(
          context, ": step ", step, " is too far ahead for key ", id,
          ", which takes pushes for step ", key->completed + 1));
    }
    keys.push_back(key);
  }
  std::vector<int64_t> ready;
  for (KeyState* key : keys) {
    absl::MutexLock lock(&key->mu);
    if (asynchronous()) {
      const int readiness = AsyncReadiness(*key, step, header.rank());
      if (readiness == 1) {
        ready.push_back(key->id);
      } else {
        key->waiters.push_back(waiter);
      }
      continue;
    }
    // Between the check and here a key can only have moved from pending to
    // complete: completing step + 1 needs this worker's own push.
    if (key->completed == step) {
      ready.push_back(key->id);
    } else {
      key->waiters.push_back(waiter);
      if (key->final_floats > 0) ready.push_back(key->id);
    }
  }
  ++pulls_;
  for (int64_t id : ready) waiter->KeyProgress(id);
  return absl::OkStatus();
}

absl::Status ServerShard::ReadResult(int64_t key_id, int64_t step, int rank,
                                     int64_t offset, int64_t max_floats,
                                     ps::KeyPart* part) {
  std::string* data = part->mutable_data();
  absl::StatusOr<int64_t> n = ReadResult(
      key_id, step, rank, offset, max_floats,
      [data](int64_t floats) {
        data->resize(static_cast<size_t>(floats) * sizeof(float));
        return data->data();
      },
      part->mutable_header());
  if (!n.ok()) return n.status();
  part->set_key_numel(KeyNumel(key_id));
  part->set_offset(offset);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ServerShard::ReadResult(
    int64_t key_id, int64_t step, int rank, int64_t offset, int64_t max_floats,
    absl::FunctionRef<char*(int64_t floats)> place, ps::Header* reply) {
  // The index is published with configured_; read it only after.
  if (!configured_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": reading key ", key_id, " before registration"));
  }
  auto it = key_index_.find(key_id);
  if (it == key_index_.end()) {
    return absl::InternalError(
        absl::StrCat(name_, ": reading unknown key ", key_id));
  }
  if (step < 0 || max_floats < 1 || rank < 0 || rank >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": reading key ", key_id, " for step ", step, " for worker ",
        rank, ", at most ", max_floats, " floats"));
  }
  KeyState& key = *it->second;
  absl::MutexLock lock(&key.mu);
  if (asynchronous()) {
    return ReadAsync(key, step, rank, offset, max_floats, place, reply);
  }

  const int64_t available = key.completed == step       ? key.numel
                            : key.completed + 1 == step ? key.final_floats
                                                        : -1;
  if (offset < 0 || offset >= available) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": result of key ", key_id, " for step ", step, " from float ",
        offset, " is not available; the key's last completed step is ",
        key.completed, " and ", key.final_floats,
        " floats of the next are final"));
  }
  const int64_t n = std::min(max_floats, available - offset);
  const float* source = mode_ == ps::UPDATE_SERVER ? key.params.data()
                                                   : key.sums[step % 2].data();
  std::memcpy(place(n), source + offset,
              static_cast<size_t>(n) * sizeof(float));
  return n;
}

absl::StatusOr<int64_t> ServerShard::ReadAsync(
    KeyState& key, int64_t step, int rank, int64_t offset, int64_t max_floats,
    absl::FunctionRef<char*(int64_t floats)> place, ps::Header* reply) {
  key.mu.AssertHeld();
  if (AsyncReadiness(key, step, rank) != 1 || offset < 0 ||
      offset >= key.numel) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": parameters of key ", key.id, " for worker ", rank, "'s step ",
        step, " from float ", offset, " are not available; the worker pushed ",
        key.clock[rank], " steps of it, the slowest ", key.slowest,
        ConsistencyNote()));
  }
  const int64_t n = std::min(max_floats, key.numel - offset);
  int64_t clock = key.slowest;
  if (IsCheckpointStep(step + 1)) {
    // A barrier: every worker reads the checkpoint's state, which pushes of
    // the next step (already arriving from the fastest) do not change.
    clock = step + 1;
    absl::MutexLock lock(&checkpoint_mu_);
    if (snapshot_.step != step + 1) {
      return absl::InternalError(absl::StrCat(
          name_, ": the snapshot of step ", step + 1, " of key ", key.id,
          " is gone (it holds step ", snapshot_.step, ")"));
    }
    std::memcpy(place(n), snapshot_.params.data() + key.shard_offset + offset,
                static_cast<size_t>(n) * sizeof(float));
  } else {
    std::memcpy(place(n), key.params.data() + offset,
                static_cast<size_t>(n) * sizeof(float));
  }
  if (reply != nullptr) reply->set_slowest_clock(clock);
  if (offset == 0) {
    key.read_clock[rank] = clock;
    if (clock < step + 1) key.early.push_back({rank, step, absl::Now()});
    if (reply != nullptr) {
      reply->set_wait_saved_us(key.unreported_saved_ns[rank] / 1000);
    }
    key.unreported_saved_ns[rank] = 0;
    absl::MutexLock lock(&stats_mu_);
    ++reads_[rank];
  }
  return n;
}

int64_t ServerShard::FinalFloats(int64_t key_id, int64_t step, int rank) const {
  if (step < 0 || rank < 0 || rank >= num_workers_ ||
      !configured_.load(std::memory_order_acquire)) {
    return -1;
  }
  auto it = key_index_.find(key_id);
  if (it == key_index_.end()) return -1;
  const KeyState& key = *it->second;
  absl::MutexLock lock(&key.mu);
  if (asynchronous()) {
    const int readiness = AsyncReadiness(key, step, rank);
    return readiness == 1 ? key.numel : readiness;
  }
  if (key.completed == step) return key.numel;
  if (key.completed + 1 == step) return key.final_floats;
  return key.completed > step ? -1 : 0;
}

int64_t ServerShard::KeyNumel(int64_t key) const {
  if (!configured_.load(std::memory_order_acquire)) return 0;
  auto it = key_index_.find(key);
  return it == key_index_.end() ? 0 : it->second->numel;
}

std::vector<ServerShard::MissingPush> ServerShard::MissingWorkers(
    int64_t key_id, int64_t step, int rank) const {
  std::vector<MissingPush> missing;
  if (!configured_.load(std::memory_order_acquire)) return missing;
  auto it = key_index_.find(key_id);
  if (it == key_index_.end() || rank < 0 || rank >= num_workers_) {
    return missing;
  }
  const KeyState& key = *it->second;
  absl::MutexLock lock(&key.mu);
  if (asynchronous()) {
    if (AsyncReadiness(key, step, rank) != 0) return missing;
    const int64_t required = RequiredClock(step);
    for (int r = 0; r < num_workers_; ++r) {
      if (r == rank && key.clock[r] < step + 1) {
        missing.push_back({r, step});
      } else if (key.clock[r] < required) {
        missing.push_back({r, required - 1});
      }
    }
    return missing;
  }
  if (key.completed >= step) return missing;
  for (int r = 0; r < num_workers_; ++r) {
    // Before its step starts, nobody has pushed it.
    if (key.completed + 1 < step || key.received[r] < key.numel) {
      missing.push_back({r, step});
    }
  }
  return missing;
}

absl::StatusOr<bool> ServerShard::Shutdown(const ps::ShutdownRequest& request) {
  RETURN_IF_ERROR(CheckHeader(request.header(), "shutdown"));
  absl::MutexLock lock(&config_mu_);
  shut_down_[request.header().rank()] = true;
  return std::all_of(shut_down_.begin(), shut_down_.end(),
                     [](bool done) { return done; });
}

std::vector<int> ServerShard::WorkersNotShutDown() const {
  absl::MutexLock lock(&config_mu_);
  std::vector<int> missing;
  for (int r = 0; r < num_workers_; ++r) {
    if (!shut_down_[r]) missing.push_back(r);
  }
  return missing;
}

std::string ServerShard::SummaryJson() const {
  int64_t steps = -1;
  int64_t bytes = 0;
  size_t num_keys = 0;
  const char* mode = "none";  // before the first registration
  if (configured_.load(std::memory_order_acquire)) {
    num_keys = keys_.size();
    mode = UpdateModeName(mode_);
    for (const auto& key : keys_) {
      absl::MutexLock lock(&key->mu);
      const int64_t done = asynchronous() ? key->slowest : key->completed + 1;
      steps = steps < 0 ? done : std::min(steps, done);
      bytes += key->numel * 4;
    }
  }
  nlohmann::json summary = {
      {"server", server_rank_},
      {"job_id", job_id_},  // escaped by the library: job ids are user input
      {"update", mode},
      {"keys", num_keys},
      {"key_bytes", bytes},
      {"steps", std::max<int64_t>(steps, 0)},
      {"key_steps", completions_.load()},
      {"bytes_in", bytes_in_.load()},
      {"bytes_out", bytes_out_.load()},
      {"parts_in", pushes_.load()},
      {"pulls", pulls_.load()},
      {"blocks", blocks_.load()},
      {"sum_ms", sum_ns_.load() / 1e6},
      {"update_ms", update_ns_.load() / 1e6},
      {"checkpoints", checkpoints_written_.load()},
      {"consistency", ConsistencyName(consistency_)},
  };
  if (asynchronous()) {
    if (consistency_ == ps::CONSISTENCY_SSP) {
      summary["staleness_bound"] = staleness_;
    }
    // Per worker. The wait saved is the mean over its reads of a key (a
    // pull answered no earlier than BSP would have saved 0): how much
    // earlier than BSP a pull was answered, on average.
    nlohmann::json max = nlohmann::json::array();
    nlohmann::json mean = nlohmann::json::array();
    nlohmann::json saved = nlohmann::json::array();
    absl::MutexLock lock(&stats_mu_);
    for (int r = 0; r < num_workers_; ++r) {
      max.push_back(staleness_max_[r]);
      mean.push_back(staleness_count_[r] > 0
                         ? static_cast<double>(staleness_sum_[r]) /
                               staleness_count_[r]
                         : 0.0);
      saved.push_back(reads_[r] > 0 ? saved_ns_[r] / 1e6 / reads_[r] : 0.0);
    }
    summary["staleness_max"] = max;
    summary["staleness_mean"] = mean;
    summary["wait_saved_ms_mean"] = saved;
  }
  return summary.dump();
}

}  // namespace gradsync
