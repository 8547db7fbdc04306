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
