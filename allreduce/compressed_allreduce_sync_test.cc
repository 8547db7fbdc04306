// --compression through the ring family's GradientSync, N = 2, 3, 4 ranks as
// threads: fp16/bf16 rings sum 16-bit values within the rounding bound and
// agree on every rank; top-k and onebit give exactly the rank-order sum of
// every rank's decoded encoding; random-k the average on the shared indices;
// row-sparse buckets gather the exact rows (or fall back to the dense ring);
// a resumed run continues the error-feedback residual exactly; methods an
// algorithm does not carry are refused in its factory.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "allreduce/allreduce_sync.h"
#include "allreduce/sync_test_context.h"
#include "allreduce/transport/test_cluster.h"
#include "core/base/status_macros.h"
#include "core/device/device.h"
#include "core/sync/compression.h"
#include "core/sync/error_feedback.h"
#include "core/sync/gradient_sync.h"
#include "core/sync/param_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

// The factories' flag (allreduce/allreduce_flags.cc), set here as a user would.
ABSL_DECLARE_FLAG(std::string, ring_row_sparse);

namespace gradsync {
namespace {

using ::testing::HasSubstr;

// Integer-valued, so sums of integers and their averages over N = 2 and 4
// are exact in float32; `fraction` adds a part that 16 bits cannot hold.
float Gradient(int step, int rank, int64_t i, bool fraction = false) {
  const float whole =
      static_cast<float>((i * 7 + rank * 13 + step * 5) % 23 - 11);
  return fraction ? whole * 0.37f + 0.001f * static_cast<float>(i % 97) : whole;
}

absl::StatusOr<ParamLayout> DenseLayout() {
  return ParamLayout::Create({{"fc1.weight", {200, 7}},
                              {"fc1.bias", {200}},
                              {"fc2.weight", {10, 200}},
                              {"fc2.bias", {10}}},
                             /*bucket_bytes=*/4096);
}

SyncContext ContextFor(TransportTestCluster& cluster, int rank,
                       const std::string& compression, absl::Duration timeout) {
  SyncContext context = TestSyncContext(cluster, rank, timeout);
  context.compression = CompressionSpec::Parse(compression).value();
  context.compression_seed = 1234;
  return context;
}

// What one run gives back: every rank's gradients after every step, its
// StepStats and its summary.
struct RankRun {
  std::vector<std::vector<float>> grads;  // [step][element]
  std::vector<StepStats> stats;
  std::string summary;
};

using GradientFn = std::function<float(int step, int rank, int64_t i)>;

// Runs `steps` steps of --sync=`sync` with `compression` on n ranks from
// `schedule` (start step, checkpoints).
absl::StatusOr<std::vector<RankRun>> RunJob(
    const std::string& sync_name, int n, const std::string& compression,
    const ParamLayout& layout, int steps, const GradientFn& gradient,
    TrainingSchedule schedule = TrainingSchedule(),
    absl::Duration timeout = absl::Seconds(30)) {
  ASSIGN_OR_RETURN(auto cluster,
                   TransportTestCluster::Start(n, "ring-test", timeout));
  const int64_t total = layout.total_numel();
  std::vector<RankRun> runs(n);
  std::vector<absl::Status> results = cluster->RunOnEveryRank([&](int rank) {
    ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                     CreateDevice(DeviceOptions{}));
    ASSIGN_OR_RETURN(float* grads, device->Allocate<float>(total));
    ASSIGN_OR_RETURN(float* params, device->Allocate<float>(total));
    ASSIGN_OR_RETURN(
        std::unique_ptr<GradientSync> sync,
        GradientSyncRegistry::Create(
            sync_name, ContextFor(*cluster, rank, compression, timeout)));
    sync->SetTrainingSchedule(schedule);
    RETURN_IF_ERROR(sync->Setup(layout, *device, SyncBuffers{grads, params}));
    for (int step = 0; step < steps; ++step) {
      const int global = static_cast<int>(schedule.start_step) + step;
      for (int64_t i = 0; i < total; ++i) grads[i] = gradient(global, rank, i);
      for (const Bucket& bucket : layout.buckets()) {
        sync->BucketReady(bucket.index);
      }
      StepStats stats;
      RETURN_IF_ERROR(sync->Finish(stats));
      runs[rank].grads.emplace_back(grads, grads + total);
      runs[rank].stats.push_back(stats);
    }
    runs[rank].summary = sync->SummaryJson();
    return sync->Shutdown();
  });
  // Every rank's error: the one that failed first is not always rank 0.
  std::string errors;
  for (int rank = 0; rank < n; ++rank) {
    if (!results[rank].ok()) {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", "rank ", rank, ": ",
                      results[rank].message());
    }
  }
  if (!errors.empty()) return absl::UnknownError(errors);
  return runs;
}

// What every rank's own compressor sends for each bucket, step after step,
// with its own residual: the test's model of each worker.
struct WorkerModel {
  WorkerModel(const std::string& compression, int64_t total)
      : compressor(CompressionSpec::Parse(compression).value(), 1234),
        residual(total, 0.0f) {}
  std::vector<EncodedBucket> Encode(const ParamLayout& layout,
                                    const std::vector<float>& gradient,
                                    int step) {
    std::vector<EncodedBucket> out;
    for (const Bucket& bucket : layout.buckets()) {
      EncodedBucket encoded;
      absl::Status status = compressor.Encode(
          absl::MakeConstSpan(gradient).subspan(bucket.offset, bucket.numel),
          absl::MakeSpan(residual).subspan(bucket.offset, bucket.numel), step,
          bucket.index, &encoded);
      EXPECT_TRUE(status.ok()) << status;
      out.push_back(std::move(encoded));
    }
    return out;
  }
  Compressor compressor;
  std::vector<float> residual;
};

class GatheredMethodTest
    : public testing::TestWithParam<std::tuple<int, std::string>> {};

// Top-k and onebit: the all-gather leaves exactly sum_r D(C_r) (rank order)
// times 1/N on every rank, bit for bit, and each link carries every rank's
// encoding but one.
TEST_P(GatheredMethodTest, EveryRankGetsTheRankOrderSumOfTheDecodedEncodings) {
  const int n = std::get<0>(GetParam());
  const std::string method = std::get<1>(GetParam());
  auto layout = DenseLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->total_numel();
  const int steps = 3;
  GradientFn gradient = [](int step, int rank, int64_t i) {
    return Gradient(step, rank, i, /*fraction=*/true);
  };
  auto runs = RunJob("ring", n, method, *layout, steps, gradient);
  ASSERT_TRUE(runs.ok()) << runs.status();

  std::vector<WorkerModel> workers;
  for (int r = 0; r < n; ++r) workers.emplace_back(method, total);
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<EncodedBucket>> sent(n);
    for (int r = 0; r < n; ++r) {
      std::vector<float> g(total);
      for (int64_t i = 0; i < total; ++i) g[i] = gradient(step, r, i);
      sent[r] = workers[r].Encode(*layout, g, step);
    }
    std::vector<float> want(total, 0.0f);
    int64_t blob_bytes_total = 0;
    std::vector<int64_t> blob_bytes(n, 0);
    for (const Bucket& bucket : layout->buckets()) {
      absl::Span<float> span =
          absl::MakeSpan(want).subspan(bucket.offset, bucket.numel);
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(AddDecoded(sent[r][bucket.index], span).ok());
        blob_bytes[r] += SerializedBytes(sent[r][bucket.index]);
      }
      for (float& v : span) v *= 1.0f / n;
    }
    for (int r = 0; r < n; ++r) blob_bytes_total += blob_bytes[r];
    for (int rank = 0; rank < n; ++rank) {
      const std::vector<float>& got = (*runs)[rank].grads[step];
      for (int64_t i = 0; i < total; ++i) {
        ASSERT_EQ(got[i], want[i]) << method << " N=" << n << " rank " << rank
                                   << " step " << step << " element " << i;
      }
      // Rank r forwards every blob but its right neighbour's.
      const int64_t want_sent = blob_bytes_total - blob_bytes[(rank + 1) % n];
      const int64_t want_received = blob_bytes_total - blob_bytes[rank];
      EXPECT_EQ((*runs)[rank].stats[step].bytes_sent, want_sent)
          << "rank " << rank << " step " << step;
      EXPECT_EQ((*runs)[rank].stats[step].bytes_recv, want_received)
          << "rank " << rank << " step " << step;
    }
  }
  nlohmann::json summary = nlohmann::json::parse((*runs)[0].summary);
  EXPECT_EQ(summary["compression"], method);
}

INSTANTIATE_TEST_SUITE_P(
    Methods, GatheredMethodTest,
    testing::Combine(testing::Values(2, 3, 4),
                     testing::Values("topk:0.05", "onebit")),
    [](const testing::TestParamInfo<std::tuple<int, std::string>>& info) {
      std::string method = std::get<1>(info.param);
      method = method.substr(0, method.find(':'));
      return absl::StrCat("N", std::get<0>(info.param), "_", method);
    });

class HalfPrecisionTest
    : public testing::TestWithParam<std::tuple<int, std::string>> {};

// fp16/bf16: within (N + 1) roundings of the magnitudes summed, every value
// a 16-bit value, the same on every rank, and half the dense ring's bytes.
TEST_P(HalfPrecisionTest, SumIsWithinTheRoundingBoundAndTheSameEverywhere) {
  const int n = std::get<0>(GetParam());
  const std::string method = std::get<1>(GetParam());
  const bool fp16 = method == "fp16";
  auto layout = DenseLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->total_numel();
  GradientFn gradient = [](int step, int rank, int64_t i) {
    return Gradient(step, rank, i, /*fraction=*/true);
  };
  auto runs = RunJob("ring", n, method, *layout, 2, gradient);
  ASSERT_TRUE(runs.ok()) << runs.status();
  auto dense = RunJob("ring", n, "none", *layout, 1, gradient);
  ASSERT_TRUE(dense.ok()) << dense.status();
  // A rounding to nearest moves a value by at most half a unit in the last
  // place: 2^-11 (fp16, 10 fraction bits) or 2^-8 (bf16, 7) relative.
  const double unit = fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  for (int step = 0; step < 2; ++step) {
    for (int64_t i = 0; i < total; ++i) {
      double exact = 0;
      double magnitude = 0;
      for (int r = 0; r < n; ++r) {
        exact += gradient(step, r, i);
        magnitude += std::fabs(gradient(step, r, i));
      }
      exact /= n;
      magnitude /= n;
      const float got = (*runs)[0].grads[step][i];
      ASSERT_LE(std::fabs(got - exact), (n + 1) * unit * magnitude + 1e-30)
          << method << " N=" << n << " step " << step << " element " << i;
      const float rounded = fp16 ? HalfToFloat(FloatToHalf(got))
                                 : Bfloat16ToFloat(FloatToBfloat16(got));
      ASSERT_EQ(got, rounded) << "not a 16-bit value at element " << i;
      for (int rank = 1; rank < n; ++rank) {
        ASSERT_EQ((*runs)[rank].grads[step][i], got)
            << "rank " << rank << " element " << i;
      }
    }
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_EQ((*runs)[rank].stats[step].bytes_sent * 2,
                (*dense)[rank].stats[0].bytes_sent);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods, HalfPrecisionTest,
    testing::Combine(testing::Values(2, 3, 4), testing::Values("fp16", "bf16")),
    [](const testing::TestParamInfo<std::tuple<int, std::string>>& info) {
      return absl::StrCat("N", std::get<0>(info.param), "_",
                          std::get<1>(info.param));
    });

// A bucket larger than the ring's staging chunk (256 KiB): the 16-bit
// reduce-scatter decodes, adds and re-encodes chunk by chunk, and the
// all-gather decodes values that arrive split across reads.
TEST(HalfPrecisionChunkTest, BucketsLargerThanAChunkAgreeEverywhere) {
  auto layout = ParamLayout::Create({{"big", {300001}}}, /*bucket_bytes=*/0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->total_numel();
  GradientFn gradient = [](int step, int rank, int64_t i) {
    return Gradient(step, rank, i, /*fraction=*/true);
  };
  for (int n : {2, 3}) {
    auto runs = RunJob("ring", n, "fp16", *layout, 1, gradient);
    ASSERT_TRUE(runs.ok()) << runs.status();
    const double unit = std::ldexp(1.0, -11);
    for (int64_t i = 0; i < total; ++i) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < n; ++r) {
        exact += gradient(0, r, i);
        magnitude += std::fabs(gradient(0, r, i));
      }
      const float got = (*runs)[0].grads[0][i];
      ASSERT_LE(std::fabs(got - exact / n), (n + 1) * unit * magnitude / n)
          << "N=" << n << " element " << i;
      for (int rank = 1; rank < n; ++rank) {
        ASSERT_EQ((*runs)[rank].grads[0][i], got)
            << "N=" << n << " rank " << rank << " element " << i;
      }
    }
  }
}

class RandomKTest : public testing::TestWithParam<int> {};

// Random-k: every rank holds the average of the (gradient + residual)
// values on the shared indices, zero elsewhere; k floats per bucket travel
// as a dense ring all-reduce.
TEST_P(RandomKTest, AverageOnTheSharedIndicesOnly) {
  const int n = GetParam();
  const std::string method = "randomk:0.1";
  auto layout = DenseLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->total_numel();
  GradientFn gradient = [](int step, int rank, int64_t i) {
    return Gradient(step, rank, i);
  };
  auto runs = RunJob("ring", n, method, *layout, 3, gradient);
  ASSERT_TRUE(runs.ok()) << runs.status();
  std::vector<WorkerModel> workers;
  for (int r = 0; r < n; ++r) workers.emplace_back(method, total);
  const CompressionSpec spec = CompressionSpec::Parse(method).value();
  for (int step = 0; step < 3; ++step) {
    std::vector<double> sum(total, 0.0);
    std::vector<bool> chosen(total, false);
    for (int r = 0; r < n; ++r) {
      std::vector<float> g(total);
      for (int64_t i = 0; i < total; ++i) g[i] = gradient(step, r, i);
      std::vector<EncodedBucket> sent = workers[r].Encode(*layout, g, step);
      for (const Bucket& bucket : layout->buckets()) {
        const EncodedBucket& e = sent[bucket.index];
        ASSERT_EQ(e.index,
                  RandomKIndices(bucket.numel, spec.KeptElements(bucket.numel),
                                 1234, step, bucket.index));
        for (size_t j = 0; j < e.index.size(); ++j) {
          sum[bucket.offset + e.index[j]] += e.values[j];
          chosen[bucket.offset + e.index[j]] = true;
        }
      }
    }
    for (int rank = 0; rank < n; ++rank) {
      for (int64_t i = 0; i < total; ++i) {
        // Integers (the residuals too), so N = 3's one rounding of 1/3 is
        // the only inexact step.
        const float want =
            chosen[i] ? static_cast<float>(sum[i]) * (1.0f / n) : 0.0f;
        ASSERT_NEAR((*runs)[rank].grads[step][i], want, std::fabs(want) * 1e-6)
            << "rank " << rank << " step " << step << " element " << i;
        ASSERT_EQ((*runs)[rank].grads[step][i], (*runs)[0].grads[step][i]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, RandomKTest, testing::Values(2, 3, 4));

// An embedding table's bucket: when the ranks touch few rows the exact rows
// are gathered (the average is exact), when they touch them all the dense
// ring runs; the summary counts both.
TEST(RowSparseTest, FewRowsAreGatheredAndManyGoThroughTheDenseRing) {
  auto layout = ParamLayout::Create(
      {{"embedding", {500, 8}, /*sparse_row_width=*/8}, {"fc.weight", {8, 4}}},
      /*bucket_bytes=*/1 << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const Bucket* table = nullptr;
  for (const Bucket& bucket : layout->buckets()) {
    if (bucket.sparse_row_width > 0) table = &bucket;
  }
  ASSERT_NE(table, nullptr);
  const int64_t table_first = table->offset;
  const int64_t table_end = table->offset + table->numel;
  // Step 0: each rank touches 3 rows; step 1: every row.
  GradientFn gradient = [&](int step, int rank, int64_t i) -> float {
    if (i < table_first || i >= table_end) return Gradient(step, rank, i);
    const int64_t row = (i - table_first) / 8;
    const bool touched =
        step == 1 || row == rank || row == 10 + rank * 7 || row == 499;
    return touched ? Gradient(step, rank, i) + 20.0f : 0.0f;
  };
  for (int n : {2, 4}) {
    auto runs = RunJob("ring", n, "none", *layout, 2, gradient);
    ASSERT_TRUE(runs.ok()) << runs.status();
    for (int rank = 0; rank < n; ++rank) {
      for (int step = 0; step < 2; ++step) {
        for (int64_t i = 0; i < layout->total_numel(); ++i) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += gradient(step, r, i);
          ASSERT_EQ((*runs)[rank].grads[step][i], sum * (1.0f / n))
              << "N=" << n << " rank " << rank << " step " << step
              << " element " << i;
        }
      }
      nlohmann::json summary = nlohmann::json::parse((*runs)[rank].summary);
      EXPECT_EQ(summary["row_sparse_buckets_gathered"], 1) << "N=" << n;
      EXPECT_EQ(summary["row_sparse_buckets_dense"], 1) << "N=" << n;
    }
    // Step 0 moved far less than step 1, which moved the dense ring's bytes.
    EXPECT_LT((*runs)[0].stats[0].bytes_sent * 4,
              (*runs)[0].stats[1].bytes_sent);
  }
  // --ring_row_sparse pins one route for both steps, with the same sums.
  for (const auto& [route, gathered] :
       {std::pair<std::string, int>{"dense", 0}, {"gather", 2}}) {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_ring_row_sparse, route);
    auto runs = RunJob("ring", 2, "none", *layout, 2, gradient);
    ASSERT_TRUE(runs.ok()) << runs.status();
    nlohmann::json summary = nlohmann::json::parse((*runs)[0].summary);
    EXPECT_EQ(summary["row_sparse_buckets_gathered"], gathered) << route;
    EXPECT_EQ(summary["row_sparse_buckets_dense"], 2 - gathered) << route;
    for (int64_t i = 0; i < layout->total_numel(); ++i) {
      const float sum = gradient(0, 0, i) + gradient(0, 1, i);
      ASSERT_EQ((*runs)[1].grads[0][i], sum * 0.5f) << route << " " << i;
    }
  }
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_ring_row_sparse, "sometimes");
  SyncContext context;
  auto refused = GradientSyncRegistry::Create("ring", context);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(
      std::string(refused.status().message()),
      HasSubstr("--ring_row_sparse=sometimes: use auto, gather or dense"));
}

// A run resumed from a checkpoint continues the error feedback exactly: the
// gradients after the resume equal those of a run that never stopped.
TEST(ResumeTest, ResidualSurvivesACheckpointOnEveryRank) {
  const int n = 3;
  const std::string method = "topk:0.05";
  auto layout = DenseLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  GradientFn gradient = [](int step, int rank, int64_t i) {
    return Gradient(step, rank, i, /*fraction=*/true);
  };
  auto straight = RunJob("ring", n, method, *layout, 4, gradient);
  ASSERT_TRUE(straight.ok()) << straight.status();

  const std::string path =
      absl::StrCat(testing::TempDir(), "/resume_", ::getpid(), ".ckpt");
  TrainingSchedule first;
  first.checkpoint_path = path;
  first.checkpoint_every = 2;
  first.steps_per_epoch = 100;
  first.total_steps = 4;
  auto before = RunJob("ring", n, method, *layout, 2, gradient, first);
  ASSERT_TRUE(before.ok()) << before.status();
  TrainingSchedule second = first;
  second.resume = true;
  second.start_step = 2;
  auto after = RunJob("ring", n, method, *layout, 2, gradient, second);
  ASSERT_TRUE(after.ok()) << after.status();
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ((*after)[rank].grads[0], (*straight)[rank].grads[2]);
    EXPECT_EQ((*after)[rank].grads[1], (*straight)[rank].grads[3]);
  }
  // Without rank 2's residual the resume is refused, naming the file.
  const std::string lost = ErrorFeedback::PathFor(path, 2);
  ASSERT_EQ(std::remove(lost.c_str()), 0);
  std::remove((lost + ".previous").c_str());
  auto refused =
      RunJob("ring", n, method, *layout, 1, gradient, second, absl::Seconds(2));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(lost));
  for (int rank = 0; rank < n; ++rank) {
    std::remove(ErrorFeedback::PathFor(path, rank).c_str());
    std::remove((ErrorFeedback::PathFor(path, rank) + ".previous").c_str());
  }
}

// The factories say what is not built, once, clearly.
TEST(FactoryTest, MethodsAnAlgorithmDoesNotCarryAreRefused) {
  SyncContext context;
  context.compression = CompressionSpec::Parse("fp16").value();
  for (const char* name :
       {"tree", "halving_doubling", "hierarchical", "allreduce"}) {
    auto sync = GradientSyncRegistry::Create(name, context);
    ASSERT_EQ(sync.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(std::string(sync.status().message()),
              absl::StrCat("--compression=fp16 is not built for --sync=", name,
                           "; use --sync=ring or --sync=ps"));
  }
  // The gathered methods and random-k run on every algorithm.
  context.compression = CompressionSpec::Parse("topk:0.01").value();
  for (const char* name : {"ring", "tree", "halving_doubling"}) {
    EXPECT_TRUE(GradientSyncRegistry::Create(name, context).ok()) << name;
  }
}

// Top-k on the tree: the all-gather is shared by the family, so the result
// is the same as the ring's, bit for bit.
TEST(FamilyTest, TreeGathersTopKLikeTheRing) {
  auto layout = DenseLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  GradientFn gradient = [](int step, int rank, int64_t i) {
    return Gradient(step, rank, i, /*fraction=*/true);
  };
  auto ring = RunJob("ring", 3, "topk:0.05", *layout, 2, gradient);
  ASSERT_TRUE(ring.ok()) << ring.status();
  auto tree = RunJob("tree", 3, "topk:0.05", *layout, 2, gradient);
  ASSERT_TRUE(tree.ok()) << tree.status();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ((*tree)[rank].grads, (*ring)[rank].grads) << "rank " << rank;
  }
}

}  // namespace
}  // namespace gradsync
