// A check any device can run on itself: its fused batch-norm epilogues
// (device.h's BatchNormEpilogue, BatchNormBackward's relu_output and
// ReluBackwardOfSum) give exactly the bits of the unfused passes they stand
// for — BatchNorm*, Add, ReluForward and ReluBackward run one after the
// other — on random data with channels of different offsets and scales, a
// third of the ReLU's inputs negative; and the bf16 copies the forward's
// epilogue and the backward may leave for a convolution (bfloat16.h's
// rounding of the float32 values, bit for bit), and every pass given x or a
// gradient as bf16 bits against the same pass given them widened. The fusion
// changes which passes read memory, never a value, so the comparison is exact;
// cpu_device_test runs it on the CPU's two batch norms, device_parity_test
// on the GPU.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/device/device.h"

namespace gradsync {

// OK, or what differs first (which pass, which element, both values).
absl::Status CheckBatchNormEpilogues(Device& device, int64_t rows,
                                     int channels);

}  // namespace gradsync
