// How a cuDNN convolution picks its algorithms and how much scratch memory it
// may use, as plain host code tested without a GPU: cudnn_convolution.cc turns
// cuDNN's answers (the heuristics' ranking, cudnnGetConvolution*Algorithm_v7
// with each algorithm's cudnnGetConvolution*WorkspaceSize, and the measured
// times of cudnnFindConvolution*AlgorithmEx) into the structs below and calls
// these functions; no cuDNN type appears here.
//
// Why measure (cudnnFind*Ex) rather than trust the heuristics: on the first
// GPU run the heuristics picked, for ResNet-18's NHWC tensors, kernels that
// cuDNN runs between transposes of their own and slower algorithms than the
// FFT and Winograd ones PyTorch's cudnn.benchmark finds, which left the
// convolutions well behind PyTorch's. Find runs every candidate on the GPU
// at set-up, transposes included, in buffers the device allocates once from
// its arena (the Ex variants take the caller's memory, so nothing is
// allocated behind the arena), once per shape per device (ResNet-18 repeats
// most of its shapes). Two ranks may pick different algorithms from timing
// noise; they compute the same convolution either way, and data-parallel
// training keeps their parameters equal through the averaged gradient, as
// with PyTorch's benchmark mode. The heuristics still rank the candidates and
// size the search's workspace, and are the fallback when Find fails.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradsync {

// One of cuDNN's answers for one algorithm of one direction.
struct ConvolutionAlgorithmResult {
  int algorithm = 0;       // cuDNN's enum value (cudnnConvolution*Algo_t)
  bool supported = false;  // cuDNN reported CUDNN_STATUS_SUCCESS for it
  // Why not, where cuDNN said more than its result's status (the workspace
  // query's error), for the error message when nothing qualifies.
  std::string unsupported_because;
  float time_ms = -1.0f;  // measured time; negative where only ranked
  size_t workspace_bytes = 0;
  bool deterministic = false;
  // Whether the algorithm uses tensor-core math (TF32 for FP32 data), which
  // rounds products to 10 mantissa bits and so breaks parity with the CPU.
  bool tensor_core_math = false;
  // cuDNN's math type of the result (cudnnMathType_t), which the convolution
  // descriptor must carry when the algorithm runs with tensor-core math.
  int math_type = 0;
  // A configuration of cuDNN's graph API instead of a legacy algorithm:
  // its position in the heuristics' list (cudnn_graph.h) and its engine's
  // global index; -1 for a legacy algorithm.
  int graph_config = -1;
  int graph_engine = -1;
};

struct ConvolutionAlgorithmPolicy {
  // The most scratch memory one convolution call may use.
  size_t workspace_limit = 0;
  // Only algorithms that give the same bits every run (cuDNN's weight
  // gradient algorithms 0 and 3 add with atomics). Off by default, as in
  // PyTorch (torch.backends.cudnn.deterministic = False).
  bool require_deterministic = false;
  // --precision=tf32: algorithms with tensor-core math qualify too.
  bool allow_tensor_core_math = false;
};

// The algorithm to run: among the supported results without tensor-core
// math (unless the policy allows it), within the workspace limit (and
// deterministic if required), the fastest measured one if any was measured,
// else the first in the given order
// (cuDNN's heuristics list the expected-fastest first). FailedPrecondition
// naming `what` (the direction and shape) and why each result was refused
// when none qualifies.
absl::StatusOr<ConvolutionAlgorithmResult> PickConvolutionAlgorithm(
    const std::vector<ConvolutionAlgorithmResult>& results,
    const ConvolutionAlgorithmPolicy& policy, absl::string_view what);

// The workspace to offer cuDNN's measured search: the largest workspace among
// the candidates the policy would take (supported, allowed math, within the
// limit, deterministic if required), so that Find can time every one of them
// and no more memory is held than the best of them could use. 0 when none
// qualifies (Find then times the algorithms that need no workspace).
size_t SearchWorkspaceBytes(
    const std::vector<ConvolutionAlgorithmResult>& candidates,
    const ConvolutionAlgorithmPolicy& policy);

// What cuDNN's graph API (cudnn_graph.h) says of one engine: its numerical
// and behaviour notes, as flags.
struct GraphEngineNotes {
  bool tensor_core = false;          // tensor-core math (TF32 on float data)
  bool down_convert_inputs = false;  // float inputs converted to 16 bits
  bool reduced_precision_reduction = false;  // sums kept in 16 bits
  bool nondeterministic = false;     // atomics: bits change from run to run
  bool runtime_compilation = false;  // kernels compiled when the plan is made
};

// Why `policy` refuses an engine with these notes, or "" when it qualifies:
// tensor-core math only where the policy allows it (tf32, bf16), never a
// float engine that converts its inputs to 16 bits or a 16-bit reduction
// (neither is what the precision names), deterministic where required, and
// no engine that compiles kernels at set-up (NVRTC, seconds per shape, a
// library the node may not have).
std::string GraphEngineRefusal(const GraphEngineNotes& notes,
                               const ConvolutionAlgorithmPolicy& policy);

// What one direction's graph-API search (cudnn_graph.h) made of the
// configurations cuDNN's heuristics listed, for the convolution's
// description: a run on a GPU then says why the graph API won or lost, and
// what a policy change would let in, without another run.
struct GraphSearchSummary {
  int listed = 0;                      // configurations the heuristics listed
  std::map<std::string, int> refused;  // by GraphEngineRefusal's reason
  int unreadable = 0;                  // their engine's notes could not be read
  int no_plan = 0;                     // cuDNN made no execution plan of them
  int over_workspace = 0;              // their plan needs more than the limit
  int not_tried = 0;      // listed after the candidates Search times
  int failed = 0;         // a candidate that did not run
  int timed = 0;          // candidates that ran and were timed
  float fastest_ms = -1;  // the fastest's median; negative when none ran
  int fastest_engine = -1;
};

// "graph API: L configurations listed, T timed, fastest engine E in M ms;
// refused: R1 tensor-core math, R2 compiles kernels at set-up; P made no
// plan": the counts that are not zero, in that order (the test has a whole
// example).
std::string DescribeGraphSearch(const GraphSearchSummary& summary);

// One convolution's step (forward, weight gradient, input gradient, the
// copies into and out of cuDNN's layout included) as timed in each layout
// at set-up, for --cudnn_layout=fastest (cudnn_convolution.h).
struct LayoutTiming {
  float nhwc_ms = -1.0f;  // negative: not timed
  float nchw_ms = -1.0f;  // negative: not timed; nchw_unavailable says why
  std::string nchw_unavailable;
};

// Whether the NCHW layout runs: only where it was timed and took less than
// NHWC (which wins ties and runs wherever it alone was timed).
bool PrefersNchw(const LayoutTiming& timing);

// "layout NCHW, timed A ms a step against NHWC's B ms", "layout NHWC,
// timed B ms a step against NCHW's A ms", or "layout NHWC (NCHW not timed:
// why)": what the layer's description carries.
std::string DescribeLayoutChoice(const LayoutTiming& timing);

// The three directions' algorithms of one convolution shape, as chosen once
// and reused by every layer of that shape on the device.
struct ChosenConvolutionAlgorithms {
  ConvolutionAlgorithmResult forward;
  ConvolutionAlgorithmResult input_gradient;
  ConvolutionAlgorithmResult weight_gradient;
};

// The workspace limit for one convolution call on a GPU with `free_bytes` of
// its memory free at set-up: an eighth of it, at most 1 GiB. An eighth leaves
// the activations of the model being set up room (a ResNet-18 worker at batch
// 64 needs about 1 GB of GPU memory); 1 GiB is more than the algorithms
// worth having ask for on ResNet-sized layers (the FFT algorithms that ask for
// several GiB are rarely the fastest), and keeps memory per worker
// predictable.
size_t ConvolutionWorkspaceLimit(size_t free_bytes);

// The size the device's one shared workspace grows to when a convolution
// needs `needed` bytes and it holds `current` (the arena never frees, so each
// growth leaves the old piece unused): `current` when it suffices, else at
// least double it, capped at `limit` but never below `needed`. Each piece
// left behind is at most half the next, so together they stay under twice
// the final size.
size_t GrowConvolutionWorkspace(size_t current, size_t needed, size_t limit);

}  // namespace gradsync
