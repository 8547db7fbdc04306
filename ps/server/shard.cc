// One parameter server's shard: registration, message checks and routing to
// the keys (see shard.h).
#include "ps/server/shard.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "ps/server/async_key.h"
#include "ps/server/bsp_key.h"
#include "ps/consistency.h"
#include "ps/key_compression.h"
#include "ps/server/key_parameters.h"

namespace gradsync {
namespace {

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
      statistics_(num_workers),
      registered_(new std::atomic<bool>[num_workers]),
      shut_down_(num_workers, false) {
  for (int r = 0; r < num_workers; ++r) registered_[r] = false;
}

ServerShard::~ServerShard() = default;

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

ShardKey* ServerShard::KeyOrNull(int64_t key) const {
  // The index is published with configured_; read it only after.
  if (!configured_.load(std::memory_order_acquire)) return nullptr;
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : it->second;
}

absl::StatusOr<ShardKey*> ServerShard::FindKey(const ps::Header& header,
                                               int64_t key,
                                               const char* what) const {
  if (!configured_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(absl::StrCat(
        Context(header, what), ": no worker has registered with ", name_));
  }
  ShardKey* found = KeyOrNull(key);
  if (found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(Context(header, what), ": unknown key ", key, "; ", name_,
                     " holds ", keys_.size(), " keys"));
  }
  return found;
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
  const ps::CheckpointConfig& schedule = config.checkpoint();
  if (schedule.start_step() < 0 || schedule.every() < 0 ||
      (server_mode && !schedule.path().empty() &&
       schedule.steps_per_epoch() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": bad schedule (start step ", schedule.start_step(),
        ", checkpoint every ", schedule.every(), ", ",
        schedule.steps_per_epoch(), " steps per epoch)"));
  }
  RETURN_IF_ERROR(
      Annotate(CheckConsistency(config.consistency(), config.staleness(),
                                config.update_mode()),
               context));
  RETURN_IF_ERROR(CheckKeySizes(config, max_floats_, context));
  // What the keys' pushes and results carry (ps/key_compression.h).
  CompressionSpec compression;
  if (!config.compression().empty()) {
    absl::StatusOr<CompressionSpec> parsed =
        CompressionSpec::Parse(config.compression());
    if (!parsed.ok()) return Annotate(parsed.status(), context);
    compression = *parsed;
  }
  absl::StatusOr<PsPull> pull = ParsePsPull(config.pull());
  if (pull.ok()) pull = ResolvePsPull(*pull, compression, config.update_mode());
  if (!pull.ok()) return Annotate(pull.status(), context);
  for (const ps::KeySpec& spec : config.keys()) {
    if (spec.row_width() < 0 ||
        (spec.row_width() > 0 && spec.numel() % spec.row_width() != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": key ", spec.key(), " of ", spec.numel(),
          " floats has rows of ", spec.row_width()));
    }
  }
  // Server mode: each key's parameters and optimizers, before the keys, so
  // that a resume can fill them from the checkpoint.
  std::vector<CheckpointKey> table;
  std::vector<std::unique_ptr<KeyParameters>> parameters;
  absl::flat_hash_map<int64_t, size_t> index;
  for (const ps::KeySpec& spec : config.keys()) {
    if (!index.emplace(spec.key(), table.size()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": key ", spec.key(), " listed twice"));
    }
    table.push_back({spec.key(), spec.numel()});
    if (!server_mode) continue;
    ASSIGN_OR_RETURN(
        std::unique_ptr<KeyParameters> key_parameters,
        KeyParameters::Create(spec.key(), spec.numel(), block_floats_, *device,
                              optimizer, context));
    parameters.push_back(std::move(key_parameters));
  }
  auto checkpoint = std::make_unique<ShardCheckpoint>(
      name_, server_rank_, num_servers_, schedule, config.optimizer().kind(),
      table, parameters.empty() ? 0 : parameters.front()->state_buffers());
  // A server without keys (more servers than keys) has no state to keep.
  if (server_mode && schedule.resume() && !parameters.empty()) {
    std::vector<KeyParameters*> targets;
    for (const auto& key_parameters : parameters) {
      targets.push_back(key_parameters.get());
    }
    RETURN_IF_ERROR(checkpoint->Load(targets, context));
  }
  std::vector<std::unique_ptr<ShardKey>> keys;
  absl::flat_hash_map<int64_t, ShardKey*> key_index;
  std::vector<std::unique_ptr<EncodedKey>> encoded_keys;
  absl::flat_hash_map<int64_t, EncodedKey*> encoded_index;
  for (size_t i = 0; i < table.size(); ++i) {
    ShardKey::Shape shape;
    shape.id = table[i].key;
    shape.numel = table[i].numel;
    shape.index = i;
    shape.num_workers = num_workers_;
    shape.block_floats = block_floats_;
    std::unique_ptr<KeyParameters> key_parameters =
        server_mode ? std::move(parameters[i]) : nullptr;
    ShardKey::Setting setting{name_,
                              schedule.start_step(),
                              std::move(key_parameters),
                              config.optimizer().lr(),
                              *checkpoint,
                              statistics_};
    if (config.consistency() == ps::CONSISTENCY_BSP) {
      keys.push_back(std::make_unique<BspKey>(shape, std::move(setting)));
    } else {
      keys.push_back(std::make_unique<AsyncKey>(shape, std::move(setting),
                                                config.consistency(),
                                                config.staleness()));
    }
    key_index.emplace(shape.id, keys.back().get());
    const ps::KeySpec& spec = config.keys(static_cast<int>(i));
    const KeyEncoding encoding =
        KeyEncodingOf(compression, *pull, config.update_mode(),
                      spec.row_width(), spec.numel());
    if (encoding.encoded_push || encoding.encoded_result()) {
      encoded_keys.push_back(
          std::make_unique<EncodedKey>(spec.numel(), encoding, num_workers_));
      encoded_index.emplace(shape.id, encoded_keys.back().get());
    }
  }
  device_ = std::move(device);
  checkpoint_ = std::move(checkpoint);
  keys_ = std::move(keys);
  key_index_ = std::move(key_index);
  encoded_keys_ = std::move(encoded_keys);
  encoded_index_ = std::move(encoded_index);
  mode_ = config.update_mode();
  consistency_ = config.consistency();
  staleness_ = config.staleness();
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
  // Empty fields are the defaults (a registration from before compression).
  auto describe = [](const ps::RegisterConfig& c) {
    return absl::StrCat(
        "--compression=", c.compression().empty() ? "none" : c.compression(),
        " --ps_pull=", c.pull().empty() ? "dense" : c.pull());
  };
  if (describe(config) != describe(config_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": ", describe(config), " but worker ", first, " registered ",
        describe(config_), "; run every worker with the same --compression "
        "and --ps_pull"));
  }
  if (config.checkpoint().start_step() != config_.checkpoint().start_step()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": the worker starts at step ",
        config.checkpoint().start_step(), " but worker ", first, " at step ",
        config_.checkpoint().start_step(),
        "; with --resume every worker must read the same --checkpoint"));
  }
  if (config.checkpoint().SerializeAsString() !=
      config_.checkpoint().SerializeAsString()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": checkpoint settings {",
        config.checkpoint().ShortDebugString(), "} differ from worker ", first,
        "'s {", config_.checkpoint().ShortDebugString(),
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
        config.keys(i).numel() == config_.keys(i).numel() &&
        config.keys(i).row_width() == config_.keys(i).row_width()) {
      continue;
    }
    auto describe = [](bool present, const ps::KeySpec& spec) {
      return present ? absl::StrCat("key ", spec.key(), " with ", spec.numel(),
                                    " floats",
                                    spec.row_width() > 0
                                        ? absl::StrCat(" in rows of ",
                                                       spec.row_width())
                                        : "")
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
  ASSIGN_OR_RETURN(ShardKey * key,
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
  return key->InitParams(part);
}

absl::Status ServerShard::CheckParamsComplete() const {
  if (mode_ != ps::UPDATE_SERVER) return absl::OkStatus();
  for (const auto& key : keys_) RETURN_IF_ERROR(key->CheckParamsComplete());
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
  ASSIGN_OR_RETURN(ShardKey * key, FindKey(header, header.key(), "push"));
  if (part.key_numel() != key->numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Context(header, "push"), ": the worker's key has ",
                     part.key_numel(), " floats but this server's has ",
                     key->numel(), " (a different model or --ps_chunk_kb?)"));
  }
  // Compressed and row-sparse keys take encodings, the others float32; a
  // worker with another --compression (or another build) is refused here.
  EncodedKey* encoded = EncodedOrNull(header.key());
  const bool takes_encoding =
      encoded != nullptr && encoded->encoding().encoded_push;
  if (takes_encoding != (part.encoded_bytes() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Context(header, "push"), ": the worker pushed ",
        part.encoded_bytes() != 0 ? "an encoding" : "float32 data",
        " but this key takes ",
        takes_encoding ? DescribePush(encoded->encoding())
                       : std::string("float32 data"),
        "; run every worker with the same --compression as the first to "
        "register"));
  }
  Waiters ready;
  if (takes_encoding) {
    ASSIGN_OR_RETURN(std::optional<std::vector<float>> decoded,
                     encoded->AddPart(part, Context(header, "push")));
    statistics_.CountPushPart(static_cast<int64_t>(part.data().size()));
    if (!decoded.has_value()) return absl::OkStatus();
    // The whole push, decoded: one float32 part for the key, which sums (or
    // applies) it as it would an uncompressed push.
    ps::KeyPart floats;
    *floats.mutable_header() = header;
    floats.set_key_numel(part.key_numel());
    floats.set_offset(0);
    floats.mutable_data()->assign(
        reinterpret_cast<const char*>(decoded->data()),
        decoded->size() * sizeof(float));
    RETURN_IF_ERROR(key->Push(floats, &ready));
  } else {
    if (part.data().size() % 4 != 0 || part.data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Context(header, "push"), ": ", part.data().size(),
                       " bytes are not a whole, non-zero number of floats"));
    }
    RETURN_IF_ERROR(key->Push(part, &ready));
    statistics_.CountPushPart(static_cast<int64_t>(part.data().size()));
  }
  for (const auto& weak : ready) {
    if (auto waiter = weak.lock()) waiter->KeyProgress(key->id());
  }
  // A failed checkpoint write: the training state can no longer be saved as
  // asked, so stop the job (every later push fails too) rather than run on
  // without checkpoints.
  return checkpoint_->status();
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
  // Check everything first, so a bad request registers nothing.
  std::vector<ShardKey*> keys;
  for (int64_t id : request.keys()) {
    ASSIGN_OR_RETURN(ShardKey * key, FindKey(header, id, "pull"));
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": key ", id, " requested twice"));
    }
    RETURN_IF_ERROR(key->CheckPull(header, context));
    keys.push_back(key);
  }
  std::vector<int64_t> ready;
  for (ShardKey* key : keys) {
    if (key->AddPull(header.step(), header.rank(), waiter)) {
      ready.push_back(key->id());
    }
  }
  statistics_.CountPull();
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
  if (!configured_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": reading key ", key_id, " before registration"));
  }
  ShardKey* key = KeyOrNull(key_id);
  if (key == nullptr) {
    return absl::InternalError(
        absl::StrCat(name_, ": reading unknown key ", key_id));
  }
  if (step < 0 || max_floats < 1 || rank < 0 || rank >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": reading key ", key_id, " for step ", step, " for worker ",
        rank, ", at most ", max_floats, " floats"));
  }
  return key->Read(step, rank, offset, max_floats, place, reply);
}

int64_t ServerShard::FinalFloats(int64_t key_id, int64_t step, int rank) const {
  if (step < 0 || rank < 0 || rank >= num_workers_) return -1;
  const ShardKey* key = KeyOrNull(key_id);
  return key == nullptr ? -1 : key->FinalFloats(step, rank);
}

int64_t ServerShard::KeyNumel(int64_t key_id) const {
  const ShardKey* key = KeyOrNull(key_id);
  return key == nullptr ? 0 : key->numel();
}

EncodedKey* ServerShard::EncodedOrNull(int64_t key) const {
  if (!configured_.load(std::memory_order_acquire)) return nullptr;
  auto it = encoded_index_.find(key);
  return it == encoded_index_.end() ? nullptr : it->second;
}

bool ServerShard::EncodedResult(int64_t key) const {
  const EncodedKey* encoded = EncodedOrNull(key);
  return encoded != nullptr && encoded->encoding().encoded_result();
}

absl::StatusOr<std::vector<float>> ServerShard::WholeResult(ShardKey* key,
                                                            int64_t step,
                                                            int rank) {
  std::vector<float> floats(key->numel());
  ASSIGN_OR_RETURN(
      int64_t n,
      key->Read(step, rank, 0, key->numel(),
                [&floats](int64_t) { return reinterpret_cast<char*>(floats.data()); },
                nullptr));
  if (n != key->numel()) {
    return absl::InternalError(absl::StrCat(name_, ": read ", n, " of ",
                                            key->numel(), " floats of key ",
                                            key->id(), " for its encoding"));
  }
  return floats;
}

absl::StatusOr<int64_t> ServerShard::EncodedResultBytes(int64_t key_id,
                                                        int64_t step,
                                                        int rank) {
  ShardKey* key = KeyOrNull(key_id);
  EncodedKey* encoded = EncodedOrNull(key_id);
  if (key == nullptr || encoded == nullptr || rank < 0 ||
      rank >= num_workers_ || !encoded->encoding().encoded_result()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": key ", key_id, " has no encoded result for worker ", rank));
  }
  // FinalFloats refuses a step before the first (a key that completed
  // nothing would otherwise call step -1 complete).
  const int64_t final_floats = FinalFloats(key_id, step, rank);
  if (final_floats < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": the result of key ", key_id, " for step ", step,
        " is gone: a later step completed before it was pulled"));
  }
  if (final_floats < key->numel()) return 0;
  return encoded->ResultBytes(step,
                              [&] { return WholeResult(key, step, rank); });
}

absl::StatusOr<int64_t> ServerShard::ReadEncodedResult(
    int64_t key_id, int64_t step, int rank, int64_t offset, int64_t max_bytes,
    absl::FunctionRef<char*(int64_t bytes)> place) {
  ShardKey* key = KeyOrNull(key_id);
  EncodedKey* encoded = EncodedOrNull(key_id);
  if (key == nullptr || encoded == nullptr || rank < 0 ||
      rank >= num_workers_ || !encoded->encoding().encoded_result()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": key ", key_id, " has no encoded result"));
  }
  if (FinalFloats(key_id, step, rank) != key->numel()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": the result of key ", key_id, " for step ", step,
        " is not complete, or gone"));
  }
  absl::StatusOr<int64_t> n = encoded->ReadResult(
      step, offset, max_bytes, [&] { return WholeResult(key, step, rank); },
      place);
  if (!n.ok()) return Annotate(n.status(), absl::StrCat(name_, ": key ", key_id));
  return n;
}

std::vector<ServerShard::MissingPush> ServerShard::MissingWorkers(
    int64_t key_id, int64_t step, int rank) const {
  const ShardKey* key = KeyOrNull(key_id);
  if (key == nullptr || rank < 0 || rank >= num_workers_) return {};
  return key->MissingWorkers(step, rank);
}

std::string ServerShard::ConsistencyNote() const {
  return ::gradsync::ConsistencyNote(consistency_, staleness_);
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
  int64_t checkpoints = 0;
  const char* mode = "none";  // before the first registration
  if (configured_.load(std::memory_order_acquire)) {
    num_keys = keys_.size();
    mode = UpdateModeName(mode_);
    for (const auto& key : keys_) {
      const int64_t done = key->StepsDone();
      steps = steps < 0 ? done : std::min(steps, done);
      bytes += key->numel() * 4;
    }
    checkpoints = checkpoint_->written();
  }
  nlohmann::json summary = {
      {"server", server_rank_},
      {"job_id", job_id_},  // escaped by the library: job ids are user input
      {"update", mode},
      {"keys", num_keys},
      {"key_bytes", bytes},
      {"steps", std::max<int64_t>(steps, 0)},
      {"checkpoints", checkpoints},
      {"consistency", ConsistencyName(consistency_)},
  };
  if (asynchronous() && consistency_ == ps::CONSISTENCY_SSP) {
    summary["staleness_bound"] = staleness_;
  }
  // Per worker under SSP/ASP: the staleness of its pushes and the wait its
  // pulls saved.
  statistics_.AddTo(summary, asynchronous());
  return summary.dump();
}

}  // namespace gradsync
