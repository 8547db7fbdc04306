// gradsync's C API for ctypes (see gradsync_c_api.h): one joined PyTorch
// worker and its DDP hook's strategy, behind extern "C" functions that take
// addresses and lengths and return errors as strings.
#include "python/gradsync_c_api.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/sync/gradient_sync.h"
#include "python/ddp_bucket_sync.h"
#include "python/job_connection.h"
#include "python/torch_run_record.h"

namespace gradsync {
namespace {

thread_local std::string last_error;

int Failed(const absl::Status& status) {
  last_error = std::string(status.message());
  if (last_error.empty()) last_error = status.ToString();
  return -1;
}

int Failed(const std::string& message) {
  last_error = message;
  return -1;
}

// Runs `body` (returning absl::Status) so that no exception leaves the
// library: C++ exceptions cannot cross a C boundary into ctypes.
template <typename Body>
int Guarded(const char* function, Body&& body) {
  try {
    const absl::Status status = body();
    if (!status.ok()) return Failed(status);
    last_error.clear();
    return 0;
  } catch (const std::exception& error) {
    return Failed(absl::StrCat("gradsync: ", function,
                               " failed inside the library: ", error.what()));
  } catch (...) {
    return Failed(absl::StrCat("gradsync: ", function,
                               " failed inside the library (unknown error)"));
  }
}

std::string JsonNumber(double value) {
  // Python's json reads NaN and Infinity; %.17g round-trips a double.
  return absl::StrFormat("%.17g", value);
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

// The state object's core: the job, the run record, DDP's buckets.
class TorchWorker {
 public:
  static absl::StatusOr<std::unique_ptr<TorchWorker>> Join(
      const JobConnectionOptions& options, const TorchRunOptions& run) {
    std::unique_ptr<TorchWorker> worker(new TorchWorker());
    absl::StatusOr<std::unique_ptr<JobConnection>> job =
        JobConnection::Join(options);
    if (!job.ok()) return job.status();
    worker->job_ = *std::move(job);
    absl::StatusOr<std::unique_ptr<TorchRunRecord>> record =
        TorchRunRecord::Start(run, *worker->job_);
    if (!record.ok()) {
      worker->job_->Fail(record.status());
      return record.status();
    }
    worker->record_ = *std::move(record);
    worker->buckets_ = std::make_unique<DdpBucketSync>(*worker->job_);
    worker->buckets_->SetTrace(worker->record_->trace(),
                               worker->record_->trace_steps());
    return worker;
  }

  ~TorchWorker() {
    if (buckets_ != nullptr) buckets_->Shutdown().IgnoreError();
  }

  absl::StatusOr<bool> AddBucket(DdpBucket bucket) {
    absl::StatusOr<bool> ended = buckets_->Add(bucket);
    absl::Status recorded = ended.status();
    if (recorded.ok() && *ended) {
      recorded =
          record_->RecordStep(buckets_->last_step(), *buckets_->layout());
    }
    if (!recorded.ok()) {
      // The others stop at once ("the job lost worker r: it failed: ...").
      job_->Fail(recorded);
      return recorded;
    }
    return *ended;
  }

  absl::Status SetBucketCaps(int64_t first_bucket_bytes, int64_t bucket_bytes) {
    return buckets_->SetCaps({first_bucket_bytes, bucket_bytes});
  }

  void SetReadyOrder(std::vector<int64_t> keys) {
    buckets_->SetReadyOrder(std::move(keys));
  }

  void SetLoss(double loss) { record_->SetLoss(loss); }
  void SetDeviceComputeMs(double ms) { record_->SetDeviceComputeMs(ms); }

  void Fail(const std::string& message) {
    job_->Fail(absl::AbortedError(message));
  }

  // The strategy's end, this worker's trace and summary (gathered on worker
  // 0, which writes summary.json), then the job's: as a native worker ends.
  absl::Status Close() {
    absl::Status status = buckets_->Shutdown();
    if (status.ok()) {
      status = record_->Finish(buckets_->SummaryJson(), buckets_->TraceFiles());
    }
    if (!status.ok()) {
      job_->Fail(status);
      return status;
    }
    return job_->Close();
  }

  std::string LastStepJson() const {
    const DdpStepStats& stats = buckets_->last_step();
    std::vector<std::string> fields = {
        absl::StrCat("\"step\": ", stats.step),
        absl::StrCat("\"step_ms\": ", JsonNumber(stats.step_ms)),
        absl::StrCat("\"sync_wait_ms\": ", JsonNumber(stats.sync_wait_ms)),
        absl::StrCat("\"bytes_sent\": ", stats.strategy.bytes_sent),
        absl::StrCat("\"bytes_recv\": ", stats.strategy.bytes_recv)};
    for (const auto& [name, value] : stats.strategy.extra) {
      fields.push_back(absl::StrCat(JsonString(name), ": ", JsonNumber(value)));
    }
    return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
  }

  int rank() const { return job_->env().rank; }
  int world_size() const { return job_->env().world_size; }
  int num_servers() const { return job_->env().num_servers; }
  std::string sync() const { return job_->options().sync; }
  std::string layout() const { return buckets_->DescribeLayout(); }
  std::string summary_json() const { return buckets_->SummaryJson(); }

  // Where a string handed to C lives until the next call on this worker.
  const char* Keep(std::string text) {
    returned_ = std::move(text);
    return returned_.c_str();
  }

 private:
  TorchWorker() = default;

  std::unique_ptr<JobConnection> job_;
  std::unique_ptr<TorchRunRecord> record_;
  std::unique_ptr<DdpBucketSync> buckets_;
  std::string returned_;
};

}  // namespace gradsync

struct gradsync_worker {
  std::unique_ptr<gradsync::TorchWorker> worker;
};

namespace {

using gradsync::Guarded;

std::string OrEmpty(const char* text) {
  return text == nullptr ? std::string() : std::string(text);
}

absl::Status NeedWorker(const gradsync_worker* worker, const char* function) {
  if (worker == nullptr || worker->worker == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradsync: ", function,
        " was given no worker (null): create one with gradsync_worker_create"));
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" {

int gradsync_api_version(void) { return GRADSYNC_C_API_VERSION; }

const char* gradsync_last_error(void) { return gradsync::last_error.c_str(); }

const char* gradsync_strategies(void) {
  static const std::string* const names = new std::string(
      absl::StrJoin(gradsync::GradientSyncRegistry::Names(), ","));
  return names->c_str();
}

int gradsync_worker_create(const char* sync, double timeout_s,
                           const char* const* flags, int num_flags,
                           const char* metrics_dir, const char* trace_path,
                           int64_t trace_steps, int64_t warmup_steps,
                           int64_t batch_size, const char* model,
                           int64_t total_steps, gradsync_worker** worker) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (worker == nullptr) {
      return absl::InvalidArgumentError(
          "gradsync_worker_create: the out-parameter `worker` is null");
    }
    *worker = nullptr;
    if (sync == nullptr || *sync == '\0') {
      return absl::InvalidArgumentError(
          "gradsync_worker_create: no strategy name (sync); give one of " +
          std::string(gradsync_strategies()));
    }
    if (num_flags < 0 || (num_flags > 0 && flags == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradsync_worker_create: ", num_flags, " flags but no flag array"));
    }
    gradsync::JobConnectionOptions options;
    options.sync = sync;
    options.timeout = absl::Seconds(timeout_s);
    for (int i = 0; i < num_flags; ++i)
      options.flags.push_back(OrEmpty(flags[i]));
    gradsync::TorchRunOptions run;
    run.metrics_dir = OrEmpty(metrics_dir);
    run.trace_path = OrEmpty(trace_path);
    run.trace_steps = trace_steps;
    run.warmup_steps = warmup_steps;
    run.batch_size = batch_size;
    run.model = OrEmpty(model);
    run.total_steps = total_steps;
    absl::StatusOr<std::unique_ptr<gradsync::TorchWorker>> joined =
        gradsync::TorchWorker::Join(options, run);
    if (!joined.ok()) return joined.status();
    *worker = new gradsync_worker{*std::move(joined)};
    return absl::OkStatus();
  });
}

int gradsync_worker_add_bucket(gradsync_worker* worker, int index, void* data,
                               int64_t numel, const int64_t* param_keys,
                               const int64_t* param_numels, int64_t num_params,
                               int is_last, int* step_ended) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    if (step_ended == nullptr || (numel > 0 && data == nullptr) ||
        num_params < 0 ||
        (num_params > 0 &&
         (param_keys == nullptr || param_numels == nullptr))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradsync_worker_add_bucket: bucket ", index,
          " has a null buffer, parameter array or step_ended pointer"));
    }
    gradsync::DdpBucket bucket;
    bucket.index = index;
    bucket.data = static_cast<float*>(data);
    bucket.numel = numel;
    bucket.is_last = is_last != 0;
    bucket.params.reserve(static_cast<size_t>(num_params));
    for (int64_t i = 0; i < num_params; ++i) {
      bucket.params.push_back(
          gradsync::DdpParam{param_keys[i], param_numels[i]});
    }
    absl::StatusOr<bool> ended = worker->worker->AddBucket(std::move(bucket));
    if (!ended.ok()) return ended.status();
    *step_ended = *ended ? 1 : 0;
    return absl::OkStatus();
  });
}

int gradsync_worker_set_bucket_caps(gradsync_worker* worker,
                                    int64_t first_bucket_bytes,
                                    int64_t bucket_bytes) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    return worker->worker->SetBucketCaps(first_bucket_bytes, bucket_bytes);
  });
}

int gradsync_worker_set_ready_order(gradsync_worker* worker,
                                    const int64_t* keys, int64_t num_keys) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    if (num_keys < 0 || (num_keys > 0 && keys == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradsync_worker_set_ready_order: ", num_keys, " keys but no array"));
    }
    worker->worker->SetReadyOrder(std::vector<int64_t>(keys, keys + num_keys));
    return absl::OkStatus();
  });
}

int gradsync_worker_set_loss(gradsync_worker* worker, double loss) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    worker->worker->SetLoss(loss);
    return absl::OkStatus();
  });
}

int gradsync_worker_set_device_compute_ms(gradsync_worker* worker,
                                          double compute_ms) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    if (!std::isfinite(compute_ms) || compute_ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradsync_worker_set_device_compute_ms: ", compute_ms,
          " ms is not a device time (give a finite time of at least 0)"));
    }
    worker->worker->SetDeviceComputeMs(compute_ms);
    return absl::OkStatus();
  });
}

int gradsync_worker_fail(gradsync_worker* worker, const char* message) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    worker->worker->Fail(OrEmpty(message));
    return absl::OkStatus();
  });
}

int gradsync_worker_close(gradsync_worker* worker) {
  return Guarded(__func__, [&]() -> absl::Status {
    if (absl::Status ok = NeedWorker(worker, __func__); !ok.ok()) return ok;
    return worker->worker->Close();
  });
}

void gradsync_worker_destroy(gradsync_worker* worker) {
  try {
    delete worker;
  } catch (...) {
    // A destructor that throws has nowhere to report to: the process is
    // leaving the job anyway.
  }
}

int gradsync_worker_rank(const gradsync_worker* worker) {
  return worker == nullptr ? -1 : worker->worker->rank();
}

int gradsync_worker_world_size(const gradsync_worker* worker) {
  return worker == nullptr ? -1 : worker->worker->world_size();
}

int gradsync_worker_num_servers(const gradsync_worker* worker) {
  return worker == nullptr ? -1 : worker->worker->num_servers();
}

const char* gradsync_worker_sync(gradsync_worker* worker) {
  if (worker == nullptr) return "";
  return worker->worker->Keep(worker->worker->sync());
}

const char* gradsync_worker_layout(gradsync_worker* worker) {
  if (worker == nullptr) return "";
  return worker->worker->Keep(worker->worker->layout());
}

const char* gradsync_worker_summary_json(gradsync_worker* worker) {
  if (worker == nullptr) return "";
  return worker->worker->Keep(worker->worker->summary_json());
}

const char* gradsync_worker_last_step_json(gradsync_worker* worker) {
  if (worker == nullptr) return "{}";
  return worker->worker->Keep(worker->worker->LastStepJson());
}

}  // extern "C"
