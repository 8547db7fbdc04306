// gradsync._gradsync: the Python extension over gradsync's C++ strategies.
//
// Python's gradsync.torch checks each DDP bucket (float32, contiguous, on the
// CPU) and passes its memory as an address and a length; nothing here
// includes PyTorch's headers, so the module builds in seconds and does not
// depend on torch's C++ ABI. Every call that may wait on the network
// releases the GIL. Errors become RuntimeError with gradsync's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/sync/gradient_sync.h"
#include "python/ddp_bucket_sync.h"
#include "python/job_connection.h"
#include "python/torch_run_record.h"

namespace py = pybind11;

namespace gradsync {
namespace {

[[noreturn]] void Raise(const absl::Status& status) {
  throw std::runtime_error(std::string(status.message()));
}

// One joined worker and its DDP hook's strategy: the state object's core.
class TorchWorker {
 public:
  TorchWorker(const std::string& sync, double timeout_s,
              const std::vector<std::string>& flags,
              const TorchRunOptions& run) {
    JobConnectionOptions options;
    options.sync = sync;
    options.timeout = absl::Seconds(timeout_s);
    options.flags = flags;
    absl::StatusOr<std::unique_ptr<JobConnection>> job =
        JobConnection::Join(options);
    if (!job.ok()) Raise(job.status());
    job_ = *std::move(job);
    absl::StatusOr<std::unique_ptr<TorchRunRecord>> record =
        TorchRunRecord::Start(run, *job_);
    if (!record.ok()) {
      job_->Fail(record.status());
      Raise(record.status());
    }
    record_ = *std::move(record);
    buckets_ = std::make_unique<DdpBucketSync>(*job_);
    buckets_->SetTrace(record_->trace(), record_->trace_steps());
  }

  ~TorchWorker() {
    if (buckets_ != nullptr) buckets_->Shutdown().IgnoreError();
  }

  // (key, numel) per parameter of the bucket. True when the step ended.
  bool AddBucket(int index, uintptr_t address, int64_t numel,
                 const std::vector<std::pair<int64_t, int64_t>>& params,
                 bool is_last) {
    DdpBucket bucket;
    bucket.index = index;
    bucket.data = reinterpret_cast<float*>(address);
    bucket.numel = numel;
    bucket.is_last = is_last;
    bucket.params.reserve(params.size());
    for (const auto& [key, param_numel] : params)
      bucket.params.push_back(DdpParam{key, param_numel});
    absl::StatusOr<bool> ended = buckets_->Add(bucket);
    absl::Status recorded = ended.status();
    if (recorded.ok() && *ended) {
      recorded =
          record_->RecordStep(buckets_->last_step(), *buckets_->layout());
    }
    if (!recorded.ok()) {
      // The others stop at once ("the job lost worker r: it failed: ...").
      job_->Fail(recorded);
      Raise(recorded);
    }
    return *ended;
  }

  void SetBucketCaps(int64_t first_bucket_bytes, int64_t bucket_bytes) {
    const absl::Status set =
        buckets_->SetCaps({first_bucket_bytes, bucket_bytes});
    if (!set.ok()) Raise(set);
  }

  void SetReadyOrder(std::vector<int64_t> keys) {
    buckets_->SetReadyOrder(std::move(keys));
  }

  py::dict LastStep() const {
    const DdpStepStats& stats = buckets_->last_step();
    py::dict step;
    step["step"] = stats.step;
    step["step_ms"] = stats.step_ms;
    step["sync_wait_ms"] = stats.sync_wait_ms;
    step["bytes_sent"] = stats.strategy.bytes_sent;
    step["bytes_recv"] = stats.strategy.bytes_recv;
    for (const auto& [name, value] : stats.strategy.extra) step[name.c_str()] = value;
    return step;
  }

  void Fail(const std::string& message) {
    job_->Fail(absl::AbortedError(message));
  }

  void SetLoss(double loss) { record_->SetLoss(loss); }

  // The strategy's end, this worker's trace and summary (gathered on worker
  // 0, which writes summary.json), then the job's: as a native worker ends.
  void Close() {
    absl::Status status = buckets_->Shutdown();
    if (status.ok()) {
      status = record_->Finish(buckets_->SummaryJson(), buckets_->TraceFiles());
    }
    if (!status.ok()) {
      job_->Fail(status);
      Raise(status);
    }
    status = job_->Close();
    if (!status.ok()) Raise(status);
  }

  int rank() const { return job_->env().rank; }
  int world_size() const { return job_->env().world_size; }
  int num_servers() const { return job_->env().num_servers; }
  std::string sync() const { return job_->options().sync; }
  std::string layout() const { return buckets_->DescribeLayout(); }
  std::string summary_json() const { return buckets_->SummaryJson(); }

 private:
  std::unique_ptr<JobConnection> job_;
  std::unique_ptr<TorchRunRecord> record_;
  std::unique_ptr<DdpBucketSync> buckets_;
};

}  // namespace
}  // namespace gradsync

PYBIND11_MODULE(_gradsync, module) {
  using gradsync::TorchWorker;
  module.doc() = "gradsync's C++ strategies for PyTorch workers";
  module.def("strategies", &gradsync::GradientSyncRegistry::Names,
             "the --sync names this build has");
  py::class_<TorchWorker>(module, "TorchWorker")
      .def(py::init([](const std::string& sync, double timeout_s,
                       const std::vector<std::string>& flags,
                       const std::string& metrics_dir,
                       const std::string& trace_path, int64_t trace_steps,
                       int64_t warmup_steps, int64_t batch_size,
                       const std::string& model, int64_t total_steps) {
             gradsync::TorchRunOptions run;
             run.metrics_dir = metrics_dir;
             run.trace_path = trace_path;
             run.trace_steps = trace_steps;
             run.warmup_steps = warmup_steps;
             run.batch_size = batch_size;
             run.model = model;
             run.total_steps = total_steps;
             return std::make_unique<TorchWorker>(sync, timeout_s, flags, run);
           }),
           py::arg("sync"), py::arg("timeout_s"), py::arg("flags"),
           py::arg("metrics_dir") = "", py::arg("trace_path") = "",
           py::arg("trace_steps") = 20, py::arg("warmup_steps") = 0,
           py::arg("batch_size") = 0, py::arg("model") = "pytorch",
           py::arg("total_steps") = 0, py::call_guard<py::gil_scoped_release>())
      .def("set_loss", &TorchWorker::SetLoss, py::arg("loss"))
      .def("add_bucket", &TorchWorker::AddBucket, py::arg("index"),
           py::arg("address"), py::arg("numel"), py::arg("params"),
           py::arg("is_last"), py::call_guard<py::gil_scoped_release>())
      .def("set_bucket_caps", &TorchWorker::SetBucketCaps,
           py::arg("first_bucket_bytes"), py::arg("bucket_bytes"))
      .def("set_ready_order", &TorchWorker::SetReadyOrder, py::arg("keys"))
      .def("last_step", &TorchWorker::LastStep)
      .def("fail", &TorchWorker::Fail, py::call_guard<py::gil_scoped_release>())
      .def("close", &TorchWorker::Close,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &TorchWorker::rank)
      .def_property_readonly("world_size", &TorchWorker::world_size)
      .def_property_readonly("num_servers", &TorchWorker::num_servers)
      .def_property_readonly("sync", &TorchWorker::sync)
      .def_property_readonly("layout", &TorchWorker::layout)
      .def_property_readonly("summary_json", &TorchWorker::summary_json);
}
