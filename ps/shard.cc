// BSP aggregation and the server-side optimizer for one shard of the keys.
#include "ps/shard.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "ps/flags.h"

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

}  // namespace

struct ServerShard::KeyState {
  int64_t id = 0;
  int64_t numel = 0;
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
  // Pulls waiting on step completed + 1. Weak: a pull that gave up (deadline,
  // cancelled) is simply skipped.
  std::vector<std::weak_ptr<KeyWaiter>> waiters ABSL_GUARDED_BY(mu);
};

ServerShard::ServerShard(std::string job_id, int server_rank, int num_servers,
                         int num_workers, int64_t block_floats)
    : job_id_(std::move(job_id)),
      server_rank_(server_rank),
      num_servers_(num_servers),
      num_workers_(num_workers),
      block_floats_(std::max<int64_t>(block_floats, 1)),
      name_(absl::StrCat("server ", server_rank)),
      registered_(new std::atomic<bool>[num_workers]),
      shut_down_(num_workers, false) {
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
  if (!configured_.load(std::memory_order_relaxed)) {
    // The first registration defines the shard. Build everything before
    // publishing it, so a failure leaves the shard unconfigured.
    std::vector<std::unique_ptr<KeyState>> keys;
    absl::flat_hash_map<int64_t, KeyState*> index;
    std::unique_ptr<Device> device;
    const bool server_mode = config.update_mode() == ps::UPDATE_SERVER;
    OptimizerOptions options;
    if (server_mode) {
      const ps::OptimizerConfig& o = config.optimizer();
      options.kind = o.kind();
      options.lr = o.lr();
      options.momentum = o.momentum();
      options.weight_decay = o.weight_decay();
      options.beta1 = o.beta1();
      options.beta2 = o.beta2();
      options.epsilon = o.epsilon();
      // One BLAS thread: the optimizer is element-wise and the server's cores
      // belong to gRPC.
      DeviceOptions device_options;
      device_options.type = DeviceType::kCpu;
      device_options.cpu_threads = 1;
      auto created = CreateDevice(device_options);
      if (!created.ok()) return Annotate(created.status(), context);
      device = std::move(*created);
    }
    for (const ps::KeySpec& spec : config.keys()) {
      if (spec.numel() < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            context, ": key ", spec.key(), " has ", spec.numel(), " floats"));
      }
      auto state = std::make_unique<KeyState>();
      state->id = spec.key();
      state->numel = spec.numel();
      if (!index.emplace(spec.key(), state.get()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(context, ": key ", spec.key(), " listed twice"));
      }
      state->received.assign(num_workers_, 0);
      state->sums[0].assign(spec.numel(), 0.0f);
      if (server_mode) {
        state->params.assign(spec.numel(), 0.0f);
        for (int64_t begin = 0; begin < spec.numel(); begin += block_floats_) {
          auto optimizer = CreateOptimizer(options);
          if (!optimizer.ok()) return Annotate(optimizer.status(), context);
          RETURN_IF_ERROR(Annotate(
              (*optimizer)
                  ->Bind(*device,
                         std::min(block_floats_, spec.numel() - begin)),
              absl::StrCat(context, ", key ", spec.key())));
          state->optimizers.push_back(std::move(*optimizer));
        }
      } else {
        state->sums[1].assign(spec.numel(), 0.0f);
      }
      keys.push_back(std::move(state));
    }
    keys_ = std::move(keys);
    key_index_ = std::move(index);
    device_ = std::move(device);
    mode_ = config.update_mode();
    lr_ = config.optimizer().lr();
    config_ = config;
    configured_.store(true, std::memory_order_release);
  } else {
    // Later registrations must describe the same shard.
    if (config.update_mode() != config_.update_mode()) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": --ps_update=", UpdateModeName(config.update_mode()),
          " but worker ", config_.header().rank(),
          " registered --ps_update=", UpdateModeName(config_.update_mode())));
    }
    if (mode_ == ps::UPDATE_SERVER &&
        !SameOptimizer(config.optimizer(), config_.optimizer())) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": optimizer {", OptimizerString(config.optimizer()),
          "} differs from worker ", config_.header().rank(), "'s {",
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
        return present ? absl::StrCat("key ", spec.key(), " with ",
                                      spec.numel(), " floats")
                       : std::string("no key");
      };
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": its key table differs from worker ",
          config_.header().rank(), "'s at entry ", i, " (",
          describe(mine, mine ? config.keys(i) : ps::KeySpec()), " vs ",
          describe(theirs, theirs ? config_.keys(i) : ps::KeySpec()),
          "); run every worker with the same model and --ps_chunk_kb"));
    }
  }
  registered_[header.rank()].store(true);
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
  const int64_t n = static_cast<int64_t>(part.data().size() / 4);
  const int rank = header.rank();
  std::vector<std::weak_ptr<KeyWaiter>> ready;
  {
    absl::MutexLock lock(&key->mu);
    if (header.step() <= key->completed) {
      return absl::OutOfRangeError(absl::StrCat(
          Context(header, "push"), ": step ", header.step(),
          " is in the past; this key completed step ", key->completed,
          " and takes pushes for step ", key->completed + 1));
    }
    if (header.step() > key->completed + 1) {
      return absl::OutOfRangeError(
          absl::StrCat(Context(header, "push"), ": step ", header.step(),
                       " is too far ahead; this key takes pushes for step ",
                       key->completed + 1, " (BSP)"));
    }
    const int64_t received = key->received[rank];
    if (received == key->numel) {
      return absl::AlreadyExistsError(absl::StrCat(
          Context(header, "push"), ": worker ", rank, " already pushed all ",
          key->numel, " floats of this key for step ", header.step()));
    }
    if (part.offset() != received || part.offset() + n > key->numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          Context(header, "push"), ": part [", part.offset(), ", ",
          part.offset() + n, ") of a ", key->numel,
          "-float key does not continue the ", received,
          " floats received (parts come in order and fill the key)"));
    }
    // After this part, every worker has pushed [0, pushed).
    int64_t pushed = received + n;
    for (int r = 0; r < num_workers_; ++r) {
      if (r != rank) pushed = std::min(pushed, key->received[r]);
    }
    if (mode_ == ps::UPDATE_SERVER && key->params_received != key->numel &&
        (pushed == key->numel ||
         pushed / block_floats_ * block_floats_ > key->final_floats)) {
      return absl::FailedPreconditionError(
          absl::StrCat(Context(header, "push"),
                       ": worker 0 has not sent this key's "
                       "initial parameters, so the optimizer cannot run"));
    }
    const absl::Time start = absl::Now();
    const int slot =
        mode_ == ps::UPDATE_SERVER ? 0 : static_cast<int>(header.step() % 2);
    float* sums = key->sums[slot].data();
    // [begin, end) = [begin, first) already written by someone (add) +
    // [first, end) reached first by this worker (copy).
    const int64_t begin = part.offset();
    const int64_t end = begin + n;
    const int64_t first = std::clamp(key->written, begin, end);
    const char* data = part.data().data();
    AddFloats(sums + begin, data, first - begin);
    std::memcpy(sums + first, data + (first - begin) * 4,
                static_cast<size_t>(end - first) * 4);
    key->written = std::max(key->written, end);
    sum_ns_ += NanosSince(start);
    key->received[rank] += n;
    if (Finalize(*key, pushed)) {
      // Waiters stay registered until the key's step completes.
      if (key->completed == header.step()) {
        ready.swap(key->waiters);
      } else {
        ready = key->waiters;
      }
    }
  }
  bytes_in_ += static_cast<int64_t>(part.data().size());
  ++pushes_;
  for (const auto& weak : ready) {
    if (auto waiter = weak.lock()) waiter->KeyProgress(key->id);
  }
  return absl::OkStatus();
}

bool ServerShard::Finalize(KeyState& key, int64_t pushed) {
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
    key.final_floats = 0;
    key.written = 0;
    std::fill(key.received.begin(), key.received.end(), 0);
    ++completions_;
  }
  update_ns_ += NanosSince(start);
  return true;
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
    if (step < key->completed) {
      return absl::OutOfRangeError(
          absl::StrCat(context, ": step ", step, " is in the past for key ", id,
                       ", which completed step ", key->completed));
    }
    if (step > key->completed + 1) {
      return absl::OutOfRangeError(absl::StrCat(
          context, ": step ", step, " is too far ahead for key ", id,
          ", which takes pushes for step ", key->completed + 1));
    }
    keys.push_back(key);
  }
  std::vector<int64_t> ready;
  for (KeyState* key : keys) {
    absl::MutexLock lock(&key->mu);
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

absl::Status ServerShard::ReadResult(int64_t key_id, int64_t step,
                                     int64_t offset, int64_t max_floats,
                                     ps::KeyPart* part) {
  auto it = key_index_.find(key_id);
  if (!configured_.load(std::memory_order_acquire) || it == key_index_.end()) {
    return absl::InternalError(
        absl::StrCat(name_, ": reading unknown key ", key_id));
  }
  KeyState& key = *it->second;
  absl::MutexLock lock(&key.mu);
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
  part->set_key_numel(key.numel);
  part->set_offset(offset);
  part->mutable_data()->assign(reinterpret_cast<const char*>(source + offset),
                               static_cast<size_t>(n) * sizeof(float));
  return absl::OkStatus();
}

int64_t ServerShard::FinalFloats(int64_t key_id, int64_t step) const {
  if (!configured_.load(std::memory_order_acquire)) return -1;
  auto it = key_index_.find(key_id);
  if (it == key_index_.end()) return -1;
  const KeyState& key = *it->second;
  absl::MutexLock lock(&key.mu);
  if (key.completed == step) return key.numel;
  if (key.completed + 1 == step) return key.final_floats;
  return key.completed > step ? -1 : 0;
}

int64_t ServerShard::KeyNumel(int64_t key) const {
  if (!configured_.load(std::memory_order_acquire)) return 0;
  auto it = key_index_.find(key);
  return it == key_index_.end() ? 0 : it->second->numel;
}

std::vector<int> ServerShard::MissingWorkers(int64_t key_id,
                                             int64_t step) const {
  std::vector<int> missing;
  if (!configured_.load(std::memory_order_acquire)) return missing;
  auto it = key_index_.find(key_id);
  if (it == key_index_.end()) return missing;
  const KeyState& key = *it->second;
  absl::MutexLock lock(&key.mu);
  if (key.completed >= step) return missing;
  for (int r = 0; r < num_workers_; ++r) {
    // Before its step starts, nobody has pushed it.
    if (key.completed + 1 < step || key.received[r] < key.numel) {
      missing.push_back(r);
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
      steps =
          steps < 0 ? key->completed + 1 : std::min(steps, key->completed + 1);
      bytes += key->numel * 4;
    }
  }
  return absl::StrFormat(
      "{\"server\": %d, \"job_id\": \"%s\", \"update\": \"%s\", \"keys\": %d, "
      "\"key_bytes\": %d, \"steps\": %d, \"key_steps\": %d, \"bytes_in\": %d, "
      "\"bytes_out\": %d, \"parts_in\": %d, \"pulls\": %d, \"blocks\": %d, "
      "\"sum_ms\": %.3f, \"update_ms\": %.3f}",
      server_rank_, job_id_, mode, num_keys, bytes, std::max<int64_t>(steps, 0),
      completions_.load(), bytes_in_.load(), bytes_out_.load(), pushes_.load(),
      pulls_.load(), blocks_.load(), sum_ns_.load() / 1e6,
      update_ns_.load() / 1e6);
}

}  // namespace gradsync
