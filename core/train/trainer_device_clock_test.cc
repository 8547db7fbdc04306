// The trainer takes a step's compute time, exposed communication and trace
// spans from the device's clock (core/device/device_clock.h), not from the
// host's: a CPU device given a scripted clock, on which every mark lands
// 100 ms after the one before, must produce exactly the scripted times,
// whatever the host's clock says.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/device/device_clock.h"
#include "core/model/model.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "core/train/trainer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

constexpr double kMarkSpacingMs = 100;

// Every Record lands kMarkSpacingMs after the previous one on the "device",
// as if each stretch of queued work took that long.
class ScriptedClock : public DeviceClock {
 public:
  explicit ScriptedClock(int marks) : at_(marks, -1) {}
  int marks() const override { return static_cast<int>(at_.size()); }
  absl::Status Record(int index) override {
    absl::Status valid = CheckMarkIndex(index, marks());
    if (!valid.ok()) return valid;
    at_[index] = kMarkSpacingMs * records_++;
    return absl::OkStatus();
  }
  absl::StatusOr<double> ElapsedMs(int from, int to) override {
    for (int index : {from, to}) {
      absl::Status valid = CheckMarkIndex(index, marks());
      if (!valid.ok()) return valid;
      if (at_[index] < 0) return MarkNotRecorded(index);
    }
    return at_[to] - at_[from];
  }

 private:
  std::vector<double> at_;
  int64_t records_ = 0;
};

// A CPU device whose clock is scripted; everything else is the CPU's.
class ScriptedClockDevice : public Device {
 public:
  explicit ScriptedClockDevice(std::unique_ptr<Device> cpu)
      : cpu_(std::move(cpu)) {}

  absl::StatusOr<std::unique_ptr<DeviceClock>> CreateClock(int marks) override {
    return std::unique_ptr<DeviceClock>(std::make_unique<ScriptedClock>(marks));
  }

  DeviceType type() const override { return cpu_->type(); }
  std::string name() const override { return cpu_->name(); }
  absl::StatusOr<void*> AllocateBytes(size_t bytes) override {
    return cpu_->AllocateBytes(bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToHost(dst, src, bytes);
  }
  void CopyOnDevice(float* dst, const float* src, int64_t count) override {
    cpu_->CopyOnDevice(dst, src, count);
  }
  absl::Status Synchronize() override { return cpu_->Synchronize(); }
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    cpu_->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void AddRowBias(float* y, const float* bias, int rows, int cols) override {
    cpu_->AddRowBias(y, bias, rows, cols);
  }
  void SumRows(const float* x, float* out, int rows, int cols) override {
    cpu_->SumRows(x, out, rows, cols);
  }
  void ReluForward(float* x, int64_t count) override {
    cpu_->ReluForward(x, count);
  }
  void ReluBackward(const float* y, float* dy, int64_t count) override {
    cpu_->ReluBackward(y, dy, count);
  }
  void ReluBackwardOfSum(const float* y, const InputTensor& x,
                         const InputTensor& dy, float* out,
                         int64_t count) override {
    cpu_->ReluBackwardOfSum(y, x, dy, out, count);
  }
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows,
                           int classes, float* dlogits, float* loss) override {
    cpu_->SoftmaxCrossEntropy(logits, labels, rows, classes, dlogits, loss);
  }
  void Scale(float* x, int64_t count, float alpha) override {
    cpu_->Scale(x, count, alpha);
  }
  void Fill(float* x, int64_t count, float value) override {
    cpu_->Fill(x, count, value);
  }
  void Im2Col(const float* input, const ConvGeometry& g,
              float* columns) override {
    cpu_->Im2Col(input, g, columns);
  }
  void Col2Im(const float* columns, const ConvGeometry& g,
              float* input_grad) override {
    cpu_->Col2Im(columns, g, input_grad);
  }
  void BatchNormForwardTraining(const InputTensor& x, int64_t rows,
                                int channels, int64_t plane, const float* gamma,
                                const float* beta, float momentum,
                                float epsilon, float* y, float* saved_mean,
                                float* saved_inv_std, float* running_mean,
                                float* running_var,
                                const BatchNormEpilogue& epilogue) override {
    cpu_->BatchNormForwardTraining(
        x, rows, channels, plane, gamma, beta, momentum, epsilon, y, saved_mean,
        saved_inv_std, running_mean, running_var, epilogue);
  }
  void BatchNormForwardInference(const InputTensor& x, int64_t rows,
                                 int channels, int64_t plane,
                                 const float* gamma, const float* beta,
                                 const float* running_mean,
                                 const float* running_var, float epsilon,
                                 float* y,
                                 const BatchNormEpilogue& epilogue) override {
    cpu_->BatchNormForwardInference(x, rows, channels, plane, gamma, beta,
                                    running_mean, running_var, epsilon, y,
                                    epilogue);
  }
  void BatchNormBackward(const InputTensor& x, const InputTensor& dy,
                         int64_t rows, int channels, int64_t plane,
                         const float* gamma, const float* saved_mean,
                         const float* saved_inv_std, float* dx, float* dgamma,
                         float* dbeta, const float* relu_output,
                         uint16_t* dx_bf16) override {
    cpu_->BatchNormBackward(x, dy, rows, channels, plane, gamma, saved_mean,
                            saved_inv_std, dx, dgamma, dbeta, relu_output,
                            dx_bf16);
  }
  void MaxPoolForward(const float* x, const PoolGeometry& g, float* y,
                      int32_t* where) override {
    cpu_->MaxPoolForward(x, g, y, where);
  }
  void MaxPoolBackward(const float* dy, const int32_t* where,
                       const PoolGeometry& g, float* dx) override {
    cpu_->MaxPoolBackward(dy, where, g, dx);
  }
  void GlobalAvgPoolForward(const float* x, int batch, int spatial,
                            int channels, ActivationLayout layout,
                            float* y) override {
    cpu_->GlobalAvgPoolForward(x, batch, spatial, channels, layout, y);
  }
  void GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                             int channels, ActivationLayout layout,
                             float* dx) override {
    cpu_->GlobalAvgPoolBackward(dy, batch, spatial, channels, layout, dx);
  }
  void Add(float* y, const float* x, int64_t count) override {
    cpu_->Add(y, x, count);
  }
  absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CreateConvolution(
      const ConvGeometry& g, int out_channels) override {
    return cpu_->CreateConvolution(g, out_channels);
  }
  void SgdUpdate(float* params, const float* grads, float* velocity,
                 int64_t count, float lr, float momentum,
                 float weight_decay) override {
    cpu_->SgdUpdate(params, grads, velocity, count, lr, momentum, weight_decay);
  }
  void AdamUpdate(float* params, const float* grads, float* m, float* v,
                  int64_t count, float lr, const AdamState& state,
                  float weight_decay) override {
    cpu_->AdamUpdate(params, grads, m, v, count, lr, state, weight_decay);
  }

 private:
  std::unique_ptr<Device> cpu_;
};

// A strategy with nothing to do, that counts the buckets it is given.
class NoSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout& layout, Device&,
                     const SyncBuffers&) override {
    buckets = static_cast<int>(layout.buckets().size());
    tensors = static_cast<int>(layout.params().size());
    return absl::OkStatus();
  }
  void BucketReady(int) override {}
  absl::Status Finish(StepStats&) override { return absl::OkStatus(); }

  int buckets = 0;
  int tensors = 0;
};

struct TrainedRun {
  std::vector<nlohmann::json> steps;  // the "step" lines of worker0.jsonl
  nlohmann::json trace;               // the merged --trace file, if asked
  int buckets = 0;
  int tensors = 0;
};

TrainedRun Train(const std::string& name, bool traced) {
  TrainedRun run;
  SyntheticOptions data_options;
  data_options.train_size = 64;
  data_options.test_size = 16;
  data_options.feature_dim = 8;
  data_options.num_classes = 3;
  DatasetPair data = *MakeSynthetic(data_options);
  MlpOptions mlp;
  mlp.widths = {8, 6, 5, 3};
  std::unique_ptr<Model> model = *CreateMlp(mlp);
  ScriptedClockDevice device(*CreateDevice(DeviceOptions{}));
  TrainerOptions options;
  options.batch_size = 8;
  options.epochs = 1;
  options.max_steps = 3;
  options.evaluate = false;
  options.progress = false;
  options.bucket_mb = 64.0 / (1 << 20);  // several buckets
  options.timeout = absl::Seconds(10);
  // The exposed wait of a step that waits in Finish.
  options.overlap_next_forward = false;
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  options.metrics_dir = dir;
  if (traced) {
    options.trace_path = dir + "/trace.json";
    options.trace_steps = 1;
  }
  NoSync sync;
  auto result = RunTraining(options, ProcessIdentity{}, *model, data, device,
                            sync, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return run;
  run.buckets = sync.buckets;
  run.tensors = sync.tensors;
  std::ifstream lines(result->metrics_path);
  std::string line;
  while (std::getline(lines, line)) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == "step") run.steps.push_back(record);
  }
  if (traced) {
    std::ifstream trace(options.trace_path);
    std::stringstream text;
    text << trace.rdbuf();
    run.trace = nlohmann::json::parse(text.str());
  }
  return run;
}

// Between forward's start and backward's end the trainer records one mark
// per bucket; the synchronized mark comes one mark after backward's end.
TEST(TrainerDeviceClockTest, ComputeAndExposedWaitComeFromTheDevicesClock) {
  const TrainedRun run = Train("untraced", /*traced=*/false);
  ASSERT_EQ(run.steps.size(), 3u);
  ASSERT_GT(run.buckets, 1);
  for (const nlohmann::json& step : run.steps) {
    EXPECT_NEAR(step["compute_ms"].get<double>(),
                kMarkSpacingMs * (run.buckets + 1), 1e-6)
        << step.dump();
    EXPECT_NEAR(step["sync_wait_ms"].get<double>(), kMarkSpacingMs, 1e-6)
        << step.dump();
  }
}

// A traced step also marks every tensor's gradient, and its spans are the
// device's: forward+backward lasts as long as compute_ms, each tensor's
// backward one mark spacing, the exposed wait one spacing.
TEST(TrainerDeviceClockTest, TracedStepsSpansAreTheDevicesTimes) {
  const TrainedRun run = Train("traced", /*traced=*/true);
  ASSERT_EQ(run.steps.size(), 3u);
  const int marks_in_compute = run.tensors + run.buckets + 1;
  EXPECT_NEAR(run.steps[0]["compute_ms"].get<double>(),
              kMarkSpacingMs * marks_in_compute, 1e-6);
  // Untraced steps record no per-tensor marks.
  EXPECT_NEAR(run.steps[1]["compute_ms"].get<double>(),
              kMarkSpacingMs * (run.buckets + 1), 1e-6);
  ASSERT_TRUE(run.trace.contains("traceEvents")) << run.trace.dump();
  int tensor_spans = 0;
  bool saw_compute = false, saw_wait = false;
  const int64_t spacing_us = static_cast<int64_t>(kMarkSpacingMs * 1000);
  for (const nlohmann::json& event : run.trace["traceEvents"]) {
    if (!event.contains("cat") || !event.contains("dur")) continue;
    const std::string category = event["cat"];
    const int64_t duration = event["dur"];
    if (category == "compute") {
      saw_compute = true;
      EXPECT_NEAR(duration, marks_in_compute * spacing_us, 1);
    } else if (category == "wait") {
      saw_wait = true;
      EXPECT_NEAR(duration, spacing_us, 1);
    } else if (category == "backward") {
      ++tensor_spans;
      // A tensor that completes a bucket also has the bucket's mark before
      // the next tensor's.
      EXPECT_TRUE(std::abs(duration - spacing_us) <= 1 ||
                  std::abs(duration - 2 * spacing_us) <= 1)
          << event.dump();
    }
  }
  EXPECT_TRUE(saw_compute);
  EXPECT_TRUE(saw_wait);
  EXPECT_EQ(tensor_spans, run.tensors);
}

}  // namespace
}  // namespace gradsync
