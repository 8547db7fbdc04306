// The property every strategy must keep: N workers with batch b end with the
// parameters of one worker with batch N·b on the same samples (sampler.h
// explains why the data orders agree), within float32 rounding; and all
// workers hold identical parameters after every step (--check_params_every=1
// makes the job fail otherwise). Real processes, started by `gradsync launch`.
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/gradsync_binary.h"

namespace gradsync {
namespace {

constexpr int kBatch = 16;
constexpr int kSteps = 20;

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<std::string> ModelFlags() {
  // Small enough for 8 processes on 2 cores; several buckets (2 KiB cap) so
  // bucket order and overlap are exercised.
  return {"--data=synthetic",
          "--synthetic_size=4096",
          "--layers=32,48,24,10",
          absl::StrCat("--max_steps=", kSteps),
          "--epochs=1",
          "--eval=false",
          "--progress=false",
          "--bucket_mb=0.002",
          "--lr=0.05",
          "--momentum=0.9",
          "--weight_decay=0.0001",
          "--timeout_s=60"};
}

struct Case {
  std::string name;
  int workers;
  int servers;
  std::vector<std::string> flags;        // the distributed run only
  std::vector<std::string> shared = {};  // both runs (optimizer choice)
  // --check_params_every=1 completes every step before the next begins;
  // without it the next forward starts per bucket (--overlap_next_forward),
  // and the replicas are still compared after the last step.
  bool check_every_step = true;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class StrategyEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyEquivalenceTest, MatchesSingleWorkerWithNTimesTheBatch) {
  const Case& c = GetParam();
  const std::string dir = absl::StrCat(TestTempDir(), "/", c.name);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;

  std::vector<std::string> reference = {
      "train", "--sync=local",
      absl::StrCat("--batch_size=", kBatch * c.workers),
      "--dump_params=" + dir + "/local"};
  for (const auto& f : ModelFlags()) reference.push_back(f);
  for (const auto& f : c.shared) reference.push_back(f);
  ProcessResult local = RunGradsync(reference);
  ASSERT_EQ(local.exit_code, 0) << local.output;

  std::vector<std::string> job = {"launch",
                                  absl::StrCat("--workers=", c.workers),
                                  absl::StrCat("--servers=", c.servers),
                                  "--run_dir=" + dir + "/run",
                                  "--job_deadline_s=200",
                                  "--"};
  job.push_back(absl::StrCat("--batch_size=", kBatch));
  if (c.check_every_step) job.push_back("--check_params_every=1");
  job.push_back("--dump_params=" + dir + "/dist");
  for (const auto& f : ModelFlags()) job.push_back(f);
  for (const auto& f : c.flags) job.push_back(f);
  for (const auto& f : c.shared) job.push_back(f);
  ProcessResult run = RunGradsync(job);
  ASSERT_EQ(run.exit_code, 0) << run.output;

  const std::vector<float> expected = ReadFloats(dir + "/local.worker0");
  ASSERT_FALSE(expected.empty());
  float scale = 0;
  for (float v : expected) scale = std::max(scale, std::fabs(v));
  for (int r = 0; r < c.workers; ++r) {
    const std::vector<float> got =
        ReadFloats(absl::StrCat(dir, "/dist.worker", r));
    ASSERT_EQ(got.size(), expected.size()) << "worker " << r;
    double worst = 0;
    size_t worst_index = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::fabs(got[i] - expected[i]);
      if (diff > worst) worst = diff, worst_index = i;
    }
    EXPECT_LE(worst, 1e-5 * scale)
        << "worker " << r
        << " differs from the single-worker reference at parameter "
        << worst_index << ": " << got[worst_index] << " vs "
        << expected[worst_index];
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, StrategyEquivalenceTest,
    ::testing::Values(
        Case{"ring_2", 2, 0, {"--sync=ring"}},
        Case{"ring_3", 3, 0, {"--sync=ring"}},
        Case{"ring_4_adam",
             4,
             0,
             {"--sync=ring"},
             {"--optimizer=adam", "--lr=0.001"}},
        Case{"ring_8", 8, 0, {"--sync=ring"}},
        // The rest of the all-reduce family, at sizes that exercise their
        // special cases: a non-power-of-two fold, an uneven tree, two nodes
        // of two, the selector probing the link itself.
        Case{"halving_doubling_6", 6, 0, {"--sync=halving_doubling"}},
        Case{"tree_5", 5, 0, {"--sync=tree"}},
        Case{"hierarchical_4_two_nodes",
             4,
             0,
             {"--sync=hierarchical", "--allreduce_ranks_per_node=2"}},
        Case{"allreduce_3", 3, 0, {"--sync=allreduce"}},
        // --schedule=priority on the family: 2 KiB buckets in 1 KiB
        // partitions (so every bucket is cut), run as separate collectives
        // in priority order after the ranks agree on what is ready; the
        // next forward starting per bucket where noted; the selector with
        // its derived partition size.
        Case{"ring_3_priority",
             3,
             0,
             {"--sync=ring", "--schedule=priority", "--partition_kb=1"}},
        Case{"ring_4_adam_priority_overlap",
             4,
             0,
             {"--sync=ring", "--schedule=priority", "--partition_kb=1",
              "--credit_kb=1"},
             {"--optimizer=adam", "--lr=0.001"},
             false},
        Case{"halving_doubling_6_priority",
             6,
             0,
             {"--sync=halving_doubling", "--schedule=priority",
              "--partition_kb=1"}},
        Case{"tree_5_priority_overlap",
             5,
             0,
             {"--sync=tree", "--schedule=priority", "--partition_kb=1"},
             {},
             false},
        Case{"hierarchical_4_two_nodes_priority",
             4,
             0,
             {"--sync=hierarchical", "--allreduce_ranks_per_node=2",
              "--schedule=priority", "--partition_kb=1"}},
        Case{"allreduce_3_priority_overlap",
             3,
             0,
             {"--sync=allreduce", "--schedule=priority"},
             {},
             false},
        Case{"ps_worker_update_4x2", 4, 2, {"--sync=ps", "--ps_update=worker"}},
        Case{"ps_server_update_2x1", 2, 1, {"--sync=ps", "--ps_update=server"}},
        Case{"ps_server_update_3x2", 3, 2, {"--sync=ps", "--ps_update=server"}},
        Case{"ps_server_update_adam_2x2",
             2,
             2,
             {"--sync=ps", "--ps_update=server"},
             {"--optimizer=adam", "--lr=0.001"}},
        // The next forward starting per bucket, on every step.
        Case{"ring_3_overlap", 3, 0, {"--sync=ring"}, {}, false},
        Case{"ring_4_adam_overlap",
             4,
             0,
             {"--sync=ring"},
             {"--optimizer=adam", "--lr=0.001"},
             false},
        Case{"tree_5_overlap", 5, 0, {"--sync=tree"}, {}, false},
        Case{"ps_worker_update_4x2_overlap",
             4,
             2,
             {"--sync=ps", "--ps_update=worker"},
             {},
             false},
        Case{"ps_server_update_3x2_overlap",
             3,
             2,
             {"--sync=ps", "--ps_update=server"},
             {},
             false},
        // --schedule=priority on the PS: keys one by one, lowest offset
        // first under a credit, with the next forward starting per bucket;
        // separate, colocated and mixed servers, both update modes.
        Case{"ps_worker_update_4x2_priority_overlap",
             4,
             2,
             {"--sync=ps", "--ps_update=worker", "--schedule=priority"},
             {},
             false},
        Case{"ps_colocate_3_priority_overlap",
             3,
             0,
             {"--sync=ps", "--ps_colocate", "--schedule=priority"},
             {},
             false},
        Case{"ps_server_update_2x1_mixed_priority",
             2,
             1,
             {"--sync=ps", "--ps_update=server", "--ps_colocated_servers=1",
              "--schedule=priority", "--credit_kb=64"},
             {"--optimizer=adam", "--lr=0.001"},
             false},
        Case{"ring_3_no_overlap",
             3,
             0,
             {"--sync=ring", "--overlap_next_forward=false"},
             {},
             false}),
    CaseName);

}  // namespace
}  // namespace gradsync
