// The parameter-server strategy (--sync=ps) behind the GradientSync seam (see
// ps_sync.h); tools/ps_sync_registration.cc registers it from the flags.
#include "ps/ps_sync.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/sync/error_feedback.h"
#include "core/sync/host_staging.h"
#include "core/sync/step_buckets.h"
#include "core/telemetry/derived_settings.h"
#include "nlohmann/json.hpp"
#include "ps/client/client.h"
#include "ps/client/partitioner.h"
#include "ps/server/server.h"
#include "ps/settings.h"

namespace gradsync {
namespace {

class PsSync : public GradientSync {
 public:
  PsSync(const SyncContext& context, const PsSyncOptions& options)
      : context_(context),
        options_(options),
        step_buckets_(absl::StrCat("worker ", context.identity.rank)) {}

  ~PsSync() override {
    if (loss_listener_ >= 0)
      context_.rendezvous->RemoveLossListener(loss_listener_);
    // The client waits for its calls before the colocated server stops.
    client_.reset();
    colocated_server_.reset();
  }

  absl::Status Setup(const ParamLayout& layout, Device& device,
                     const SyncBuffers& buffers) override;
  void BucketReady(int bucket) override;
  absl::Status Finish(StepStats& stats) override;
  // On the CPU: waits for the bucket's pushes and pulls alone (the keys are
  // pipelined per bucket already) and, with the optimizer on the servers,
  // copies its new parameters into place. On a GPU the results reach the
  // device with the step's upload: Unimplemented, the trainer uses Finish.
  absl::Status WaitBucket(int bucket) override;
  absl::Status Rebucket(const ParamLayout& layout) override;
  void SetTrainingSchedule(const TrainingSchedule& schedule) override {
    schedule_ = schedule;
  }
  bool UpdatesParameters() const override {
    return options_.update_mode == ps::UPDATE_SERVER;
  }
  bool ReplicasMayDiffer() const override {
    return options_.consistency.mode != ps::CONSISTENCY_BSP;
  }
  absl::Status Shutdown() override;
  std::string SummaryJson() const override;
  std::vector<std::string> TraceFiles() const override;

 private:
  std::string self() const {
    return absl::StrCat("worker ", context_.identity.rank);
  }
  // How many of the job's servers run in workers, checked against the
  // separate ones that joined (`separate` receives their addresses).
  absl::StatusOr<int> ColocatedServers(std::vector<std::string>* separate);
  absl::StatusOr<std::vector<std::string>> SeparateServerAddresses();
  // The settings' inputs from the options and the context (ps/settings.h).
  PsSettingsInputs SettingsInputs(int num_servers, int colocated) const;
  // Worker 0 logs the settings and their warnings and records them in the
  // run's manifest.
  void ReportSettings() const;
  // Starts this worker's server when it is one of the first `colocated`,
  // and returns every colocated server's address (from the rendezvous).
  absl::StatusOr<std::vector<std::string>> StartColocatedServer(
      int colocated, int num_servers);
  // The client's options: the settings, this worker and the schedule.
  PsClientOptions ClientOptions() const;

  const SyncContext context_;
  const PsSyncOptions options_;
  // What this job runs with (ps/settings.h): the options' explicit values,
  // else their rules', each with its reason.
  PsSettings settings_;
  TrainingSchedule schedule_;
  Partition partition_;
  std::unique_ptr<ParameterServer> colocated_server_;
  std::unique_ptr<PsClient> client_;
  int loss_listener_ = -1;  // registered with context_.rendezvous
  SyncBuffers buffers_;
  Device* device_ = nullptr;  // Setup's, for Rebucket's new staging
  int64_t total_numel_ = 0;
  // Gradients as host memory: on a GPU a pinned mirror filled bucket by bucket
  // on a copy stream as backward produces them; on the CPU the buffer itself.
  std::unique_ptr<HostStaging> grad_staging_;
  // Server mode: pulled parameters land in pulled_params() and reach the
  // parameter buffer in Finish, because backward may still read a layer's
  // weights after its bucket was handed over. On a GPU that is a pinned
  // mirror uploaded after backward; on the CPU a host vector copied over.
  std::unique_ptr<HostStaging> param_staging_;
  std::vector<float> staging_;
  float* pulled_params() {
    return param_staging_ != nullptr && param_staging_->is_mirror()
               ? param_staging_->host_buffer()
               : staging_.data();
  }
  // Buckets whose host copy has been handed to the client this step: on a GPU
  // that happens on the staging thread, and Finish must wait for all of them
  // before it waits for the client.
  std::mutex started_mu_;
  std::condition_variable started_changed_;
  int num_started_ = 0;
  // This step's handed-over buckets and the global step (from the schedule).
  StepBuckets step_buckets_;
  // Compression: the codec, the buckets (offsets, row-sparse widths), each
  // bucket's keys with their ranges in it, the error-feedback residual of
  // every float of the gradient (empty unless the method uses one), and
  // this step's encodings by key id (written by each bucket's own callback,
  // read by the client until WaitAll).
  std::optional<Compressor> compressor_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> bucket_keys_;
  // Saved beside the trainer's checkpoints and restored on --resume
  // (core/sync/error_feedback.h); keeps nothing when no dense bucket
  // compresses with error feedback (a hybrid job's PS holds row-sparse
  // buckets only, whose rows travel exactly).
  std::optional<ErrorFeedback> error_feedback_;
  std::vector<std::string> key_encodings_;
  // Groups the partition's keys by bucket (Setup, Rebucket).
  void GroupKeysByBucket(const ParamLayout& layout);
  // The codec, the keys by bucket, the error-feedback residual and the
  // per-key encodings' slots (Setup).
  absl::Status SetUpEncodings(const ParamLayout& layout);
  // Whether `bucket` travels encoded.
  bool Encodes(int bucket) const {
    return context_.compression.method != CompressionMethod::kNone ||
           buckets_[bucket].sparse_row_width > 0;
  }
  // Encodes `bucket` from the host gradients into key_encodings_.
  absl::Status EncodeBucket(int bucket, int64_t step);
  absl::Status bucket_error_;

  // Run totals.
  double push_ms_ = 0;
  double pull_ms_ = 0;
  int64_t max_staleness_ = 0;  // SSP/ASP, over the run
  std::vector<int64_t> bytes_to_server_;
  std::vector<int64_t> bytes_from_server_;
  std::vector<std::string> server_summaries_;
  bool shut_down_ = false;
};

absl::StatusOr<std::vector<std::string>> PsSync::StartColocatedServer(
    int colocated, int num_servers) {
  const int n = context_.identity.world_size;
  const int rank = context_.identity.rank;
  std::string mine;
  if (rank < colocated) {
    ParameterServerOptions server_options;
    server_options.job_id = context_.identity.job_id;
    server_options.server_rank = rank;
    server_options.num_servers = num_servers;
    server_options.num_workers = n;
    // Reached only from this host when it advertises loopback.
    server_options.bind_address =
        context_.identity.advertise_host.rfind("127.", 0) == 0 ? "127.0.0.1:0"
                                                               : "0.0.0.0:0";
    // Its results travel on the pull streams.
    server_options.message_bytes = settings_.streams.pull_message.bytes;
    server_options.stream_window_bytes = settings_.streams.push_window.bytes;
    server_options.bdp_probe = settings_.streams.push_window.bdp_probe;
    // Its spans go into this worker's timeline (same process, as the
    // client's), every step the recorder is on.
    server_options.trace_into_current = true;
    server_options.max_shard_bytes = options_.max_shard_bytes;
    ASSIGN_OR_RETURN(colocated_server_, ParameterServer::Start(server_options));
    mine = absl::StrCat(context_.identity.advertise_host, ":",
                        colocated_server_->port());
    if (n == 1) return std::vector<std::string>{mine};
  }
  if (context_.rendezvous == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        self(), ": ", colocated, " colocated server(s) with ", n,
        " workers need the coordinator to exchange server addresses"));
  }
  auto key = [](int server) { return absl::StrCat("ps/colocated/", server); };
  if (rank < colocated)
    RETURN_IF_ERROR(context_.rendezvous->Set(key(rank), mine));
  std::vector<std::string> addresses(colocated);
  for (int r = 0; r < colocated; ++r) {
    ASSIGN_OR_RETURN(addresses[r],
                     context_.rendezvous->Get(key(r), context_.timeout));
  }
  return addresses;
}

absl::StatusOr<std::vector<std::string>> PsSync::SeparateServerAddresses() {
  if (!options_.server_addresses.empty()) return options_.server_addresses;
  std::map<int, std::string> by_rank;
  for (const Member& member : context_.members) {
    if (member.role != Role::kServer) continue;
    if (!by_rank.emplace(member.rank, member.address).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          self(), ": two parameter servers joined as server ", member.rank));
    }
  }
  std::vector<std::string> addresses;
  for (const auto& [rank, address] : by_rank) {
    if (rank != static_cast<int>(addresses.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(self(), ": parameter server ranks are not 0..",
                       by_rank.size() - 1, " (found server ", rank, ")"));
    }
    addresses.push_back(address);
  }
  if (context_.identity.num_servers != 0 &&
      context_.identity.num_servers != static_cast<int>(addresses.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        self(), ": ", addresses.size(), " servers joined but the job has ",
        context_.identity.num_servers));
  }
  return addresses;
}

// Servers 0..k-1 are the colocated ones (in workers 0..k-1), k..K-1 the
// separate ones in the order of their ranks; every worker builds the same
// list, so the partition is the same everywhere.
absl::StatusOr<int> PsSync::ColocatedServers(
    std::vector<std::string>* separate) {
  const int n = context_.identity.world_size;
  const int colocated = options_.colocate ? n : options_.colocated_servers;
  if (colocated < 0 || colocated > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        self(), ": ", colocated, " colocated servers in a job of ", n,
        " workers; at most one per worker (--ps_colocated_servers)"));
  }
  ASSIGN_OR_RETURN(*separate, SeparateServerAddresses());
  if (options_.colocate && !separate->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        self(), ": --ps_colocate puts a server in every worker, but ",
        separate->size(),
        " separate servers joined too and would hold no keys; drop "
        "--servers, or use them with --ps_colocated_servers=",
        n));
  }
  if (colocated == 0 && separate->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(self(),
                     ": --sync=ps needs parameter servers: start them with "
                     "`gradsync launch --servers=K`, or let workers serve with "
                     "--ps_colocate or --ps_colocated_servers=k"));
  }
  return colocated;
}

PsSettingsInputs PsSync::SettingsInputs(int num_servers, int colocated) const {
  PsSettingsInputs inputs;
  inputs.chunk_bytes = options_.chunk_bytes;
  inputs.message_bytes = options_.message_bytes;
  inputs.stream_window_bytes = options_.stream_window_bytes;
  inputs.link = options_.link;
  inputs.update_mode = options_.update_mode;
  inputs.consistency = options_.consistency;
  inputs.partition = options_.partition;
  inputs.pull = options_.pull;
  inputs.compression = context_.compression;
  inputs.optimizer = options_.optimizer;
  inputs.timeout = context_.timeout;
  inputs.num_workers = context_.identity.world_size;
  inputs.num_servers = num_servers;
  inputs.colocated_servers = colocated;
  inputs.schedule = context_.schedule;
  return inputs;
}

void PsSync::ReportSettings() const {
  if (context_.identity.rank != 0) return;
  for (const std::string& line : settings_.LogLines()) GS_LOG(INFO) << line;
  for (const std::string& warning : settings_.warnings) {
    GS_LOG(WARNING) << warning;
  }
  for (const PsManifestEntry& entry : settings_.ManifestEntries()) {
    RecordSetting(entry.name, entry.value, entry.source);
  }
}

PsClientOptions PsSync::ClientOptions() const {
  PsClientOptions client_options;
  client_options.compression = settings_.compression.ToString();
  client_options.pull = PsPullName(settings_.pull);
  client_options.job_id = context_.identity.job_id;
  client_options.rank = context_.identity.rank;
  client_options.num_workers = context_.identity.world_size;
  client_options.update_mode = settings_.update_mode;
  client_options.consistency = settings_.consistency.mode;
  client_options.staleness = settings_.consistency.staleness;
  client_options.partition = PartitionPolicyName(settings_.partition);
  client_options.timeout = context_.timeout;
  client_options.message_bytes = settings_.streams.push_message.bytes;
  client_options.stream_window_bytes = settings_.streams.pull_window.bytes;
  client_options.bdp_probe = settings_.streams.pull_window.bdp_probe;
  client_options.optimizer = settings_.OptimizerProto();
  client_options.priority = settings_.schedule == ScheduleKind::kPriority;
  client_options.push_credit_bytes = settings_.push_credit.bytes;
  client_options.pull_credit_bytes = settings_.pull_credit.bytes;
  ps::CheckpointConfig& checkpoint = client_options.checkpoint;
  checkpoint.set_start_step(schedule_.start_step);
  // Only servers running the optimizer hold state worth a checkpoint; in
  // worker mode they only need to know the first step.
  if (settings_.update_mode == ps::UPDATE_SERVER) {
    checkpoint.set_resume(schedule_.resume);
    checkpoint.set_path(schedule_.checkpoint_path);
    checkpoint.set_every(schedule_.checkpoint_every);
    checkpoint.set_steps_per_epoch(schedule_.steps_per_epoch);
    checkpoint.set_total_steps(schedule_.total_steps);
  }
  return client_options;
}

absl::Status PsSync::SetUpEncodings(const ParamLayout& layout) {
  compressor_.emplace(context_.compression, context_.compression_seed);
  GroupKeysByBucket(layout);
  bool any_dense = false;
  for (const Bucket& bucket : layout.buckets()) {
    any_dense |= bucket.sparse_row_width == 0;
  }
  error_feedback_.emplace(any_dense ? context_.compression : CompressionSpec(),
                          context_.identity.rank,
                          context_.identity.world_size);
  RETURN_IF_ERROR(
      Annotate(error_feedback_->Setup(total_numel_, schedule_), self()));
  key_encodings_.assign(partition_.keys().size(), std::string());
  return absl::OkStatus();
}

absl::Status PsSync::Setup(const ParamLayout& layout, Device& device,
                           const SyncBuffers& buffers) {
  if (buffers.grads == nullptr || buffers.params == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(self(), ": --sync=ps needs both flat buffers"));
  }
  buffers_ = buffers;
  device_ = &device;
  total_numel_ = layout.total_numel();
  ASSIGN_OR_RETURN(
      grad_staging_,
      CreateHostStaging(device, layout, buffers.grads, context_.timeout));
  std::vector<std::string> addresses;
  ASSIGN_OR_RETURN(const int colocated, ColocatedServers(&addresses));
  const int num_servers = colocated + static_cast<int>(addresses.size());
  ASSIGN_OR_RETURN(settings_,
                   ResolvePsSettings(SettingsInputs(num_servers, colocated),
                                     layout, &partition_));
  ReportSettings();
  if (colocated > 0) {
    ASSIGN_OR_RETURN(std::vector<std::string> colocated_addresses,
                     StartColocatedServer(colocated, num_servers));
    addresses.insert(addresses.begin(), colocated_addresses.begin(),
                     colocated_addresses.end());
  }

  RETURN_IF_ERROR(SetUpEncodings(layout));
  ASSIGN_OR_RETURN(client_, PsClient::Create(ClientOptions(), partition_,
                                             std::move(addresses)));
  // A step waits for every worker's push: once the job has lost a member it
  // can never complete, so it fails at once, naming the loss.
  if (context_.rendezvous != nullptr) {
    loss_listener_ = context_.rendezvous->AddLossListener(
        [client = client_.get()](const absl::Status& loss) {
          client->Abort(loss);
        });
  }
  // The servers get the initial parameters from host memory.
  std::vector<float> initial(total_numel_);
  RETURN_IF_ERROR(device.CopyToHost(initial.data(), buffers.params,
                                    initial.size() * sizeof(float)));
  RETURN_IF_ERROR(client_->Register(initial.data()));
  // Under SSP and ASP a server applies each push as it arrives, with the
  // parameters worker 0 sent when it registered; a worker that pushed before
  // them would be refused. BSP needs no barrier: a key's update waits for
  // worker 0's own push, which follows its registration.
  if (options_.consistency.mode != ps::CONSISTENCY_BSP &&
      context_.rendezvous != nullptr) {
    RETURN_IF_ERROR(context_.rendezvous->Barrier(
        "ps/registered", BarrierGroup::kWorkers, context_.timeout));
  }
  if (options_.update_mode == ps::UPDATE_SERVER) {
    ASSIGN_OR_RETURN(
        param_staging_,
        CreateHostStaging(device, layout, buffers.params, context_.timeout));
    if (!param_staging_->is_mirror()) staging_.assign(total_numel_, 0.0f);
  }
  step_buckets_.Reset(static_cast<int>(layout.buckets().size()),
                      schedule_.start_step);
  bytes_to_server_.assign(partition_.num_servers(), 0);
  bytes_from_server_.assign(partition_.num_servers(), 0);
  return absl::OkStatus();
}

void PsSync::BucketReady(int bucket) {
  if (client_ == nullptr) {
    if (bucket_error_.ok()) {
      bucket_error_ = absl::FailedPreconditionError(
          absl::StrCat(self(), ": BucketReady before Setup"));
    }
    return;
  }
  if (absl::Status marked = step_buckets_.MarkReady(bucket); !marked.ok()) {
    if (bucket_error_.ok()) bucket_error_ = marked;  // reported by Finish
    return;
  }
  float* dst = options_.update_mode == ps::UPDATE_SERVER
                   ? pulled_params()
                   : grad_staging_->host_buffer();
  const int64_t step = step_buckets_.step();
  // On the CPU this runs inline; on a GPU once the bucket's copy has landed.
  grad_staging_->Download(
      bucket, [this, bucket, step, dst](absl::Status status) {
        const bool encodes = Encodes(bucket);
        if (status.ok() && encodes) status = EncodeBucket(bucket, step);
        if (status.ok()) {
          client_->StartBucket(bucket, step, grad_staging_->host_buffer(), dst,
                               encodes ? &key_encodings_ : nullptr);
        }
        std::lock_guard<std::mutex> lock(started_mu_);
        if (!status.ok() && bucket_error_.ok()) bucket_error_ = status;
        ++num_started_;
        started_changed_.notify_all();
      });
}

void PsSync::GroupKeysByBucket(const ParamLayout& layout) {
  buckets_ = layout.buckets();
  bucket_keys_.assign(buckets_.size(), {});
  for (const PsKey& key : partition_.keys()) {
    bucket_keys_[key.bucket].push_back(key.id);
  }
}

absl::Status PsSync::EncodeBucket(int bucket, int64_t step) {
  const Bucket& info = buckets_[bucket];
  const float* gradient = grad_staging_->host_buffer() + info.offset;
  const absl::Span<const float> floats(gradient,
                                       static_cast<size_t>(info.numel));
  EncodedBucket encoded;
  if (info.sparse_row_width > 0) {
    // An embedding table's gradient: its touched rows, exactly, whatever
    // --compression does to the dense buckets.
    encoded = SparseRowsOf(floats, static_cast<int32_t>(info.sparse_row_width));
  } else {
    const absl::Span<float> residual =
        error_feedback_->Of(info.offset, info.numel);
    RETURN_IF_ERROR(Annotate(
        compressor_->Encode(floats, residual, step, bucket, &encoded),
        self()));
  }
  std::vector<KeyRange> ranges;
  for (int id : bucket_keys_[bucket]) {
    const PsKey& key = partition_.keys()[id];
    ranges.push_back({key.offset - info.offset, key.numel});
  }
  absl::StatusOr<std::vector<std::string>> pieces =
      SplitIntoKeys(encoded, ranges);
  RETURN_IF_ERROR(Annotate(pieces.status(),
                           absl::StrCat(self(), ": bucket ", bucket)));
  for (size_t i = 0; i < pieces->size(); ++i) {
    key_encodings_[bucket_keys_[bucket][i]] = std::move((*pieces)[i]);
  }
  return absl::OkStatus();
}

absl::Status PsSync::Finish(StepStats& stats) {
  if (client_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(self(), ": Finish before Setup"));
  }
  {
    // Every download reports within the staging deadline, so this ends.
    std::unique_lock<std::mutex> lock(started_mu_);
    started_changed_.wait(
        lock, [this] { return num_started_ == step_buckets_.num_ready(); });
    num_started_ = 0;
  }
  PsStepStats step_stats;
  absl::Status status = client_->WaitAll(&step_stats);
  {
    std::lock_guard<std::mutex> lock(started_mu_);
    if (status.ok() && !bucket_error_.ok()) status = bucket_error_;
  }
  if (status.ok()) status = step_buckets_.CheckAllReady();
  const int num_buckets = step_buckets_.num_buckets();
  step_buckets_.ClearStep();
  bucket_error_ = absl::OkStatus();
  // A server whose connection broke is often only the messenger.
  if (absl::IsUnavailable(status) || absl::IsCancelled(status)) {
    status = ExplainStepFailure(context_.rendezvous, status);
  }
  RETURN_IF_ERROR(status);

  if (options_.update_mode == ps::UPDATE_SERVER) {
    if (param_staging_->is_mirror()) {
      RETURN_IF_ERROR(param_staging_->UploadAll());
      RETURN_IF_ERROR(param_staging_->FinishStep());
    } else {
      std::memcpy(buffers_.params, staging_.data(),
                  static_cast<size_t>(total_numel_) * sizeof(float));
    }
  } else if (grad_staging_->is_mirror()) {
    for (int b = 0; b < num_buckets; ++b) grad_staging_->Upload(b);
    RETURN_IF_ERROR(grad_staging_->FinishStep());
  }
  for (int s = 0; s < partition_.num_servers(); ++s) {
    const int64_t to = step_stats.bytes_to_server[s];
    const int64_t from = step_stats.bytes_from_server[s];
    stats.bytes_sent += to;
    stats.bytes_recv += from;
    bytes_to_server_[s] += to;
    bytes_from_server_[s] += from;
    stats.extra.emplace_back(absl::StrCat("server", s, "_bytes_sent"),
                             static_cast<double>(to));
    stats.extra.emplace_back(absl::StrCat("server", s, "_bytes_recv"),
                             static_cast<double>(from));
  }
  stats.extra.emplace_back("push_ms", step_stats.push_ms);
  stats.extra.emplace_back("pull_ms", step_stats.pull_ms);
  if (step_stats.slowest_clock >= 0) {
    // The next step's gradient is computed on these parameters: the steps
    // of the slowest worker they lack (0 under BSP, at most s under SSP).
    const int64_t staleness =
        step_buckets_.step() + 1 - step_stats.slowest_clock;
    stats.extra.emplace_back("staleness", static_cast<double>(staleness));
    stats.extra.emplace_back("wait_saved_ms", step_stats.wait_saved_ms);
    max_staleness_ = std::max(max_staleness_, staleness);
  }
  push_ms_ += step_stats.push_ms;
  pull_ms_ += step_stats.pull_ms;
  step_buckets_.NextStep();
  // This step's residual, saved when the trainer checkpoints at it.
  return Annotate(error_feedback_->AfterStep(step_buckets_.step()), self());
}

absl::Status PsSync::WaitBucket(int bucket) {
  if (client_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(self(), ": WaitBucket before Setup"));
  }
  if (grad_staging_->is_mirror() ||
      (param_staging_ != nullptr && param_staging_->is_mirror())) {
    return absl::UnimplementedError(absl::StrCat(
        self(), ": on a GPU a bucket reaches the device with the step"));
  }
  if (bucket < 0 || bucket >= static_cast<int>(buckets_.size()) ||
      !step_buckets_.ready(bucket)) {
    return absl::FailedPreconditionError(
        absl::StrCat(self(), ": WaitBucket(", bucket, ") of step ",
                     step_buckets_.step(), ", which was not handed over"));
  }
  {
    // On the CPU the bucket's calls started inline in BucketReady.
    std::lock_guard<std::mutex> lock(started_mu_);
    if (!bucket_error_.ok()) return bucket_error_;
  }
  absl::Status status = client_->WaitBucket(bucket);
  if (absl::IsUnavailable(status) || absl::IsCancelled(status)) {
    status = ExplainStepFailure(context_.rendezvous, status);
  }
  RETURN_IF_ERROR(status);
  if (options_.update_mode == ps::UPDATE_SERVER) {
    const Bucket& info = buckets_[bucket];
    std::memcpy(buffers_.params + info.offset, staging_.data() + info.offset,
                static_cast<size_t>(info.numel) * sizeof(float));
  }
  return absl::OkStatus();
}

// The servers know keys, not buckets: a new bucket cap only regroups the
// registered keys on the workers, provided every key stays what and where it
// was (the partitioner walks parameters, not buckets, so it does; checked).
// Under --ps_update=server the pulled parameters' staging follows the
// buckets too; --autotune does not run there (its trials would move the
// servers' parameters), so that case is left unimplemented.
absl::Status PsSync::Rebucket(const ParamLayout& layout) {
  if (client_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(self(), ": Rebucket before Setup"));
  }
  if (options_.update_mode == ps::UPDATE_SERVER) {
    return absl::UnimplementedError(
        "--ps_update=server: the buckets cannot change after Setup");
  }
  if (step_buckets_.num_ready() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        self(), ": Rebucket in the middle of step ", step_buckets_.step()));
  }
  ASSIGN_OR_RETURN(
      Partition regrouped,
      Partition::Create(layout, partition_.shares(), settings_.key_size.bytes));
  const std::vector<PsKey>& old_keys = partition_.keys();
  const std::vector<PsKey>& new_keys = regrouped.keys();
  bool same = old_keys.size() == new_keys.size();
  for (size_t i = 0; same && i < old_keys.size(); ++i) {
    same = old_keys[i].param == new_keys[i].param &&
           old_keys[i].chunk == new_keys[i].chunk &&
           old_keys[i].offset == new_keys[i].offset &&
           old_keys[i].numel == new_keys[i].numel &&
           old_keys[i].server == new_keys[i].server;
  }
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        self(), ": the new bucket grouping would move keys between servers"));
  }
  ASSIGN_OR_RETURN(
      grad_staging_,
      CreateHostStaging(*device_, layout, buffers_.grads, context_.timeout));
  partition_ = std::move(regrouped);  // the client reads it by reference
  RETURN_IF_ERROR(client_->RegroupBuckets());
  // The residual is per float of the gradient, so it survives a regrouping.
  GroupKeysByBucket(layout);
  step_buckets_.Reset(static_cast<int>(layout.buckets().size()),
                      step_buckets_.step());
  return absl::OkStatus();
}

absl::Status PsSync::Shutdown() {
  if (shut_down_ || client_ == nullptr) return absl::OkStatus();
  shut_down_ = true;
  absl::Status status =
      client_->Shutdown(step_buckets_.step(), &server_summaries_);
  if (colocated_server_ != nullptr) {
    // Other workers may still be finishing their last step against this
    // server: stop only when every one of them has said it is done.
    absl::Status wait = colocated_server_->WaitForShutdown(context_.timeout);
    GS_LOG(INFO) << colocated_server_->SummaryJson();
    colocated_server_->Stop();
    if (status.ok()) status = wait;
  }
  return status;
}

// The separate servers name their timeline files in their summaries (the
// colocated ones record into their workers' timelines).
std::vector<std::string> PsSync::TraceFiles() const {
  std::vector<std::string> files;
  for (const std::string& text : server_summaries_) {
    const nlohmann::json summary =
        nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (summary.is_object() && summary.contains("trace_file") &&
        summary["trace_file"].is_string()) {
      files.push_back(summary["trace_file"].get<std::string>());
    }
  }
  return files;
}

std::string PsSync::SummaryJson() const {
  const int64_t run_steps =
      step_buckets_.step() - schedule_.start_step;  // in this run
  const double steps = std::max<int64_t>(run_steps, 1);
  // The servers' summaries arrive as JSON text; one that does not parse is
  // kept as a string rather than dropped.
  nlohmann::json servers = nlohmann::json::array();
  for (const std::string& text : server_summaries_) {
    nlohmann::json summary =
        nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    servers.push_back(summary.is_discarded() ? nlohmann::json(text) : summary);
  }
  const nlohmann::json summary = {
      {"strategy", "ps"},
      {"update", UpdateModeName(options_.update_mode)},
      {"colocate", options_.colocate},
      {"colocated_servers", options_.colocate ? context_.identity.world_size
                                              : options_.colocated_servers},
      {"servers", partition_.num_servers()},
      {"keys", partition_.keys().size()},
      {"chunk_bytes", settings_.key_size.bytes},
      {"chunk_source", settings_.key_size.source},
      {"schedule", ScheduleKindName(settings_.schedule)},
      {"push_credit_bytes", settings_.push_credit.bytes},
      {"pull_credit_bytes", settings_.pull_credit.bytes},
      {"push_message_bytes", settings_.streams.push_message.bytes},
      {"pull_message_bytes", settings_.streams.pull_message.bytes},
      {"stream_window_bytes", settings_.streams.pull_window.bytes},
      {"push_stream_window_bytes", settings_.streams.push_window.bytes},
      {"pull_stream_window_bytes", settings_.streams.pull_window.bytes},
      {"push_bdp_probe", settings_.streams.push_window.bdp_probe},
      {"pull_bdp_probe", settings_.streams.pull_window.bdp_probe},
      {"partition", PartitionPolicyName(options_.partition)},
      {"server_shares", partition_.shares()},
      {"server_key_bytes", partition_.server_bytes()},
      {"imbalance", partition_.imbalance()},
      {"steps", run_steps},
      {"push_ms_mean", push_ms_ / steps},
      {"pull_ms_mean", pull_ms_ / steps},
      {"bytes_to_server", bytes_to_server_},
      {"bytes_from_server", bytes_from_server_},
      {"server_summaries", servers},
      {"consistency", ConsistencyName(options_.consistency.mode)},
      {"staleness_bound", options_.consistency.staleness},
      {"staleness_max", max_staleness_},
  };
  return summary.dump();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GradientSync>> CreatePsSync(
    const SyncContext& context, const PsSyncOptions& options) {
  if (options.update_mode == ps::UPDATE_SERVER) {
    // Fail at start-up, not at the servers' first update.
    auto optimizer = CreateOptimizer(options.optimizer);
    if (!optimizer.ok()) {
      return Annotate(optimizer.status(), "--sync=ps --ps_update=server");
    }
  }
  // chunk_bytes and message_bytes 0: auto (resolved in Setup).
  if (options.chunk_bytes < 0 || options.chunk_bytes % 4 != 0 ||
      options.message_bytes < 0 || options.message_bytes % 4 != 0 ||
      options.message_bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync=ps: chunk ", options.chunk_bytes, " B and message ",
        options.message_bytes,
        " B must be multiples of 4, messages <= ", kMaxMessageBytes, " B"));
  }
  // Under priority --partition_kb is the key size (ps/settings.h): a
  // second, different one is refused before any connection is made.
  if (context.schedule.kind == ScheduleKind::kPriority &&
      context.schedule.partition_bytes > 0 && options.chunk_bytes > 0 &&
      context.schedule.partition_bytes != options.chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync=ps --schedule=priority: --partition_kb=",
        context.schedule.partition_bytes / 1024, " and --ps_chunk_kb=",
        options.chunk_bytes / 1024,
        " disagree; on the PS a partition is a key: give one of them"));
  }
  // --ps_pull against --compression and --ps_update: refused before any
  // connection is made.
  RETURN_IF_ERROR(Annotate(
      ResolvePsPull(options.pull, context.compression, options.update_mode)
          .status(),
      "--sync=ps"));
  return std::unique_ptr<GradientSync>(
      std::make_unique<PsSync>(context, options));
}

}  // namespace gradsync
