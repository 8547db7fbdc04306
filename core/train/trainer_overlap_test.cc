// The layer-wise start of the next step (TrainerOptions::
// overlap_next_forward) against a strategy that completes its buckets out of
// order: the trainer waits for exactly the buckets each layer reads, in
// forward order, never lets forward read a parameter whose bucket is not
// final, and ends with the same parameters as a run that waits in Finish.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/sync/gradient_sync.h"
#include "core/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// A strategy whose buckets are "in flight" from BucketReady until they
// complete: their gradients are NaN meanwhile, as a buffer being written
// would be. WaitBucket(b) completes buckets in its own order (even ones
// first, then odd ones: neither the order they were handed over in nor the
// order forward reads them) up to b; Finish completes the rest.
class OutOfOrderSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout& layout, Device&,
                     const SyncBuffers& buffers) override {
    buckets_ = layout.buckets();
    buffers_ = buffers;
    const int n = static_cast<int>(buckets_.size());
    for (int b = 0; b < n; b += 2) order_.push_back(b);
    for (int b = 1; b < n; b += 2) order_.push_back(b);
    final_.assign(n, true);
    saved_.assign(n, {});
    return absl::OkStatus();
  }

  void BucketReady(int bucket) override {
    if (!in_flight_) {
      in_flight_ = true;
      final_.assign(buckets_.size(), false);
      waits.emplace_back();
    }
    const Bucket& span = buckets_[bucket];
    float* grads = buffers_.grads + span.offset;
    saved_[bucket].assign(grads, grads + span.numel);
    for (int64_t i = 0; i < span.numel; ++i) grads[i] = std::nanf("");
  }

  absl::Status WaitBucket(int bucket) override {
    if (!in_flight_) {
      return absl::FailedPreconditionError(
          absl::StrCat("WaitBucket(", bucket, ") with no step in flight"));
    }
    waits.back().push_back(bucket);
    for (int b : order_) {
      Complete(b);
      if (b == bucket) break;
    }
    return absl::OkStatus();
  }

  absl::Status Finish(StepStats& stats) override {
    for (int b : order_) Complete(b);
    in_flight_ = false;
    ++finishes;
    stats.bytes_sent = 1;
    return absl::OkStatus();
  }

  // How long each bucket's completion takes, as its transfer would (0: none).
  absl::Duration transfer_time;

  // Whether forward may read the parameters of `bucket`.
  bool final(int bucket) const { return final_[bucket]; }
  bool in_flight() const { return in_flight_; }

  // Per step, the buckets the trainer waited for, in order.
  std::vector<std::vector<int>> waits;
  int finishes = 0;

 private:
  void Complete(int bucket) {
    if (final_[bucket]) return;
    absl::SleepFor(transfer_time);
    const Bucket& span = buckets_[bucket];
    std::memcpy(buffers_.grads + span.offset, saved_[bucket].data(),
                span.numel * sizeof(float));
    final_[bucket] = true;
  }

  std::vector<Bucket> buckets_;
  SyncBuffers buffers_;
  std::vector<int> order_;
  std::vector<bool> final_;
  std::vector<std::vector<float>> saved_;
  bool in_flight_ = false;
};

// The MLP, with every request forward makes for its parameters checked on
// the way back: each bucket waited for once per step, the first time a
// layer reads it, and every parameter final and finite when forward reads it.
class CheckingModel : public Model {
 public:
  CheckingModel(std::unique_ptr<Model> inner, const OutOfOrderSync& sync)
      : inner_(std::move(inner)), sync_(sync) {}

  std::string name() const override { return inner_->name(); }
  std::vector<ParamSpec> ParamSpecs() const override {
    return inner_->ParamSpecs();
  }
  int input_dim() const override { return inner_->input_dim(); }
  int num_classes() const override { return inner_->num_classes(); }
  absl::Status Bind(Device& device, const ParamLayout& layout, float* params,
                    float* grads, int max_batch) override {
    layout_ = &layout;
    params_ = params;
    return inner_->Bind(device, layout, params, grads, max_batch);
  }
  void InitParams(uint64_t seed, const ParamLayout& layout,
                  float* host_params) const override {
    inner_->InitParams(seed, layout, host_params);
  }
  absl::Status ForwardBackward(const float* inputs, const int32_t* labels,
                               int batch, float* device_loss,
                               const GradReadyCallback& ready) override {
    return inner_->ForwardBackward(inputs, labels, batch, device_loss, ready);
  }
  absl::Status Forward(const float* inputs, int batch,
                       const float** logits) override {
    return inner_->Forward(inputs, batch, logits);
  }

  absl::Status ForwardBackwardLayerwise(
      const float* inputs, const int32_t* labels, int batch, float* device_loss,
      const ParamsNeededCallback& needed,
      const GradReadyCallback& ready) override {
    const bool in_flight = sync_.in_flight();
    std::vector<bool> asked(layout_->buckets().size(), false);
    auto checked = [&](int first, int end) -> absl::Status {
      const size_t waits_before =
          sync_.waits.empty() ? 0 : sync_.waits.back().size();
      std::vector<int> expected;
      for (int p = first; p < end; ++p) {
        const int bucket = layout_->params()[p].bucket;
        if (in_flight && !asked[bucket]) expected.push_back(bucket);
        asked[bucket] = true;
      }
      absl::Status status = needed(first, end);
      if (!status.ok()) return status;
      std::vector<int> waited;
      if (in_flight) {
        waited.assign(sync_.waits.back().begin() + waits_before,
                      sync_.waits.back().end());
      }
      if (waited != expected) ++wrong_waits;
      for (int p = first; p < end; ++p) {
        const ParamInfo& info = layout_->params()[p];
        if (!sync_.final(info.bucket)) ++read_before_final;
        for (int64_t i = 0; i < info.numel; ++i) {
          if (!std::isfinite(params_[info.offset + i])) {
            ++read_not_finite;
            break;
          }
        }
      }
      ++requests;
      return absl::OkStatus();
    };
    return inner_->ForwardBackwardLayerwise(inputs, labels, batch, device_loss,
                                            checked, ready);
  }

  int requests = 0;
  int wrong_waits = 0;        // a request that waited for other buckets
  int read_before_final = 0;  // a parameter read while its bucket was not
  int read_not_finite = 0;    // an update made from an unfinished gradient

 private:
  std::unique_ptr<Model> inner_;
  const OutOfOrderSync& sync_;
  const ParamLayout* layout_ = nullptr;
  float* params_ = nullptr;
};

struct TrainedRun {
  absl::Status status;
  std::vector<float> params;
  std::vector<std::vector<int>> waits;
  int finishes = 0;
  int requests = 0, wrong_waits = 0, read_before_final = 0, read_not_finite = 0;
  int num_buckets = 0;
};

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::vector<float> floats(bytes.size() / sizeof(float));
  std::memcpy(floats.data(), bytes.data(), floats.size() * sizeof(float));
  return floats;
}

// The MLP, or with `cnn` the small CNN on 8×8 images, or with `resnet` too
// a small ResNet with batch norm and a downsampling block (both ask for their
// parameters layer by layer through BoundedMemoryModel).
TrainedRun Train(bool overlap, const std::string& optimizer, int64_t steps,
                 const std::string& name, bool cnn = false, bool resnet = false,
                 absl::Duration transfer_time = absl::ZeroDuration()) {
  SyntheticOptions data_options;
  data_options.train_size = 64;
  data_options.test_size = 16;
  data_options.feature_dim = cnn ? 64 : 8;
  data_options.num_classes = 3;
  DatasetPair data = *MakeSynthetic(data_options);
  std::unique_ptr<Model> inner;
  if (cnn && resnet) {
    ResNetOptions resnet_options;
    resnet_options.input = ImageInput{1, 8, 8, 3};
    resnet_options.blocks = {2, 1};
    resnet_options.widths = {3, 4};
    inner = *CreateResNet(resnet_options);
  } else if (cnn) {
    CnnOptions cnn_options;
    cnn_options.input = ImageInput{1, 8, 8, 3};
    cnn_options.conv1_channels = 2;
    cnn_options.conv2_channels = 3;
    cnn_options.hidden = 4;
    inner = *CreateCnn(cnn_options);
  } else {
    MlpOptions mlp;
    mlp.widths = {8, 6, 5, 3};
    inner = *CreateMlp(mlp);
  }
  OutOfOrderSync sync;
  sync.transfer_time = transfer_time;
  CheckingModel model(std::move(inner), sync);
  std::unique_ptr<Device> device = *CreateDevice(DeviceOptions{});

  TrainerOptions options;
  options.batch_size = 8;
  options.epochs = 2;  // 8 steps an epoch: an epoch's end drains
  options.max_steps = steps;
  options.evaluate = false;
  options.progress = false;
  options.bucket_mb = 64.0 / (1 << 20);  // 64 bytes: a bucket per tensor or so
  options.timeout = absl::Seconds(10);
  options.overlap_next_forward = overlap;
  options.optimizer.kind = optimizer;
  options.optimizer.lr = 0.05f;
  options.optimizer.momentum = 0.9f;
  options.optimizer.weight_decay = 0.01f;
  options.dump_params = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  options.metrics_dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);

  TrainedRun run;
  run.status = RunTraining(options, ProcessIdentity{}, model, data, *device,
                           sync, nullptr)
                   .status();
  run.params = ReadFloats(options.dump_params + ".worker0");
  run.waits = sync.waits;
  run.finishes = sync.finishes;
  run.requests = model.requests;
  run.wrong_waits = model.wrong_waits;
  run.read_before_final = model.read_before_final;
  run.read_not_finite = model.read_not_finite;
  return run;
}

TEST(TrainerOverlapTest, WaitsPerBucketInForwardOrderAndReadsOnlyFinalOnes) {
  for (const std::string model : {"mlp", "cnn", "resnet"}) {
    SCOPED_TRACE(model);
    const TrainedRun run = Train(/*overlap=*/true, "sgd", 10, "order_" + model,
                                 model != "mlp", model == "resnet");
    ASSERT_TRUE(run.status.ok()) << run.status;
    EXPECT_EQ(run.finishes, 10);
    ASSERT_EQ(run.waits.size(), 10u);
    // Each step's buckets waited for once each, in forward order: the first
    // layers sit in the last bucket. Step 7 is the first epoch's last and step
    // 9 the run's: an epoch's end drains in the same order.
    std::vector<int> forward_order;
    for (int b = static_cast<int>(run.waits.front().size()) - 1; b >= 0; --b)
      forward_order.push_back(b);
    ASSERT_GT(forward_order.size(), 2u);
    for (size_t step = 0; step < run.waits.size(); ++step) {
      EXPECT_EQ(run.waits[step], forward_order) << "step " << step;
    }
    EXPECT_GT(run.requests, 0);
    EXPECT_EQ(run.wrong_waits, 0);
    EXPECT_EQ(run.read_before_final, 0);
    EXPECT_EQ(run.read_not_finite, 0);
  }
}

TEST(TrainerOverlapTest, SameParametersAsWaitingInFinish) {
  for (const std::string model : {"mlp", "cnn", "resnet"})
    for (const std::string optimizer : {"sgd", "adam"}) {
      const std::string name = absl::StrCat(optimizer, "_", model);
      const bool cnn = model != "mlp", resnet = model == "resnet";
      const TrainedRun overlapped =
          Train(/*overlap=*/true, optimizer, 11, "on_" + name, cnn, resnet);
      const TrainedRun whole =
          Train(/*overlap=*/false, optimizer, 11, "off_" + name, cnn, resnet);
      ASSERT_TRUE(overlapped.status.ok()) << overlapped.status;
      ASSERT_TRUE(whole.status.ok()) << whole.status;
      // Without overlap nothing waits per bucket; Finish completes each step.
      for (const std::vector<int>& step : whole.waits)
        EXPECT_TRUE(step.empty());
      EXPECT_EQ(whole.finishes, 11);
      ASSERT_EQ(overlapped.params.size(), whole.params.size());
      ASSERT_FALSE(overlapped.params.empty());
      // Bit for bit: the optimizer's update is elementwise, so bucket by
      // bucket it is the same arithmetic.
      EXPECT_EQ(0, std::memcmp(overlapped.params.data(), whole.params.data(),
                               whole.params.size() * sizeof(float)))
          << name;
    }
}

// One metrics line per step, written once its synchronization is final:
// the strategy's figures (from its Finish) land on their own step.
TEST(TrainerOverlapTest, EveryStepHasItsLineWithItsStrategyFigures) {
  const TrainedRun run = Train(/*overlap=*/true, "sgd", 5, "lines");
  ASSERT_TRUE(run.status.ok()) << run.status;
  std::ifstream in(
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/lines/worker0.jsonl"));
  ASSERT_TRUE(in.good());
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    if (line.find("\"step_ms\"") == std::string::npos) continue;
    EXPECT_THAT(line, HasSubstr(absl::StrCat("\"step\":", steps)));
    EXPECT_THAT(line, HasSubstr("\"bytes_sent\":1"));
    ++steps;
  }
  EXPECT_EQ(steps, 5);
}

// Exposed communication is a part of the step time, in every step line and
// in the summary's means, where an epoch's end drains a step between two
// steps' lines: the drain's wait is counted in the step that follows it, in
// both figures. Steps 5 to 11 are measured (the default warm-up), and step 8
// is the second epoch's first.
TEST(TrainerOverlapTest, ExposedCommunicationIsPartOfTheStepAcrossAnEpochsEnd) {
  const absl::Duration transfer = absl::Milliseconds(2);
  const TrainedRun run = Train(/*overlap=*/true, "sgd", 12, "exposed_part",
                               /*cnn=*/false, /*resnet=*/false, transfer);
  ASSERT_TRUE(run.status.ok()) << run.status;
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/exposed_part");
  std::ifstream lines(dir + "/worker0.jsonl");
  ASSERT_TRUE(lines.good());
  std::string line;
  std::vector<nlohmann::json> steps;
  while (std::getline(lines, line)) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == "step") steps.push_back(record);
  }
  ASSERT_EQ(steps.size(), 12u);
  const double transfer_ms = absl::ToDoubleMilliseconds(transfer);
  for (size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const double step_ms = steps[step]["step_ms"];
    const double wait_ms = steps[step]["sync_wait_ms"];
    EXPECT_LE(wait_ms, step_ms);
    // Every step after the first holds one wait for the synchronization of
    // the step before it (at least one bucket's transfer): in its forward,
    // or, for step 8, at the epoch's end before it began. Step 0 holds none.
    if (step == 0) {
      EXPECT_LT(wait_ms, transfer_ms);
    } else {
      EXPECT_GE(wait_ms, transfer_ms);
    }
  }
  std::ifstream summary_file(dir + "/summary.json");
  ASSERT_TRUE(summary_file.good());
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_LE(summary["sync_wait_ms"].get<double>(),
            summary["step_ms"].get<double>());
  EXPECT_EQ(summary["ranks"][0]["measured_steps"], 7);
}

}  // namespace
}  // namespace gradsync
