#include "core/model/pooling.h"

namespace gradsync {

PoolGeometry MaxPool2d::Geometry(int images, int channels, int height,
                                 int width) const {
  PoolGeometry g;
  g.batch = images;
  g.channels = channels;
  g.height = height;
  g.width = width;
  g.kernel = kernel_;
  g.stride = stride_;
  g.out_height = ConvOutputSize(height, kernel_, stride_, 0);
  g.out_width = ConvOutputSize(width, kernel_, stride_, 0);
  return g;
}

void MaxPool2d::Forward(Device& device, const float* x, const PoolGeometry& g,
                        float* y, int32_t* where) const {
  device.MaxPoolForward(x, g, y, where);
}

void MaxPool2d::Backward(Device& device, const float* dy, const int32_t* where,
                         const PoolGeometry& g, float* dx) const {
  device.MaxPoolBackward(dy, where, g, dx);
}

}  // namespace gradsync
