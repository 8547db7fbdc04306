// The shapes of the convolutional layers' kernels (im2col, col2im, max
// pooling), as plain structs that the Device interface, the CPU loops and the
// CUDA kernels share. No CUDA or Abseil here: kernel_math.h includes it under
// nvcc.
//
// Activations are NHWC: a batch of images is a [batch·height·width × channels]
// row-major matrix, so a convolution's output is one GEMM's result without a
// transpose, a convolution's bias is AddRowBias, and batch normalisation
// reduces over rows per column. The data sets' rows are CHW (like PyTorch
// tensors); the first convolution reads them in place through ImageLayout.
// A device may ask for NCHW activations instead (ActivationLayout), where its
// convolution library computes faster so; ResNet keeps them so there.
#pragma once

#include <cstdint>

// __host__ __device__ where nvcc compiles this header, nothing for GCC.
#if !defined(GS_HOST_DEVICE)
#if defined(__CUDACC__)
#define GS_HOST_DEVICE __host__ __device__
#else
#define GS_HOST_DEVICE
#endif
#endif

namespace gradsync {

// The layout a model keeps its image activations in (Device::
// activation_layout). kNhwc: [batch·height·width × channels], every model's.
// kNchw: [batch × channels × height·width], PyTorch's default tensors: kept
// by the models that support it (ResNet) on a device that asks for it, so
// that a convolution library whose fastest kernels take NCHW runs them on
// the layers' own buffers, with no copies in between.
enum class ActivationLayout { kNhwc, kNchw };

// Where element (b, c, h, w) of an image batch lies, in floats:
// b·batch + c·channel + h·row + w·column.
struct ImageLayout {
  int64_t batch = 0;
  int64_t channel = 0;
  int64_t row = 0;
  int64_t column = 0;
};

// Row-major NHWC (the layers' own activations).
inline ImageLayout NhwcLayout(int channels, int height, int width) {
  return ImageLayout{int64_t{height} * width * channels, 1,
                     int64_t{width} * channels, channels};
}

// Row-major NCHW (the data sets' rows, PyTorch's tensors).
inline ImageLayout NchwLayout(int channels, int height, int width) {
  return ImageLayout{int64_t{channels} * height * width,
                     int64_t{height} * width, width, 1};
}

// The ImageLayout of activations kept in `layout`.
inline ImageLayout LayoutOf(ActivationLayout layout, int channels, int height,
                            int width) {
  return layout == ActivationLayout::kNchw
             ? NchwLayout(channels, height, width)
             : NhwcLayout(channels, height, width);
}

// A 4-D tensor of dims (n, c, h, w) laid out as `layout` says, walked in
// NHWC order (n, then h, then w, channels fastest) whatever its layout: the
// bf16 casts of --precision=bf16 read a tensor in this order and write it
// contiguously (the widening casts read contiguously and write through the
// layout), so an NCHW input becomes NHWC, and a weight in PyTorch's order
// [out][in][k][k] (n = out, c = in, h = w = k) becomes KRSC, cuDNN's NHWC
// filter order, in the same pass as the rounding.
struct NhwcWalk {
  int64_t n = 0;
  int64_t c = 0;
  int64_t h = 0;
  int64_t w = 0;
  ImageLayout layout;

  GS_HOST_DEVICE int64_t count() const { return n * c * h * w; }
  // Where, under `layout`, the element that comes `index`-th in NHWC order
  // lies (index in [0, count())).
  GS_HOST_DEVICE int64_t OffsetOf(int64_t index) const {
    const int64_t channel = index % c;
    index /= c;
    const int64_t column = index % w;
    index /= w;
    const int64_t row = index % h;
    const int64_t image = index / h;
    return image * layout.batch + channel * layout.channel + row * layout.row +
           column * layout.column;
  }
};

// `count` contiguous elements as an NhwcWalk (one image, one pixel, `count`
// channels): OffsetOf(i) == i.
inline NhwcWalk ContiguousWalk(int64_t count) {
  NhwcWalk walk;
  walk.n = 1;
  walk.c = count;
  walk.h = 1;
  walk.w = 1;
  walk.layout = ImageLayout{count, 1, count, count};
  return walk;
}

// A 2-D convolution's input and window. The column matrix of im2col is
// [batch·out_height·out_width × channels·kernel·kernel]: row (b, oh, ow) holds
// the input window of that output pixel, column (c, kh, kw) in that order, so
// a PyTorch weight [out_channels][channels][kernel][kernel] read as an
// [out_channels × channels·kernel·kernel] matrix multiplies it directly.
// Positions outside the image (padding) read as zero.
struct ConvGeometry {
  int batch = 0;
  int channels = 0;
  int height = 0;
  int width = 0;
  int kernel = 1;  // square kernels: kernel × kernel
  int stride = 1;
  int padding = 0;
  int out_height = 0;
  int out_width = 0;
  ImageLayout input;  // of the input (and of the input gradient of col2im)
  // The output (and its gradient) NCHW, [batch × out_channels × out_height·
  // out_width], instead of the layers' NHWC [batch·out_height·out_width ×
  // out_channels]: for ActivationLayout::kNchw. Only a device's convolution
  // library writes it (Device::CreateConvolution); the im2col path's output
  // is one GEMM's NHWC result.
  bool nchw_output = false;

  GS_HOST_DEVICE int64_t column_rows() const {
    return int64_t{batch} * out_height * out_width;
  }
  GS_HOST_DEVICE int64_t column_cols() const {
    return int64_t{channels} * kernel * kernel;
  }
  GS_HOST_DEVICE int64_t input_count() const {
    return int64_t{batch} * channels * height * width;
  }
};

// Max pooling over NHWC activations, square windows, no padding.
struct PoolGeometry {
  int batch = 0;
  int channels = 0;
  int height = 0;
  int width = 0;
  int kernel = 2;
  int stride = 2;
  int out_height = 0;
  int out_width = 0;

  GS_HOST_DEVICE int64_t output_count() const {
    return int64_t{batch} * out_height * out_width * channels;
  }
  GS_HOST_DEVICE int64_t input_count() const {
    return int64_t{batch} * height * width * channels;
  }
};

// PyTorch's output size: floor((in + 2·padding - kernel) / stride) + 1; 0 or
// less when the window does not fit.
GS_HOST_DEVICE inline int ConvOutputSize(int in, int kernel, int stride,
                                         int padding) {
  const int span = in + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace gradsync
