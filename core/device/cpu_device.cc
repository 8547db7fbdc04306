// The CPU backend: oneDNN for Gemm and the convolutions, simple contiguous
// loops for the rest, whose per-element and per-row arithmetic is
// kernel_math.h's (the CUDA kernels run the same functions).
#include "core/device/cpu_device.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/device/bfloat16.h"
#include "core/device/dnnl_batch_norm.h"
#include "core/device/dnnl_context.h"
#include "core/device/dnnl_convolution.h"
#include "core/device/kernel_math.h"

namespace gradsync {
namespace {

namespace km = kernel_math;

// The element-wise kernels run in fixed blocks of kBlock elements plus a
// shorter tail. GCC 12 at -O2 (this build's level) vectorizes a loop only when
// no scalar remainder is left over, so a loop over a runtime count stays scalar
// while one over a constant 16 becomes four 4-wide SIMD operations. The span
// functions take __restrict pointers (honoured on parameters, not on locals)
// so the compiler need not guard against the buffers overlapping. What it
// gained on the SGD update (bench/mlp_benchmark BM_SgdUpdate) is in
// docs/results/performance.md, "Notes from the code".
constexpr int kBlock = 16;

// Below this much work (elements touched) a loop runs on the calling thread
// alone, and below kParallelGemmWork multiply-adds so does a matrix product:
// on an idle machine waking the other threads costs microseconds, but on a
// machine with more runnable threads than cores (several workers, or other
// people's builds) each parallel region waits for its slowest thread's next
// time slice, milliseconds. Only loops of about a millisecond or more are
// shared (a ResNet-18 batch's early activations, ResNet's batch norms; the
// MLP's updates and products at batch 256).
constexpr int64_t kParallelElements = int64_t{1} << 19;
constexpr int64_t kParallelGemmWork = int64_t{1} << 26;

// Calls body(begin, end) over [0, count), cut into one contiguous range per
// OpenMP thread (each a multiple of `align` long but the last), or once on the
// calling thread for short loops. Every element is computed as it would be by
// one thread, so the results have the same bits whatever the thread count.
// The thread count is the one DnnlContext::UseThreads set on this thread
// (--threads), the same as oneDNN's.
template <typename Body>
inline void ParallelRanges(int64_t count, int64_t work_per_item, int64_t align,
                           Body body) {
  const int threads = omp_get_max_threads();
  if (threads <= 1 || count * work_per_item < 2 * kParallelElements) {
    if (count > 0) body(int64_t{0}, count);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t parts = omp_get_num_threads();
    const int64_t per_part = (count + parts - 1) / parts;
    const int64_t length = (per_part + align - 1) / align * align;
    const int64_t begin = omp_get_thread_num() * length;
    const int64_t end = std::min(count, begin + length);
    if (begin < end) body(begin, end);
  }
}

// Calls span(start, n) over [0, count) in kBlock pieces and one shorter tail,
// the pieces shared among the threads. The span functions inline into
// `span`, where n is the constant kBlock.
template <typename Span>
inline void ForEachBlock(int64_t count, Span span) {
  ParallelRanges(count, 1, kBlock, [&](int64_t first, int64_t last) {
    int64_t start = first;
    for (; start + kBlock <= last; start += kBlock) span(start, kBlock);
    if (start < last) span(start, static_cast<int>(last - start));
  });
}

// SumRows's running column sums. Not kernel_math.h's: the GPU adds a column
// in another order (kernel_math.h's SumInOrder says why).
inline void AddSpan(float* __restrict y, const float* __restrict x, int n) {
  for (int j = 0; j < n; ++j) y[j] += x[j];
}

inline void BiasSpan(float* __restrict y, const float* __restrict bias, int n) {
  for (int j = 0; j < n; ++j) y[j] = km::AddBias(y[j], bias[j]);
}

inline void ReluSpan(float* __restrict x, int n) {
  for (int j = 0; j < n; ++j) x[j] = km::Relu(x[j]);
}

inline void ReluBackwardSpan(const float* __restrict y, float* __restrict dy,
                             int n) {
  for (int j = 0; j < n; ++j) dy[j] = km::ReluGradient(y[j], dy[j]);
}

// out = ReluBackward's dy, written to a buffer of its own (dy is const).
inline void MaskedGradientSpan(const float* __restrict y,
                               const float* __restrict dy,
                               float* __restrict out, int n) {
  for (int j = 0; j < n; ++j) out[j] = km::ReluGradient(y[j], dy[j]);
}

inline void ScaleSpan(float* __restrict x, float alpha, int n) {
  for (int j = 0; j < n; ++j) x[j] = km::Scaled(x[j], alpha);
}

// --precision=bf16: out = in rounded to bf16 (bfloat16.h); in == out allowed
// only through RoundSpanInPlace.
inline void RoundSpan(float* __restrict out, const float* __restrict in,
                      int n) {
  for (int j = 0; j < n; ++j) out[j] = bfloat16::Round(in[j]);
}

inline void RoundSpanInPlace(float* __restrict x, int n) {
  for (int j = 0; j < n; ++j) x[j] = bfloat16::Round(x[j]);
}

inline void SumSpan(float* __restrict y, const float* __restrict x, int n) {
  for (int j = 0; j < n; ++j) y[j] = km::Sum(y[j], x[j]);
}

// The two gradients' sum, then through the ReLU: Add's and ReluBackward's
// loops over one block (in cache), not km::ReluGradientOfSum per element, in
// which GCC sinks the sum into the ReLU's branch and then cannot vectorize.
// The same values.
inline void ReluBackwardOfSumSpan(const float* __restrict y,
                                  const float* __restrict x,
                                  float* __restrict dy, int n) {
  SumSpan(dy, x, n);
  ReluBackwardSpan(y, dy, n);
}

// y through a batch norm's epilogue (km::BatchNormEpilogueOutput's values):
// Add's and ReluForward's loops over one block, each of which vectorizes.
inline void EpilogueSpan(float* __restrict y, const float* __restrict residual,
                         bool relu, int n) {
  if (residual != nullptr) SumSpan(y, residual, n);
  if (relu) ReluSpan(y, n);
}

// Max pooling's backward at one window position: target[c] += grad[c]
// where the maximum was here (at[c] == here), + 0 elsewhere. The same bits
// as adding only at the maxima (a sum that starts at +0 never becomes -0, and
// v + 0 = v for every other v), without a branch per channel: which window
// position held a maximum is data, which a branch mispredicts. grad[c] is
// read whatever at[c] says, so that GCC may select (and vectorize) rather
// than branch: a load under the test is one it may not move ahead of it.
inline void AddAtMaximaSpan(float* __restrict target,
                            const float* __restrict grad,
                            const int32_t* __restrict at, int32_t here,
                            int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float g = grad[c];
    target[c] += at[c] == here ? g : 0.0f;
  }
}

inline void SgdSpan(float* __restrict p, const float* __restrict g, int n,
                    float lr, float weight_decay) {
  for (int j = 0; j < n; ++j) p[j] = km::SgdStep(p[j], g[j], lr, weight_decay);
}

inline void SgdMomentumSpan(float* __restrict p, const float* __restrict g,
                            float* __restrict v, int n, float lr,
                            float momentum, float weight_decay) {
  for (int j = 0; j < n; ++j) {
    km::SgdMomentumStep(p[j], v[j], g[j], lr, momentum, weight_decay);
  }
}

// The shape of a batch norm's x (Device::BatchNormForwardTraining): [rows ×
// channels] (NHWC, plane 1) or [images × channels × plane] (NCHW, images =
// rows / plane).
struct BatchNormShape {
  int64_t rows = 0;
  int channels = 0;
  int64_t plane = 1;

  int64_t count() const { return rows * channels; }
  int64_t images() const { return rows / plane; }
};

BatchNormShape CheckedShape(int64_t rows, int channels, int64_t plane) {
  GS_CHECK(plane >= 1 && rows % plane == 0)
      << "batch norm on cpu: " << rows << " values per channel do not make "
      << "whole planes of " << plane;
  return BatchNormShape{rows, channels, plane};
}

// Calls add(c, i) for every flat element i of x, c its channel, each
// channel's elements in row order (NHWC: row by row; NCHW: image by image,
// then along the plane): the order a channel's sums add in. Threads take
// ranges of channels, so every sum is one thread's in that order whatever the
// thread count. NHWC reads one contiguous row per pass over the channels.
template <typename Add>
inline void ForEachInChannelOrder(const BatchNormShape& shape, Add add) {
  const int64_t channels = shape.channels;
  if (shape.plane == 1) {
    ParallelRanges(channels, shape.rows, kBlock,
                   [&](int64_t first, int64_t last) {
                     for (int64_t r = 0; r < shape.rows; ++r) {
                       for (int64_t c = first; c < last; ++c) {
                         add(c, r * channels + c);
                       }
                     }
                   });
    return;
  }
  const int64_t images = shape.images();
  ParallelRanges(channels, shape.rows, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      for (int64_t image = 0; image < images; ++image) {
        const int64_t start = (image * channels + c) * shape.plane;
        for (int64_t i = start; i < start + shape.plane; ++i) add(c, i);
      }
    }
  });
}

// Calls element(i, c) for every flat element i of x, c its channel, threads
// taking ranges of rows (NHWC) or of planes (NCHW); each element is computed
// as by one thread.
template <typename Element>
inline void ForEachElement(const BatchNormShape& shape, Element element) {
  const int64_t channels = shape.channels;
  if (shape.plane == 1) {
    ParallelRanges(shape.rows, channels, 1, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        for (int64_t c = 0; c < channels; ++c) element(r * channels + c, c);
      }
    });
    return;
  }
  ParallelRanges(shape.images() * channels, shape.plane, 1,
                 [&](int64_t first, int64_t last) {
                   for (int64_t p = first; p < last; ++p) {
                     const int64_t c = p % channels;
                     const int64_t start = p * shape.plane;
                     for (int64_t i = start; i < start + shape.plane; ++i) {
                       element(i, c);
                     }
                   }
                 });
}

// Per channel, y = (x - mean)·inv_std·gamma + beta (km::BatchNormOutput).
struct ChannelAffine {
  const float* mean;
  const float* inv_std;
  const float* gamma;
  const float* beta;
};

// y = the epilogue applied to the affine normalisation of x.
void Normalize(const float* x, const BatchNormShape& shape,
               const ChannelAffine& affine, const BatchNormEpilogue& epilogue,
               float* y) {
  ForEachElement(shape, [&](int64_t i, int64_t c) {
    y[i] = km::BatchNormEpilogueOutput(
        km::BatchNormOutput(x[i], affine.mean[c], affine.inv_std[c],
                            affine.gamma[c], affine.beta[c]),
        epilogue.residual, i, epilogue.relu);
  });
}

}  // namespace

CpuDevice::CpuDevice(int cpu_threads, bool reference_convolutions,
                     bool reference_batch_norm, Precision precision,
                     bool convolutions_round_own_operands,
                     bool nchw_activations)
    : dnnl_(std::make_unique<DnnlContext>(cpu_threads)),
      reference_convolutions_(reference_convolutions),
      reference_batch_norm_(reference_batch_norm),
      precision_(precision),
      convolutions_round_own_operands_(convolutions_round_own_operands),
      nchw_activations_(nchw_activations) {}

DnnlBatchNorm* CpuDevice::BatchNormFor(int64_t rows, int channels,
                                       int64_t plane, float epsilon) {
  if (reference_batch_norm_) return nullptr;
  for (const auto& kernel : batch_norms_) {
    if (kernel->rows() == rows && kernel->channels() == channels &&
        kernel->plane() == plane &&
        (epsilon < 0 || kernel->epsilon() == epsilon)) {
      return kernel.get();
    }
  }
  const BatchNormKey key{rows, channels, plane};
  for (const BatchNormKey& failed : batch_norm_failures_) {
    if (failed == key) return nullptr;
  }
  // Shared among threads only where the loops would be (kParallelElements).
  const bool parallel = rows * channels >= 2 * kParallelElements;
  try {
    batch_norms_.push_back(std::make_unique<DnnlBatchNorm>(
        *dnnl_, rows, channels, plane, epsilon < 0 ? 0.0f : epsilon, parallel));
  } catch (const dnnl::error& error) {
    // Not expected (oneDNN makes these for every shape on x86-64); the loops
    // are right, only slower, so training goes on.
    GS_LOG(WARNING) << "cpu: oneDNN could not make batch normalisation of "
                    << rows << " x " << channels << " in planes of " << plane
                    << " (" << error.what()
                    << "); using the reference loops for it";
    batch_norm_failures_.push_back(key);
    return nullptr;
  }
  return batch_norms_.back().get();
}

absl::StatusOr<std::unique_ptr<ConvolutionKernel>> CpuDevice::CreateConvolution(
    const ConvGeometry& g, int out_channels) {
  if (reference_convolutions_) return std::unique_ptr<ConvolutionKernel>();
  return DnnlConvolution::Create(*dnnl_, g, out_channels,
                                 precision_ == Precision::kBf16,
                                 !convolutions_round_own_operands_);
}

CpuDevice::~CpuDevice() {
  for (void* block : blocks_) std::free(block);
}

absl::StatusOr<void*> CpuDevice::AllocateBytes(size_t bytes) {
  // aligned_alloc wants a size that is a multiple of the alignment; a zero-byte
  // request still gets a distinct, valid block so callers need no special case.
  const size_t rounded =
      std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu: allocation of ", bytes, " bytes overflows"));
  }
  void* block = std::aligned_alloc(kAlignment, rounded);
  if (block == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cpu: out of memory allocating ", rounded, " bytes (",
        allocated_bytes(), " bytes already allocated by this device)"));
  }
  std::memset(block, 0, rounded);
  absl::MutexLock lock(&mu_);
  blocks_.push_back(block);
  allocated_bytes_ += rounded;
  return block;
}

size_t CpuDevice::allocated_bytes() const {
  absl::MutexLock lock(&mu_);
  return allocated_bytes_;
}

absl::Status CpuDevice::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu: CopyToDevice of ", bytes, " bytes with a null pointer"));
  }
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu: CopyToHost of ", bytes, " bytes with a null pointer"));
  }
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

void CpuDevice::CopyOnDevice(float* dst, const float* src, int64_t count) {
  if (count <= 0 || dst == src) return;
  // memmove: callers may shift a buffer onto itself.
  std::memmove(dst, src, static_cast<size_t>(count) * sizeof(float));
}

void CpuDevice::Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
                     float alpha, const float* a, const float* b, float beta,
                     float* c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty sum: BLAS would reject the leading dimensions, and the answer is
    // just beta·c (beta == 0 overwrites, as BLAS does, even NaNs).
    if (beta == 0.0f) {
      Fill(c, static_cast<int64_t>(m) * n, 0.0f);
    } else {
      Scale(c, static_cast<int64_t>(m) * n, beta);
    }
    return;
  }
  // Row-major: op(a) is m×k, so a is stored m×k (lda = k) or k×m (lda = m).
  // oneDNN's sgemm (row-major, JIT-compiled for this CPU's vector width):
  // faster than Debian's OpenBLAS 0.3.21 on these shapes, which on some of
  // this project's virtual machines takes the CPU for a Prescott and runs
  // SSE3 kernels, 4-5 times slower per core (core/device/README.md).
  const int lda = transpose_a ? m : k;
  const int ldb = transpose_b ? k : n;
  const bool bf16 = precision_ == Precision::kBf16;
  if (bf16) {
    // bf16 autocast's matmul: both inputs rounded to bf16 (copies: a and b
    // are often parameters, the float32 master weights), their products
    // exact in float32, float32 sums (sgemm), the result rounded to bf16
    // below. The rounding loops share the threads as the element-wise
    // kernels do.
    const int64_t a_count = int64_t{m} * k;
    const int64_t b_count = int64_t{k} * n;
    if (static_cast<int64_t>(rounded_a_.size()) < a_count) {
      rounded_a_.resize(a_count);
    }
    if (static_cast<int64_t>(rounded_b_.size()) < b_count) {
      rounded_b_.resize(b_count);
    }
    float* rounded_a = rounded_a_.data();
    float* rounded_b = rounded_b_.data();
    dnnl_->UseThreads();
    ForEachBlock(a_count, [&](int64_t i, int count) {
      RoundSpan(rounded_a + i, a + i, count);
    });
    ForEachBlock(b_count, [&](int64_t i, int count) {
      RoundSpan(rounded_b + i, b + i, count);
    });
    a = rounded_a;
    b = rounded_b;
  }
  if (int64_t{m} * n * k < kParallelGemmWork) {
    dnnl_->UseOneThread();
  } else {
    dnnl_->UseThreads();
  }
  const dnnl_status_t status =
      dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                 alpha, a, lda, b, ldb, beta, c, n);
  GS_CHECK(status == dnnl_success)
      << "dnnl_sgemm(" << m << "x" << n << "x" << k << ") failed with status "
      << static_cast<int>(status);
  if (bf16) {
    dnnl_->UseThreads();
    ForEachBlock(int64_t{m} * n,
                 [&](int64_t i, int count) { RoundSpanInPlace(c + i, count); });
  }
}

void CpuDevice::AddRowBias(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + static_cast<int64_t>(r) * cols;
    ForEachBlock(cols,
                 [&](int64_t c, int n) { BiasSpan(row + c, bias + c, n); });
  }
}

void CpuDevice::SumRows(const float* x, float* out, int rows, int cols) {
  // Row by row rather than column by column: every pass reads one contiguous
  // row and adds it to `out`, which stays in cache.
  std::fill(out, out + std::max(cols, 0), 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<int64_t>(r) * cols;
    ForEachBlock(cols, [&](int64_t c, int n) { AddSpan(out + c, row + c, n); });
  }
}

void CpuDevice::ReluForward(float* x, int64_t count) {
  dnnl_->UseThreads();
  ForEachBlock(count, [&](int64_t i, int n) { ReluSpan(x + i, n); });
}

void CpuDevice::ReluBackward(const float* y, float* dy, int64_t count) {
  dnnl_->UseThreads();
  ForEachBlock(count,
               [&](int64_t i, int n) { ReluBackwardSpan(y + i, dy + i, n); });
}

void CpuDevice::ReluBackwardOfSum(const float* y, const InputTensor& x,
                                  const InputTensor& dy, float* out,
                                  int64_t count) {
  const float* addend = Widened(x, count, bf16_x_);
  dnnl_->UseThreads();
  ForEachBlock(count, [&](int64_t i, int n) {
    // dy's float32 values into out (a no-op in place), then the pass.
    if (dy.bf16 != nullptr) {
      bfloat16::FromBits(dy.bf16 + i, n, out + i);
    } else if (dy.values != out) {
      std::copy(dy.values + i, dy.values + i + n, out + i);
    }
    ReluBackwardOfSumSpan(y + i, addend + i, out + i, n);
  });
}

void CpuDevice::ApplyEpilogue(float* y, int64_t count,
                              const BatchNormEpilogue& epilogue) {
  if (epilogue.residual == nullptr && !epilogue.relu &&
      epilogue.bf16_copy == nullptr) {
    return;
  }
  dnnl_->UseThreads();
  ForEachBlock(count, [&](int64_t i, int n) {
    EpilogueSpan(y + i,
                 epilogue.residual == nullptr ? nullptr : epilogue.residual + i,
                 epilogue.relu, n);
    if (epilogue.bf16_copy != nullptr) {
      bfloat16::RoundToBits(y + i, n, epilogue.bf16_copy + i);
    }
  });
}

void CpuDevice::WriteBf16Copy(const float* y, int64_t count, uint16_t* copy) {
  if (copy == nullptr) return;
  dnnl_->UseThreads();
  ForEachBlock(count, [&](int64_t i, int n) {
    bfloat16::RoundToBits(y + i, n, copy + i);
  });
}

void CpuDevice::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                    int rows, int classes, float* dlogits,
                                    float* loss) {
  if (rows <= 0 || classes <= 0) {
    *loss = 0.0f;
    return;
  }
  const float inv_rows = km::InverseRows(rows);
  // The batch loss is a sum of `rows` terms; double keeps it independent of the
  // batch size's rounding.
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const int64_t offset = static_cast<int64_t>(r) * classes;
    total += km::SoftmaxCrossEntropyRow(logits + offset, labels[r], classes,
                                        inv_rows, dlogits + offset);
  }
  *loss = km::MeanLoss(total, rows);
}

void CpuDevice::Scale(float* x, int64_t count, float alpha) {
  ForEachBlock(count, [&](int64_t i, int n) { ScaleSpan(x + i, alpha, n); });
}

void CpuDevice::Fill(float* x, int64_t count, float value) {
  if (count <= 0) return;
  std::fill(x, x + count, value);
}

void CpuDevice::Im2Col(const float* input, const ConvGeometry& g,
                       float* columns) {
  const int64_t rows = g.column_rows();
  const int64_t cols = g.column_cols();
  for (int64_t row = 0; row < rows; ++row) {
    km::Im2ColRow(input, g, row, columns + row * cols);
  }
}

void CpuDevice::Col2Im(const float* columns, const ConvGeometry& g,
                       float* input_grad) {
  // A scatter, row by row (each row's taps read contiguously): every input
  // element receives its terms in increasing output-pixel order, the order of
  // kernel_math.h's Col2ImValue gather, which the GPU runs.
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t c = 0; c < g.channels; ++c) {
      for (int64_t h = 0; h < g.height; ++h) {
        float* out = input_grad + b * g.input.batch + c * g.input.channel +
                     h * g.input.row;
        for (int64_t w = 0; w < g.width; ++w) out[w * g.input.column] = 0.0f;
      }
    }
  }
  const int64_t cols = g.column_cols();
  for (int64_t b = 0; b < g.batch; ++b) {
    float* image = input_grad + b * g.input.batch;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const float* row =
            columns + ((b * g.out_height + oh) * g.out_width + ow) * cols;
        const int64_t ih0 = oh * g.stride - g.padding;
        const int64_t iw0 = ow * g.stride - g.padding;
        int64_t col = 0;
        for (int64_t c = 0; c < g.channels; ++c) {
          float* plane = image + c * g.input.channel;
          for (int kh = 0; kh < g.kernel; ++kh) {
            const int64_t ih = ih0 + kh;
            if (ih < 0 || ih >= g.height) {
              col += g.kernel;
              continue;
            }
            for (int kw = 0; kw < g.kernel; ++kw, ++col) {
              const int64_t iw = iw0 + kw;
              if (iw < 0 || iw >= g.width) continue;
              float& target = plane[ih * g.input.row + iw * g.input.column];
              target = km::Sum(target, row[col]);
            }
          }
        }
      }
    }
  }
}

const float* CpuDevice::Widened(const InputTensor& x, int64_t count,
                                std::vector<float>& scratch) {
  if (x.bf16 == nullptr) return x.values;
  if (static_cast<int64_t>(scratch.size()) < count) scratch.resize(count);
  float* widened = scratch.data();
  dnnl_->UseThreads();
  ForEachBlock(count, [&](int64_t i, int n) {
    bfloat16::FromBits(x.bf16 + i, n, widened + i);
  });
  return widened;
}

void CpuDevice::BatchNormForwardTraining(
    const InputTensor& input, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* beta, float momentum, float epsilon,
    float* y, float* saved_mean, float* saved_inv_std, float* running_mean,
    float* running_var, const BatchNormEpilogue& epilogue) {
  if (rows <= 0 || channels <= 0) return;
  const BatchNormShape shape = CheckedShape(rows, channels, plane);
  const float* x = Widened(input, shape.count(), bf16_x_);
  if (DnnlBatchNorm* kernel = BatchNormFor(rows, channels, plane, epsilon)) {
    kernel->ForwardTraining(x, gamma, beta, momentum, y, saved_mean,
                            saved_inv_std, running_mean, running_var);
    ApplyEpilogue(y, shape.count(), epilogue);
    return;
  }
  dnnl_->UseThreads();
  std::vector<double> sum(channels, 0.0), sum_squares(channels, 0.0);
  ForEachInChannelOrder(shape, [&](int64_t c, int64_t i) {
    const double value = x[i];
    sum[c] += value;
    sum_squares[c] += value * value;
  });
  for (int c = 0; c < channels; ++c) {
    const float mean = km::BatchMean(sum[c], rows);
    const float variance = km::BatchVariance(sum[c], sum_squares[c], rows);
    saved_mean[c] = mean;
    saved_inv_std[c] = km::InverseStd(variance, epsilon);
    running_mean[c] = km::RunningAverage(running_mean[c], mean, momentum);
    running_var[c] = km::RunningAverage(
        running_var[c], km::UnbiasedVariance(variance, rows), momentum);
  }
  Normalize(x, shape, {saved_mean, saved_inv_std, gamma, beta}, epilogue, y);
  WriteBf16Copy(y, shape.count(), epilogue.bf16_copy);
}

void CpuDevice::BatchNormForwardInference(
    const InputTensor& input, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* beta, const float* running_mean,
    const float* running_var, float epsilon, float* y,
    const BatchNormEpilogue& epilogue) {
  if (rows <= 0 || channels <= 0) return;
  const BatchNormShape shape = CheckedShape(rows, channels, plane);
  const float* x = Widened(input, shape.count(), bf16_x_);
  if (DnnlBatchNorm* kernel = BatchNormFor(rows, channels, plane, epsilon)) {
    kernel->ForwardInference(x, gamma, beta, running_mean, running_var, y);
    ApplyEpilogue(y, shape.count(), epilogue);
    return;
  }
  std::vector<float> inv_std(channels);
  for (int c = 0; c < channels; ++c) {
    inv_std[c] = km::InverseStd(running_var[c], epsilon);
  }
  dnnl_->UseThreads();
  Normalize(x, shape, {running_mean, inv_std.data(), gamma, beta}, epilogue, y);
  WriteBf16Copy(y, shape.count(), epilogue.bf16_copy);
}

void CpuDevice::BatchNormBackward(const InputTensor& x, const InputTensor& dy,
                                  int64_t rows, int channels, int64_t plane,
                                  const float* gamma, const float* saved_mean,
                                  const float* saved_inv_std, float* dx,
                                  float* dgamma, float* dbeta,
                                  const float* relu_output, uint16_t* dx_bf16) {
  if (rows <= 0 || channels <= 0) return;
  const int64_t count = CheckedShape(rows, channels, plane).count();
  if (dx == nullptr) {
    // Only the bf16 values are asked for: the float32 ones go to scratch.
    GS_CHECK(dx_bf16 != nullptr)
        << "BatchNormBackward needs dx or dx_bf16 on " << name();
    if (static_cast<int64_t>(bf16_dx_.size()) < count) bf16_dx_.resize(count);
    dx = bf16_dx_.data();
  }
  BatchNormBackwardFloat(
      Widened(x, count, bf16_x_), Widened(dy, count, bf16_dy_), rows, channels,
      plane, gamma, saved_mean, saved_inv_std, dx, dgamma, dbeta, relu_output);
  WriteBf16Copy(dx, count, dx_bf16);
}

void CpuDevice::BatchNormBackwardFloat(
    const float* x, const float* dy, int64_t rows, int channels, int64_t plane,
    const float* gamma, const float* saved_mean, const float* saved_inv_std,
    float* dx, float* dgamma, float* dbeta, const float* relu_output) {
  if (DnnlBatchNorm* kernel = BatchNormFor(rows, channels, plane, -1.0f)) {
    const float* grad = dy;
    if (relu_output != nullptr) {
      const int64_t count = rows * channels;
      if (static_cast<int64_t>(relu_masked_dy_.size()) < count) {
        relu_masked_dy_.resize(count);
      }
      float* masked = relu_masked_dy_.data();
      dnnl_->UseThreads();
      ForEachBlock(count, [&](int64_t i, int n) {
        MaskedGradientSpan(relu_output + i, dy + i, masked + i, n);
      });
      grad = masked;
    }
    kernel->Backward(x, grad, gamma, saved_mean, saved_inv_std, dx, dgamma,
                     dbeta);
    return;
  }
  dnnl_->UseThreads();
  const BatchNormShape shape{rows, channels, plane};
  const auto x_hat = [&](int64_t i, int64_t c) {
    return km::Normalized(x[i], saved_mean[c], saved_inv_std[c]);
  };
  std::vector<double> sum_dy(channels, 0.0), sum_dy_x_hat(channels, 0.0);
  ForEachInChannelOrder(shape, [&](int64_t c, int64_t i) {
    const float grad = km::GradientBeforeRelu(dy, relu_output, i);
    sum_dy[c] += grad;
    sum_dy_x_hat[c] += static_cast<double>(grad) * x_hat(i, c);
  });
  std::vector<float> gamma_inv_std(channels), mean_dy(channels),
      mean_dy_x_hat(channels);
  for (int c = 0; c < channels; ++c) {
    dbeta[c] = static_cast<float>(sum_dy[c]);
    dgamma[c] = static_cast<float>(sum_dy_x_hat[c]);
    gamma_inv_std[c] = gamma[c] * saved_inv_std[c];
    // From the float sums, as the GPU (which keeps no double per channel
    // between its kernels) computes them.
    mean_dy[c] = km::BatchMean(dbeta[c], rows);
    mean_dy_x_hat[c] = km::BatchMean(dgamma[c], rows);
  }
  ForEachElement(shape, [&](int64_t i, int64_t c) {
    dx[i] = km::BatchNormInputGradient(
        km::GradientBeforeRelu(dy, relu_output, i), x_hat(i, c),
        gamma_inv_std[c], mean_dy[c], mean_dy_x_hat[c]);
  });
}

// Max pooling runs window position by window position over a pixel's
// channels, which lie side by side in NHWC: contiguous, division-free loops
// instead of kernel_math.h's per-element window walk (the same comparisons in
// the same order, so the same maxima and positions: km::MaxPoolValue's rule).
// The backward scatters each output's gradient to its recorded maximum,
// adding in output order, the order kernel_math.h's gather adds in, so the
// sums have the same bits.
void CpuDevice::MaxPoolForward(const float* x, const PoolGeometry& g, float* y,
                               int32_t* where) {
  const int64_t channels = g.channels;
  for (int64_t b = 0; b < g.batch; ++b) {
    const float* image = x + b * g.height * g.width * channels;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const int64_t out =
            ((b * g.out_height + oh) * g.out_width + ow) * channels;
        float* __restrict best = y + out;
        int32_t* __restrict best_at = where + out;
        for (int kh = 0; kh < g.kernel; ++kh) {
          for (int kw = 0; kw < g.kernel; ++kw) {
            const float* __restrict value =
                image + ((oh * g.stride + kh) * g.width + ow * g.stride + kw) *
                            channels;
            const int32_t at = kh * g.kernel + kw;
            if (at == 0) {
              for (int64_t c = 0; c < channels; ++c) {
                best[c] = value[c];
                best_at[c] = 0;
              }
              continue;
            }
            for (int64_t c = 0; c < channels; ++c) {
              // PyTorch's rule (km::MaxPoolValue): a NaN takes the place.
              const bool better = value[c] > best[c] || value[c] != value[c];
              best[c] = better ? value[c] : best[c];
              best_at[c] = better ? at : best_at[c];
            }
          }
        }
      }
    }
  }
}

void CpuDevice::MaxPoolBackward(const float* dy, const int32_t* where,
                                const PoolGeometry& g, float* dx) {
  const int64_t channels = g.channels;
  std::memset(dx, 0, static_cast<size_t>(g.input_count()) * sizeof(float));
  for (int64_t b = 0; b < g.batch; ++b) {
    float* image = dx + b * g.height * g.width * channels;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const int64_t out =
            ((b * g.out_height + oh) * g.out_width + ow) * channels;
        const float* __restrict grad = dy + out;
        const int32_t* __restrict at = where + out;
        for (int kh = 0; kh < g.kernel; ++kh) {
          for (int kw = 0; kw < g.kernel; ++kw) {
            float* __restrict target =
                image + ((oh * g.stride + kh) * g.width + ow * g.stride + kw) *
                            channels;
            const int32_t here = kh * g.kernel + kw;
            AddAtMaximaSpan(target, grad, at, here, channels);
          }
        }
      }
    }
  }
}

void CpuDevice::GlobalAvgPoolForward(const float* x, int batch, int spatial,
                                     int channels, ActivationLayout layout,
                                     float* y) {
  if (layout == ActivationLayout::kNchw) {
    // Each (b, c)'s pixels lie side by side, a plane of their own.
    for (int64_t i = 0; i < int64_t{batch} * channels; ++i) {
      y[i] = km::PlaneMean(x, i, spatial);
    }
    return;
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < channels; ++c) {
      y[b * channels + c] = km::SpatialMean(x, b, c, spatial, channels);
    }
  }
}

void CpuDevice::GlobalAvgPoolBackward(const float* dy, int batch, int spatial,
                                      int channels, ActivationLayout layout,
                                      float* dx) {
  if (layout == ActivationLayout::kNchw) {
    for (int64_t i = 0; i < int64_t{batch} * channels; ++i) {
      const float grad = km::SpatialMeanGradient(dy[i], spatial);
      std::fill(dx + i * spatial, dx + (i + 1) * spatial, grad);
    }
    return;
  }
  for (int64_t b = 0; b < batch; ++b) {
    const float* grad = dy + b * channels;
    for (int64_t s = 0; s < spatial; ++s) {
      float* out = dx + (b * spatial + s) * channels;
      for (int64_t c = 0; c < channels; ++c) {
        out[c] = km::SpatialMeanGradient(grad[c], spatial);
      }
    }
  }
}

void CpuDevice::Add(float* y, const float* x, int64_t count) {
  dnnl_->UseThreads();
  ForEachBlock(count, [&](int64_t i, int n) { SumSpan(y + i, x + i, n); });
}

void CpuDevice::SgdUpdate(float* params, const float* grads, float* velocity,
                          int64_t count, float lr, float momentum,
                          float weight_decay) {
  dnnl_->UseThreads();
  if (momentum == 0.0f) {
    ForEachBlock(count, [&](int64_t i, int n) {
      SgdSpan(params + i, grads + i, n, lr, weight_decay);
    });
    return;
  }
  // PyTorch starts the buffer at the first gradient (v = g); the velocity
  // buffer is zero-filled at allocation, so momentum·0 + g gives exactly that.
  ForEachBlock(count, [&](int64_t i, int n) {
    SgdMomentumSpan(params + i, grads + i, velocity + i, n, lr, momentum,
                    weight_decay);
  });
}

void CpuDevice::AdamUpdate(float* params, const float* grads, float* m,
                           float* v, int64_t count, float lr,
                           const AdamState& state, float weight_decay) {
  const km::AdamCoefficients coefficients = km::MakeAdamCoefficients(
      lr, state.beta1, state.beta2, state.epsilon, weight_decay, state.step);
  // A plain loop: sqrtf must set errno for negative inputs under the default
  // -fmath-errno, and that branch keeps GCC from vectorizing this one (it
  // would with -fno-math-errno). Adam is not the default optimizer.
  for (int64_t i = 0; i < count; ++i) {
    km::AdamStep(params[i], m[i], v[i], grads[i], coefficients);
  }
}

}  // namespace gradsync
