#include "core/device/convolution_kernel.h"

#include "core/base/logging.h"

namespace gradsync {

// A caller asks AcceptsBf16Operands first; reaching these is a bug in the
// caller, not a state to recover from.
void ConvolutionKernel::ForwardFromBf16(const uint16_t*, const float*,
                                        uint16_t*) {
  GS_LOG(FATAL) << "ForwardFromBf16 on a convolution kernel that does not "
                   "accept bf16 operands (ask AcceptsBf16Operands first)";
}

void ConvolutionKernel::BackwardFromBf16(const uint16_t*, const uint16_t*,
                                         const float*, float*, uint16_t*,
                                         absl::FunctionRef<void()>) {
  GS_LOG(FATAL) << "BackwardFromBf16 on a convolution kernel that does not "
                   "accept bf16 operands (ask AcceptsBf16Operands first)";
}

}  // namespace gradsync
