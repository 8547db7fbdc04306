// Pooling layers over NHWC activations (core/device/layer_geometry.h): max
// pooling with square windows and no padding, and global average pooling
// (each image's channels averaged over its pixels, [images × channels]).
#pragma once

#include <cstdint>

#include "core/device/device.h"
#include "core/device/layer_geometry.h"

namespace gradsync {

class MaxPool2d {
 public:
  MaxPool2d(int kernel, int stride) : kernel_(kernel), stride_(stride) {}

  PoolGeometry Geometry(int images, int channels, int height, int width) const;

  // y [images·oh·ow × channels]; `where` (one int32 per output) remembers the
  // maxima for the backward.
  void Forward(Device& device, const float* x, const PoolGeometry& g, float* y,
               int32_t* where) const;
  // Overwrites dx.
  void Backward(Device& device, const float* dy, const int32_t* where,
                const PoolGeometry& g, float* dx) const;

 private:
  const int kernel_;
  const int stride_;
};

// Global average pooling: no state, two device calls.
// x (dx) in `layout` (NHWC unless the model keeps NCHW activations).
inline void GlobalAvgPoolForward(
    Device& device, const float* x, int images, int pixels, int channels,
    float* y, ActivationLayout layout = ActivationLayout::kNhwc) {
  device.GlobalAvgPoolForward(x, images, pixels, channels, layout, y);
}
inline void GlobalAvgPoolBackward(
    Device& device, const float* dy, int images, int pixels, int channels,
    float* dx, ActivationLayout layout = ActivationLayout::kNhwc) {
  device.GlobalAvgPoolBackward(dy, images, pixels, channels, layout, dx);
}

}  // namespace gradsync
