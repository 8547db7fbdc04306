// The cuDNN algorithm picker and workspace sizing, on any machine.
#include "core/device/cudnn_algorithm_choice.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

ConvolutionAlgorithmResult Result(int algorithm, size_t workspace,
                                  float time_ms = -1.0f,
                                  bool deterministic = true) {
  ConvolutionAlgorithmResult r;
  r.algorithm = algorithm;
  r.supported = true;
  r.time_ms = time_ms;
  r.workspace_bytes = workspace;
  r.deterministic = deterministic;
  return r;
}

ConvolutionAlgorithmPolicy Limit(size_t bytes, bool deterministic = false) {
  ConvolutionAlgorithmPolicy policy;
  policy.workspace_limit = bytes;
  policy.require_deterministic = deterministic;
  return policy;
}

TEST(PickConvolutionAlgorithmTest, TakesHeuristicsOrderWithinTheLimit) {
  const std::vector<ConvolutionAlgorithmResult> ranked = {
      Result(6, 5000), Result(1, 300), Result(0, 0)};
  EXPECT_EQ(PickConvolutionAlgorithm(ranked, Limit(10000), "x")->algorithm, 6);
  EXPECT_EQ(PickConvolutionAlgorithm(ranked, Limit(4999), "x")->algorithm, 1);
  EXPECT_EQ(PickConvolutionAlgorithm(ranked, Limit(0), "x")->algorithm, 0);
}

TEST(PickConvolutionAlgorithmTest, TakesTheFastestMeasured) {
  const std::vector<ConvolutionAlgorithmResult> measured = {
      Result(0, 0, 3.0f), Result(2, 100, 1.5f), Result(5, 1 << 20, 0.5f)};
  EXPECT_EQ(PickConvolutionAlgorithm(measured, Limit(1 << 20), "x")->algorithm,
            5);
  EXPECT_EQ(PickConvolutionAlgorithm(measured, Limit(1000), "x")->algorithm, 2);
}

TEST(PickConvolutionAlgorithmTest, RefusesUnsupportedTensorCoreAndRandom) {
  ConvolutionAlgorithmResult unsupported = Result(7, 0, 0.1f);
  unsupported.supported = false;
  ConvolutionAlgorithmResult tf32 = Result(1, 0, 0.2f);
  tf32.tensor_core_math = true;
  const ConvolutionAlgorithmResult atomic = Result(0, 0, 0.3f, false);
  const ConvolutionAlgorithmResult plain = Result(3, 0, 0.9f);
  const std::vector<ConvolutionAlgorithmResult> results = {unsupported, tf32,
                                                           atomic, plain};
  EXPECT_EQ(PickConvolutionAlgorithm(results, Limit(0), "x")->algorithm, 0);
  EXPECT_EQ(PickConvolutionAlgorithm(results, Limit(0, true), "x")->algorithm,
            3);
}

// --precision=tf32: tensor-core algorithms qualify, and the fastest wins;
// unsupported ones stay refused.
TEST(PickConvolutionAlgorithmTest, Tf32PolicyAllowsTensorCoreMath) {
  ConvolutionAlgorithmResult unsupported = Result(7, 0, 0.1f);
  unsupported.supported = false;
  ConvolutionAlgorithmResult tf32 = Result(1, 0, 0.2f);
  tf32.tensor_core_math = true;
  tf32.math_type = 1;
  const ConvolutionAlgorithmResult plain = Result(3, 0, 0.9f);
  ConvolutionAlgorithmPolicy policy = Limit(0);
  policy.allow_tensor_core_math = true;
  auto picked =
      PickConvolutionAlgorithm({unsupported, tf32, plain}, policy, "x");
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(picked->algorithm, 1);
  EXPECT_EQ(picked->math_type, 1);
  EXPECT_EQ(PickConvolutionAlgorithm({unsupported, tf32, plain}, Limit(0), "x")
                ->algorithm,
            3);
}

TEST(PickConvolutionAlgorithmTest, NoneQualifiesNamesEachReason) {
  ConvolutionAlgorithmResult unsupported = Result(7, 0);
  unsupported.supported = false;
  ConvolutionAlgorithmResult refused_query = Result(2, 0);
  refused_query.supported = false;
  refused_query.unsupported_because = "workspace query: CUDNN_STATUS_BAD_PARAM";
  const std::vector<ConvolutionAlgorithmResult> results = {
      unsupported, refused_query, Result(4, 4096)};
  const auto picked =
      PickConvolutionAlgorithm(results, Limit(1024), "forward of 1x2x3x4");
  EXPECT_EQ(picked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(picked.status().message(), HasSubstr("forward of 1x2x3x4"));
  EXPECT_THAT(picked.status().message(), HasSubstr("7: not supported;"));
  EXPECT_THAT(picked.status().message(),
              HasSubstr("2: not supported (workspace query: "
                        "CUDNN_STATUS_BAD_PARAM)"));
  EXPECT_THAT(picked.status().message(), HasSubstr("4: workspace 4096 bytes"));
  EXPECT_THAT(PickConvolutionAlgorithm({}, Limit(1), "y").status().message(),
              HasSubstr("offered none"));
}

TEST(ConvolutionWorkspaceLimitTest, AnEighthOfFreeMemoryAtMostOneGiB) {
  constexpr size_t kGiB = size_t{1} << 30;
  EXPECT_EQ(ConvolutionWorkspaceLimit(80 * kGiB), kGiB);
  EXPECT_EQ(ConvolutionWorkspaceLimit(4 * kGiB), kGiB / 2);
  EXPECT_EQ(ConvolutionWorkspaceLimit(0), 0u);
}

TEST(GrowConvolutionWorkspaceTest, DoublesUpToTheLimit) {
  EXPECT_EQ(GrowConvolutionWorkspace(0, 100, 1000), 100u);
  EXPECT_EQ(GrowConvolutionWorkspace(100, 80, 1000), 100u);
  EXPECT_EQ(GrowConvolutionWorkspace(100, 150, 1000), 200u);
  EXPECT_EQ(GrowConvolutionWorkspace(100, 450, 1000), 450u);
  EXPECT_EQ(GrowConvolutionWorkspace(600, 700, 1000), 1000u);
  // Whatever the sequence of needs, the pieces left behind (every size but
  // the last) sum to less than twice the last, and every need is met.
  size_t current = 0, left_behind = 0;
  for (size_t need : {10, 11, 30, 31, 200, 201, 202, 900, 950, 999}) {
    const size_t grown = GrowConvolutionWorkspace(current, need, 1000);
    EXPECT_GE(grown, need);
    EXPECT_LE(grown, size_t{1000});
    if (grown != current) left_behind += current;
    current = grown;
  }
  EXPECT_LT(left_behind, 2 * current);
}

// The search's workspace: the largest need among what the policy would take,
// never a refused candidate's.
TEST(SearchWorkspaceBytesTest, LargestAmongQualifyingCandidates) {
  ConvolutionAlgorithmResult unsupported = Result(2, 1 << 20);
  unsupported.supported = false;
  ConvolutionAlgorithmResult tensor_core = Result(7, 1 << 19);
  tensor_core.tensor_core_math = true;
  const std::vector<ConvolutionAlgorithmResult> candidates = {
      Result(0, 0),
      Result(1, 4096),
      Result(6, 1 << 18),
      Result(5, 1 << 24),
      unsupported,
      tensor_core,
      Result(3, 8192, -1.0f, false)};
  EXPECT_EQ(SearchWorkspaceBytes(candidates, Limit(1 << 20)), 1u << 18);
  EXPECT_EQ(SearchWorkspaceBytes(candidates, Limit(1 << 30)), 1u << 24);
  EXPECT_EQ(SearchWorkspaceBytes(candidates, Limit(5000)), 4096u);
  EXPECT_EQ(SearchWorkspaceBytes(candidates, Limit(10000, true)), 4096u);
  ConvolutionAlgorithmPolicy tf32 = Limit(1 << 20);
  tf32.allow_tensor_core_math = true;
  EXPECT_EQ(SearchWorkspaceBytes(candidates, tf32), 1u << 19);
  EXPECT_EQ(SearchWorkspaceBytes({}, Limit(1 << 20)), 0u);
  EXPECT_EQ(SearchWorkspaceBytes({unsupported}, Limit(1 << 30)), 0u);
}

// Graph engines: fp32 takes no tensor-core engine, no precision takes one
// that converts its inputs or reduces in 16 bits, determinism where asked,
// and nothing that compiles kernels at set-up.
TEST(GraphEngineRefusalTest, TheNotesThePrecisionForbids) {
  ConvolutionAlgorithmPolicy fp32;
  ConvolutionAlgorithmPolicy tensor_cores;
  tensor_cores.allow_tensor_core_math = true;
  ConvolutionAlgorithmPolicy deterministic = tensor_cores;
  deterministic.require_deterministic = true;

  GraphEngineNotes plain;
  EXPECT_EQ(GraphEngineRefusal(plain, fp32), "");
  GraphEngineNotes tc;
  tc.tensor_core = true;
  EXPECT_EQ(GraphEngineRefusal(tc, fp32), "tensor-core math");
  EXPECT_EQ(GraphEngineRefusal(tc, tensor_cores), "");
  GraphEngineNotes down;
  down.down_convert_inputs = true;
  EXPECT_EQ(GraphEngineRefusal(down, tensor_cores),
            "inputs converted to 16 bits");
  GraphEngineNotes reduced;
  reduced.reduced_precision_reduction = true;
  EXPECT_EQ(GraphEngineRefusal(reduced, tensor_cores), "16-bit reduction");
  GraphEngineNotes atomics;
  atomics.nondeterministic = true;
  EXPECT_EQ(GraphEngineRefusal(atomics, tensor_cores), "");
  EXPECT_EQ(GraphEngineRefusal(atomics, deterministic), "not deterministic");
  GraphEngineNotes compiled;
  compiled.runtime_compilation = true;
  EXPECT_EQ(GraphEngineRefusal(compiled, tensor_cores),
            "compiles kernels at set-up");
}

// The description a GPU run's log carries: every count that is not zero.
TEST(DescribeGraphSearchTest, SaysWhatBecameOfEachConfiguration) {
  GraphSearchSummary summary;
  EXPECT_EQ(DescribeGraphSearch(summary),
            "graph API: 0 configurations listed, 0 timed");
  summary.listed = 23;
  summary.refused["tensor-core math"] = 8;
  summary.refused["compiles kernels at set-up"] = 2;
  summary.no_plan = 1;
  summary.not_tried = 2;
  summary.timed = 10;
  summary.fastest_ms = 0.38f;
  summary.fastest_engine = 7;
  EXPECT_EQ(DescribeGraphSearch(summary),
            "graph API: 23 configurations listed, 10 timed, fastest engine 7 "
            "in 0.380 ms; refused: 2 compiles kernels at set-up, 8 "
            "tensor-core math; 1 made no plan; 2 not tried (after the "
            "candidates timed)");
}

// --cudnn_layout=fastest: NCHW runs only where it was timed and was faster;
// the description says which ran and both times.
TEST(LayoutChoiceTest, NchwRunsOnlyWhereTimedFaster) {
  LayoutTiming timing;
  timing.nhwc_ms = 2.5f;
  timing.nchw_ms = 1.25f;
  EXPECT_TRUE(PrefersNchw(timing));
  EXPECT_EQ(DescribeLayoutChoice(timing),
            "layout NCHW, timed 1.250 ms a step against NHWC's 2.500 ms");
  timing.nchw_ms = 2.5f;  // a tie keeps the layers' own layout
  EXPECT_FALSE(PrefersNchw(timing));
  timing.nchw_ms = 3.0f;
  EXPECT_FALSE(PrefersNchw(timing));
  EXPECT_EQ(DescribeLayoutChoice(timing),
            "layout NHWC, timed 2.500 ms a step against NCHW's 3.000 ms");
  timing.nchw_ms = -1.0f;
  timing.nchw_unavailable = "CUDNN_STATUS_NOT_SUPPORTED";
  EXPECT_FALSE(PrefersNchw(timing));
  EXPECT_EQ(DescribeLayoutChoice(timing),
            "layout NHWC (NCHW not timed: CUDNN_STATUS_NOT_SUPPORTED)");
  LayoutTiming only_nchw;
  only_nchw.nchw_ms = 1.0f;
  EXPECT_TRUE(PrefersNchw(only_nchw));
  EXPECT_THAT(DescribeLayoutChoice(only_nchw), HasSubstr("NHWC not timed"));
}

}  // namespace
}  // namespace gradsync
